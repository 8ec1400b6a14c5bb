//! The scheduler driven end to end through the applied log: the chain of stages together.

use super::*;
use crate::sched::index::PolicyKind;
use crate::sched::test_log::Log;
use crate::state::{Command, Outcome};
use hetsched_common::{JobSpec, NodeResources, ResourceRequest};

fn register(cpus: u64, key: u64) -> Command {
    Command::RegisterNode {
        key,
        node: None,
        name: String::new(),
        addr: String::new(),
        capacity: NodeResources {
            cpu_milli: cpus * 1000,
            mem_mib: 1000,
            ..Default::default()
        },
        labels: Default::default(),
        partitions: Vec::new(),
    }
}

fn job(count: u32, cpu_milli: u64) -> Command {
    Command::SubmitJob {
        spec: JobSpec {
            name: String::new(),
            user: String::new(),
            partition: String::new(),
            resources: ResourceRequest {
                cpu_milli,
                mem_mib: 10,
                ..Default::default()
            },
            count,
            command: vec!["true".into()],
            ..Default::default()
        },
    }
}

#[test]
fn least_fit_spreads_and_the_index_follows_applied_changes() {
    let mut sched = IndexedScheduler::new(PolicyKind::LeastFit, 0);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(&mut sched, register(4, 1));
    l.apply(&mut sched, register(2, 2));
    assert_eq!(sched.indexed_nodes(), 2);
    l.apply(&mut sched, job(3, 1000));
    let plan = sched.plan(&l.s);
    // Most free first: node 1 (4 cores), then 1 again (3 left vs 2), then a tie at 2
    // cores each broken by the lower id... least-fit picks the most available.
    let nodes: Vec<u64> = plan.assignments.iter().map(|a| a.node.0).collect();
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[0], 1);
    let applied = l.apply(&mut sched, Command::ApplyPlan(plan));
    assert!(matches!(applied, Outcome::PlanApplied { rejected: 0, .. }));
    // The index now holds exactly the state's free vectors.
    let fresh = {
        let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 0);
        s.reset(&l.s);
        s
    };
    assert_eq!(
        format!("{:?}", sched.index.free(NodeId(1))),
        format!("{:?}", fresh.index.free(NodeId(1)))
    );
    assert_eq!(
        format!("{:?}", sched.index.free(NodeId(2))),
        format!("{:?}", fresh.index.free(NodeId(2)))
    );
    // A node going down leaves the index; nothing is placed on it.
    l.apply(&mut sched, Command::NodeDown { node: NodeId(1) });
    assert_eq!(sched.indexed_nodes(), 1);
    let plan = sched.plan(&l.s);
    assert!(plan.assignments.iter().all(|a| a.node == NodeId(2)));
}

#[test]
fn frag_keeps_cpu_tasks_off_gpu_nodes_and_packs_shared_gpus() {
    use hetsched_common::{GpuDevice, GpuRequest};
    let mut sched = IndexedScheduler::new(PolicyKind::Frag, 0);
    assert_eq!(sched.cpu_policy(), PolicyKind::LeastFit);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(&mut sched, register(4, 1));
    let gpu_node = |key| Command::RegisterNode {
        key,
        node: None,
        name: String::new(),
        addr: String::new(),
        capacity: NodeResources {
            cpu_milli: 16_000,
            mem_mib: 1000,
            gpus: (0..2)
                .map(|_| GpuDevice {
                    model: "T4".into(),
                    free_milli: 1000,
                    emulated: true,
                })
                .collect(),
            ..Default::default()
        },
        labels: Default::default(),
        partitions: Vec::new(),
    };
    l.apply(&mut sched, gpu_node(2));
    l.apply(&mut sched, gpu_node(3));
    // A CPU task: least-fit alone would take a 16-core GPU node; frag sends it to the
    // CPU-only node.
    l.apply(&mut sched, job(1, 2000));
    let plan = sched.plan(&l.s);
    assert_eq!(plan.assignments.len(), 1);
    assert_eq!(plan.assignments[0].node, NodeId(1));
    l.apply(&mut sched, Command::ApplyPlan(plan));
    // Two half-GPU tasks share one device of one node rather than break two.
    let mut half = job(2, 1000);
    if let Command::SubmitJob { spec } = &mut half {
        spec.resources.gpu = GpuRequest::fraction(500);
    }
    l.apply(&mut sched, half);
    let plan = sched.plan(&l.s);
    assert_eq!(plan.assignments.len(), 2);
    assert_eq!(plan.assignments[0].node, plan.assignments[1].node);
    l.apply(&mut sched, Command::ApplyPlan(plan));
    let used: Vec<u32> =
        l.s.nodes()
            .values()
            .flat_map(|n| n.free.gpus.iter().map(|g| g.free_milli))
            .collect();
    assert_eq!(used.iter().filter(|f| **f == 1000).count(), 3, "{used:?}");
}

#[test]
fn plans_never_overcommit_and_match_first_fit_capacity() {
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    for k in 1..=3 {
        l.apply(&mut sched, register(2, k));
    }
    l.apply(&mut sched, job(10, 1000));
    let plan = sched.plan(&l.s);
    assert_eq!(plan.assignments.len(), 6, "3 nodes × 2 cores");
    match l.apply(&mut sched, Command::ApplyPlan(plan)) {
        Outcome::PlanApplied {
            accepted, rejected, ..
        } => {
            assert_eq!(accepted.len(), 6);
            assert_eq!(rejected, 0);
        }
        o => panic!("{o:?}"),
    }
    assert!(sched.plan(&l.s).is_empty());
}

#[test]
fn a_job_that_does_not_fit_is_skipped_whole_and_later_jobs_still_place() {
    let mut sched = IndexedScheduler::new(PolicyKind::FirstFit, 0);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(&mut sched, register(2, 1));
    l.apply(&mut sched, job(1, 1000));
    l.apply(&mut sched, job(500, 8000)); // never fits: 8 cores on a 2-core node
    l.apply(&mut sched, job(3, 1000));
    let plan = sched.plan(&l.s);
    let tasks: Vec<u64> = plan.assignments.iter().map(|a| a.task.0).collect();
    // Task 1 (job 1), then job 2's 500 tasks are skipped as one, then job 3's first.
    assert_eq!(tasks, vec![1, 502]);
}

#[test]
fn the_chain_is_one_list_of_send_stages() {
    fn send<T: Send>(_: &T) {}
    let sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    send(&sched);
    assert_eq!(
        sched.stages(),
        [
            "dependency",
            "gang",
            "pool-borrow",
            "engine-choice",
            "selection",
            "take-back",
            "preemption",
            "slave-queue"
        ]
    );
}

/// Two nodes of two cores, slave queues two deep, six one-core tasks: with every stage the
/// two that fit nowhere wait in slave queues; without the slave-queue stage they stay
/// pending, and the plan the rest of the chain makes still applies whole.
#[test]
fn a_chain_without_the_slave_queue_stage_makes_plans_that_apply() {
    let run = |sched: &mut IndexedScheduler| {
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(sched, register(2, 1));
        l.apply(sched, register(2, 2));
        l.apply(sched, job(6, 1000));
        let plan = sched.plan(&l.s);
        let queued = plan.assignments.iter().filter(|a| a.queued).count();
        let placed = plan.assignments.len() - queued;
        let applied = l.apply(sched, Command::ApplyPlan(plan));
        let Outcome::PlanApplied {
            accepted, rejected, ..
        } = applied
        else {
            panic!("not applied: {applied:?}");
        };
        assert_eq!(rejected, 0, "every assignment holds");
        assert_eq!(accepted.len(), placed + queued);
        (placed, queued, l.s.pending().len())
    };
    let mut full = IndexedScheduler::new(PolicyKind::LeastFit, 0).with_queue_depth(2);
    assert_eq!(run(&mut full), (4, 2, 0));
    let mut bare = IndexedScheduler::new(PolicyKind::LeastFit, 0)
        .with_queue_depth(2)
        .without_stage("slave-queue");
    assert!(!bare.stages().contains(&"slave-queue"));
    assert_eq!(bare.stages().len(), full.stages().len() - 1);
    assert_eq!(run(&mut bare), (4, 0, 2));
}

/// No stage file imports another stage (what several stages share lives in `stage.rs`,
/// `context.rs` and `pool_round.rs`), so a stage can be left out of the chain or added to it
/// without touching the others.
#[test]
fn no_stage_file_imports_another_stage() {
    let stages = [
        ("borrow_stage", include_str!("borrow_stage.rs")),
        ("engine_stage", include_str!("engine_stage.rs")),
        ("feasibility_stage", include_str!("feasibility_stage.rs")),
        ("gang_stage", include_str!("gang_stage.rs")),
        ("preemption_stage", include_str!("preemption_stage.rs")),
        ("queue_stage", include_str!("queue_stage.rs")),
        ("selection_stage", include_str!("selection_stage.rs")),
        ("slave_queue_stage", include_str!("slave_queue_stage.rs")),
        ("take_back_stage", include_str!("take_back_stage.rs")),
    ];
    for (name, text) in stages {
        for line in text.lines().filter(|l| l.trim_start().starts_with("use ")) {
            assert!(
                !line.contains("_stage::"),
                "{name}.rs imports another stage: {line}"
            );
        }
    }
}
