use super::*;
use crate::state::{CommandEnvelope, Outcome};
use hetsched_common::NodeResources;
use std::collections::BTreeSet;

fn apply(s: &mut ClusterState, i: &mut u64, command: Command) -> Outcome {
    *i += 1;
    s.apply(
        *i,
        CommandEnvelope {
            at_ms: 1000,
            request: None,
            command,
        },
    )
}

/// Slaves named `names`, each of `cpus` cores.
fn cluster(names: &[&str], cpus: u64) -> (ClusterState, u64) {
    let mut s = ClusterState::new();
    let mut i = 0;
    for (k, n) in names.iter().enumerate() {
        apply(
            &mut s,
            &mut i,
            Command::RegisterNode {
                key: k as u64 + 1,
                node: None,
                name: n.to_string(),
                addr: String::new(),
                capacity: NodeResources {
                    cpu_milli: cpus * 1000,
                    mem_mib: 1024,
                    ..Default::default()
                },
                labels: Default::default(),
                partitions: Vec::new(),
            },
        );
    }
    (s, i)
}

const FILE: &str = r#"{ "hosts": ["s2", "s10"], "cores_per_host": [2, 4], "transfer_speed": 100,
  "alpha": 0.05, "jobs": [
  { "speed": 10, "command": "true", "name": "a",
    "blocks": [ {"size": 20, "replicas": [0]}, {"size": 20, "replicas": [1]} ] },
  { "speed": 10, "blocks": [ {"size": 40, "replicas": [1]} ] } ] }"#;

fn req(file: &str, command: &[&str]) -> BatchSubmit {
    BatchSubmit {
        file: file.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        user: "u".into(),
    }
}

#[test]
fn the_json_file_carries_hosts_commands_and_names() {
    let f = parse_batch_file(FILE).expect("parses");
    assert_eq!(f.hosts, Some(vec!["s2".to_string(), "s10".to_string()]));
    assert_eq!(
        f.commands,
        vec![Some(vec!["sh".into(), "-c".into(), "true".into()]), None]
    );
    assert_eq!(f.names, vec![Some("a".to_string()), None]);
    assert!(parse_batch_file(r#"{"hosts": 3}"#).is_err());
}

#[test]
fn names_sort_naturally() {
    let mut v = vec!["s10", "s2", "s1", "t0"];
    v.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(v, ["s1", "s2", "s10", "t0"]);
}

#[test]
fn a_plan_pins_every_block_once_within_free_cpus() {
    let (s, _) = cluster(&["s10", "s2"], 1);
    let spec = plan_submission(&s, &req(FILE, &["echo"])).expect("plans");
    // s2 is node 2, s10 node 1; each has one free CPU, so the file's counts are capped.
    assert_eq!(spec.hosts, vec![NodeId(2), NodeId(1)]);
    assert_eq!(spec.host_cores, vec![1, 1]);
    assert_eq!(spec.jobs[1].spec.command, vec!["echo".to_string()]);
    for j in &spec.jobs {
        let seen: Vec<u32> = j
            .tasks
            .iter()
            .flat_map(|t| t.blocks.iter().map(|b| b.block))
            .collect();
        let set: BTreeSet<u32> = seen.iter().copied().collect();
        assert_eq!((seen.len(), set.len()), (j.blocks.len(), j.blocks.len()));
    }
    assert!(spec.planned_makespan_s.0 > 0.0);
}

#[test]
fn bad_requests_are_refused() {
    let (s, _) = cluster(&["s2"], 4);
    let e = plan_submission(&s, &req(FILE, &["x"])).expect_err("s10 is not registered");
    assert!(e.contains("s10"), "{e}");
    let text = "1 2 100 0.05\n1 1\n1\n10\n5\n0\n";
    let e = plan_submission(&s, &req(text, &["x"])).expect_err("two hosts, one slave");
    assert!(e.contains("only 1 slaves are up"), "{e}");
    let (s, _) = cluster(&["s2", "s10"], 4);
    let e = plan_submission(&s, &req(FILE, &[])).expect_err("job 1 has no command");
    assert!(e.contains("no command"), "{e}");
}

#[test]
fn a_lost_slave_replans_the_pending_rest() {
    let (mut s, mut i) = cluster(&["s2", "s10"], 2);
    let spec = plan_submission(&s, &req(FILE, &["x"])).expect("plans");
    let jobs = match apply(&mut s, &mut i, Command::SubmitBatch { batch: spec }) {
        Outcome::BatchSubmitted { jobs, .. } => jobs,
        o => panic!("{o:?}"),
    };
    assert_eq!(jobs.len(), 2);
    assert!(jobs_to_replan(&s).is_empty());
    // s10 (node 2) goes down before anything ran.
    apply(&mut s, &mut i, Command::NodeDown { node: NodeId(2) });
    let stranded = jobs_to_replan(&s);
    assert!(!stranded.is_empty());
    for job in stranded {
        let c = replan_job(&s, job).expect("a re-plan");
        assert!(matches!(
            apply(&mut s, &mut i, c),
            Outcome::BatchReplanned { .. }
        ));
        let j = s.job(job).expect("job");
        let mut blocks: Vec<u32> = j
            .tasks
            .iter()
            .filter_map(|t| s.batch_task(*t))
            .inspect(|b| assert_eq!(b.node, NodeId(1)))
            .flat_map(|b| b.blocks.iter().map(|x| x.block))
            .collect();
        blocks.sort_unstable();
        let all: Vec<u32> = (0..s.batch_book().jobs[&job].blocks.len() as u32).collect();
        assert_eq!(blocks, all);
    }
    assert!(jobs_to_replan(&s).is_empty());
}
