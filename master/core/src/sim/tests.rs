use super::*;
use crate::sched::index::trace::{self, TracePod};
use hetsched_common::NodeResources;

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\n\
    c0,32000,65536,0,\n\
    g0,32000,131072,2,T4\n\
    g1,64000,262144,4,G2\n";

const PODS: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time,scheduled_time\n\
    p0,4000,1024,1,1000,,0,100,0\n\
    p1,2000,1024,1,500,,10,50,10\n\
    p2,8000,1024,0,0,,10,,10\n\
    p3,4000,1024,2,1000,G2,20,60,25\n\
    p4,4000,1024,4,1000,,30,90,30\n\
    p5,1000,512,1,300,,30,40,30\n";

fn input() -> (Vec<SimNode>, Vec<TracePod>) {
    let nodes = trace::parse_nodes(NODES)
        .expect("nodes")
        .into_iter()
        .map(SimNode::from)
        .collect();
    (nodes, trace::parse_pods(PODS).expect("pods"))
}

fn sim(policy: &str, mode: Mode, scale: f64) -> RunReport {
    let (nodes, pods) = input();
    let order = ordered(&pods, Order::Creation, 7);
    let tasks = tasks_from_trace(&pods, &order, scale, 1);
    run(
        &nodes,
        &tasks,
        &policy.parse().expect("policy"),
        mode,
        7,
        &mut |_| {},
    )
}

#[test]
fn policy_names_take_an_optional_queueing_prefix() {
    let p: PolicyName = "fifo-best-fit".parse().expect("name");
    assert_eq!(
        (p.queueing, p.placement),
        (Queueing::Fifo, PolicyKind::BestFit)
    );
    let p: PolicyName = "frag".parse().expect("name");
    assert_eq!(
        (p.queueing, p.placement, p.given.as_str()),
        (Queueing::Fifo, PolicyKind::Frag, "frag")
    );
    let p: PolicyName = "drf-best-fit".parse().expect("name");
    assert_eq!(p.queueing, Queueing::Drf);
    let p: PolicyName = "pipeline-frag".parse().expect("name");
    assert_eq!(
        (p.queueing, p.placement),
        (Queueing::Pipeline, PolicyKind::Frag)
    );
    let p: PolicyName = "pipeline-auto".parse().expect("name");
    assert_eq!(
        (p.queueing, p.placement),
        (Queueing::Pipeline, PolicyKind::Auto)
    );
    assert!("drf-worst-fit".parse::<PolicyName>().is_err());
    assert!("fifo-".parse::<PolicyName>().is_err());
}

#[test]
fn arrival_only_records_the_first_failure_and_goes_on() {
    // 6 GPUs: p0 1, p1 0.5, p3 2 (G2 only), p4 4 → p4 cannot fit once p0/p1 took a G2 or T4.
    let r = sim("best-fit", Mode::ArrivalOnly, 1.0);
    assert_eq!(r.placed + r.failed, 6);
    assert_eq!(r.curve.len(), 6);
    if let Some(i) = r.first_failure_index {
        let share = r.unallocated_gpu_share_at_first_failure.expect("share");
        assert!((0.0..=1.0).contains(&share));
        assert!(i < 6);
    }
    assert!(r.cpu_queue_mean_s.is_none());
}

#[test]
fn timed_mode_queues_and_releases() {
    let r = sim("least-fit", Mode::Timed, 1.0);
    assert_eq!(r.placed, 6, "{r:?}");
    assert_eq!(r.failed, 0);
    assert!(r.gpu_queue_mean_s.is_some());
    assert!(r.first_failure_index.is_none());
    // Compressed 10×, the 4-GPU pod must wait for the G2 node to drain.
    let squeezed = sim("best-fit", Mode::Timed, 10.0);
    assert_eq!(squeezed.placed, 6, "{squeezed:?}");
}

#[test]
fn same_input_same_report() {
    for p in ["frag", "random", "fifo-next-fit"] {
        for mode in [Mode::ArrivalOnly, Mode::Timed] {
            assert_eq!(sim(p, mode, 3.0), sim(p, mode, 3.0), "{p} {mode:?}");
        }
    }
}

#[test]
fn generated_variants_are_seeded_and_parse_back() {
    let (nodes, pods) = input();
    let caps: Vec<NodeResources> = nodes.into_iter().map(|n| n.resources).collect();
    let models = gen::ModelShapes::of(&caps);
    for kind in ["gpushare", "multigpu", "gpuspec", "cpu"] {
        let k: gen::VariantKind = kind.parse().expect("kind");
        let a = gen::variant(&pods, k, 60, 50, 3, &models).expect("variant");
        let b = gen::variant(&pods, k, 60, 50, 3, &models).expect("variant");
        assert_eq!(a, b);
        assert_eq!(a.len(), 50);
        let back = trace::parse_pod_list(&gen::to_csv(&a)).expect("parses");
        assert!(!back.has_times);
        assert_eq!(back.pods.len(), 50);
        // A pinned pod is pinned to a model with a node that can hold it.
        for p in &a {
            if p.request.gpu.models.first().is_some_and(|m| m == "T4") {
                assert!(p.request.gpu.count <= 2, "{p:?}");
            }
        }
    }
    assert!(gen::variant(&pods, gen::VariantKind::Cpu, 101, 5, 1, &models).is_err());
}

#[test]
fn the_plot_is_an_svg_with_a_line_per_policy() {
    let s = plot::svg(
        "t",
        &[("a".into(), vec![0.1, 0.5]), ("b<".into(), vec![0.2])],
    );
    assert!(s.starts_with("<svg"));
    assert_eq!(s.matches("<polyline").count(), 2);
    assert!(s.contains("b&lt;"));
}

#[test]
fn a_scenario_with_priorities_and_partitions_compares_preemption_on_and_off() {
    use super::scenario::{ArrivalGroup, NodeGroup, Scenario};
    let arrival = |user: &str, at_s: f64, count: u32, duration_s: f64| ArrivalGroup {
        at_s,
        count,
        every_s: 0.0,
        user: user.into(),
        kind: String::new(),
        cpus: 1.0,
        mem: 10,
        gpus: 0.0,
        gpu_models: Vec::new(),
        engines: Default::default(),
        duration_s: Some(duration_s),
        partition: "batch".into(),
    };
    let sc = Scenario {
        nodes: vec![
            NodeGroup {
                name: "b".into(),
                count: 1,
                cpus: 4.0,
                mem: 1000,
                gpus: 0,
                gpu_model: String::new(),
                engines: Default::default(),
                partitions: vec!["batch".into()],
            },
            // A node outside the partition: never used by its tasks.
            NodeGroup {
                name: "other".into(),
                count: 1,
                cpus: 64.0,
                mem: 100_000,
                gpus: 0,
                gpu_model: String::new(),
                engines: Default::default(),
                partitions: vec!["other".into()],
            },
        ],
        arrivals: vec![arrival("lo", 0.0, 4, 100.0), arrival("hi", 10.0, 2, 10.0)],
        priorities: Some(
            "base_priority = 0\n[[users]]\nname = \"hi\"\npriority = 100\npartition = \"batch\"\n"
                .into(),
        ),
    };
    let (nodes, tasks) = sc.build().expect("scenario");
    let setup = sc.setup().expect("priorities");
    let report = |name: &str| {
        let p: PolicyName = name.parse().expect("policy");
        run_with(&nodes, &tasks, &p, Mode::Timed, 1, &setup, &mut |_| {})
    };
    let on = report("fifo-best-fit");
    let off = report("fifo-best-fit-nopreempt");
    // With preemption the high-priority tasks start at once; without it they wait for the
    // low-priority ones to end (90 s).
    assert_eq!(on.preemptions, 2, "{on:?}");
    assert_eq!(off.preemptions, 0, "{off:?}");
    assert_eq!(off.placed, 6);
    assert_eq!(on.placed, 6);
    let mean = |r: &RunReport| r.cpu_queue_mean_s.expect("cpu waits");
    assert!(mean(&on) < mean(&off), "{on:?} {off:?}");
    assert!(sc.setup().is_ok());
    let bad = Scenario {
        priorities: Some("base_priority = \"x\"".into()),
        ..Default::default()
    };
    assert!(bad.setup().is_err());
}

/// Issue 53: `--fairshare-half-life` in the simulator. One GPU; user a queues six 100 s GPU
/// tasks at t = 0, user b three at t = 50 s. Without fair share DRF sees two users holding
/// nothing whenever the GPU frees and the tie goes to the earlier submission: b waits for
/// all of a's. With it, a's past use puts b first.
#[test]
fn fair_share_lets_the_user_who_used_less_go_first() {
    let node = SimNode {
        name: "g0".into(),
        resources: NodeResources {
            cpu_milli: 64_000,
            mem_mib: 65_536,
            gpus: vec![hetsched_common::GpuDevice {
                model: "T4".into(),
                free_milli: 1000,
                emulated: true,
            }],
            ..Default::default()
        },
        partitions: Vec::new(),
    };
    let task = |user: &str, i: u64, arrival_ms| SimTask {
        name: format!("{user}{i}"),
        user: user.into(),
        request: hetsched_common::ResourceRequest {
            cpu_milli: 1000,
            mem_mib: 100,
            gpu: hetsched_common::GpuRequest::whole(1),
            ..Default::default()
        },
        arrival_ms,
        duration_ms: Some(100_000),
        partition: String::new(),
    };
    let mut tasks: Vec<SimTask> = (0..6).map(|i| task("a", i, 0)).collect();
    tasks.extend((0..3).map(|i| task("b", i, 50_000)));
    let policy: PolicyName = "drf-best-fit".parse().expect("policy");
    let run_with_half_life = |h: Option<u64>| {
        let setup = Setup {
            fairshare_half_life_ms: h,
            ..Default::default()
        };
        run_with(
            std::slice::from_ref(&node),
            &tasks,
            &policy,
            Mode::Timed,
            1,
            &setup,
            &mut |_| {},
        )
    };
    let off = run_with_half_life(None);
    let on = run_with_half_life(Some(3_600_000));
    let wait = |r: &RunReport, u: &str| r.gpu_queue_mean_s_by_user[u];
    // Off: b starts after a's six (at 600, 700, 800 s), waiting 650 s on average.
    assert!((wait(&off, "b") - 650.0).abs() < 1e-9, "{off:?}");
    assert!(wait(&on, "b") < wait(&off, "b") / 2.0, "{on:?}");
    assert!(wait(&on, "a") > wait(&off, "a"), "{on:?}");
    assert_eq!((on.placed, off.placed), (9, 9));
}
