//! Tests of the waiting reasons the pipeline keeps and of `explain`: the reason names the
//! dimension and the node counts, a task behind a higher-priority one waits for
//! `priority`, one over its quota for `quota`, one pinned to a drained node for `drained`,
//! a back-off for `backoff`; `explain` gives one verdict per registered node.

use super::explain::explain;
use super::preemption::PreemptionConfig;
use super::test_log::{node, spec, submit, submitted_tasks, Log};
use super::waiting::Reader;
use super::{IndexedScheduler, Scheduler};
use crate::sched::index::PolicyKind;
use crate::state::Command;
use hetsched_common::priority::parse_priority_toml;
use hetsched_common::{JobSpec, NodeId, TaskId};

const CONFIG: &str = r#"
base_priority = 0
[[users]]
name = "hi"
priority = 50
[[users]]
name = "q"
priority = 10
quota = { cpus = 1 }
"#;

/// `t`'s reason as users read it (through the board and a reader of `l`'s state).
fn reason(s: &IndexedScheduler, l: &Log, t: TaskId) -> (String, String) {
    let (board, _) = s.waiting().expect("the pipeline gives reasons");
    let task = l.s.task(t).expect("task");
    let job = l.s.jobs().get(&task.job).expect("job");
    let w = board
        .get(task, job, 0)
        .unwrap_or_else(|| panic!("no reason for {t}: {board:?}"));
    let info = Reader::new(&l.s).read(task, job, &w);
    (info.reason, info.detail)
}

/// Two 2-core nodes, no slave queues, the priority configuration above.
fn cluster() -> (Log, IndexedScheduler) {
    let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 1);
    let mut l = Log::new();
    l.apply(
        &mut s,
        Command::SetPriorityConfig {
            config: parse_priority_toml(CONFIG).expect("config"),
        },
    );
    l.apply(&mut s, node(1, 2, 0, &[]));
    l.apply(&mut s, node(2, 2, 0, &[]));
    (l, s)
}

#[test]
fn a_task_larger_than_every_node_waits_for_resources_naming_the_dimension() {
    let (mut l, mut s) = cluster();
    let t = submitted_tasks(l.apply(&mut s, submit(spec(1, 64, 0))));
    let plan = s.plan(&l.s);
    assert!(plan.is_empty(), "{plan:?}");
    let (r, d) = reason(&s, &l, t[0]);
    assert_eq!(r, "resources");
    assert!(d.starts_with("cpus: larger than every node"), "{d}");
    let e = explain(&l.s, t[0], None, 0, &PreemptionConfig::default()).expect("explain");
    assert_eq!(e.nodes.len(), 2);
    assert!(e.nodes.iter().all(|n| n.verdict == "cpus"), "{e:?}");
    assert!(e.nodes[0].detail.contains("too small"), "{e:?}");
}

#[test]
fn behind_a_higher_priority_task_a_task_waits_for_priority_and_over_quota_for_quota() {
    let (mut l, mut s) = cluster();
    // Fill both nodes.
    let fill = submitted_tasks(l.apply(
        &mut s,
        submit(JobSpec {
            user: "hi".into(),
            ..spec(2, 2, 0)
        }),
    ));
    let plan = s.plan(&l.s);
    assert_eq!(plan.assignments.len(), 2);
    l.apply(&mut s, Command::ApplyPlan(plan));
    let ahead = submitted_tasks(l.apply(
        &mut s,
        submit(JobSpec {
            user: "hi".into(),
            ..spec(1, 1, 0)
        }),
    ));
    let behind = submitted_tasks(l.apply(&mut s, submit(spec(1, 1, 0))));
    let quota = submitted_tasks(l.apply(
        &mut s,
        submit(JobSpec {
            user: "q".into(),
            ..spec(2, 1, 0)
        }),
    ));
    let _ = s.plan(&l.s);
    let (r, d) = reason(&s, &l, ahead[0]);
    assert_eq!(r, "resources", "{d}");
    assert!(d.starts_with("cpus: 0 of 2 nodes have room"), "{d}");
    let (r, d) = reason(&s, &l, behind[0]);
    assert_eq!(r, "priority", "{d}");
    assert!(d.contains(&format!("behind {}", ahead[0])), "{d}");
    // The first of q's tasks is within its quota (priority 10); the second is not.
    let (r, d) = reason(&s, &l, quota[1]);
    assert_eq!(r, "quota", "{d}");
    assert!(
        d.contains("cpus 1") && d.contains("base priority 0, not 10"),
        "{d}"
    );
    let (r, _) = reason(&s, &l, quota[0]);
    assert_ne!(r, "quota");
    // Preemption: the fillers are of the same priority as `ahead`: no victims.
    let e = explain(&l.s, ahead[0], None, 0, &PreemptionConfig::default()).expect("explain");
    assert!(!e.preemption.possible, "{e:?}");
    assert_eq!(e.nodes.len(), 2);
    assert!(fill.len() == 2);
}

#[test]
fn a_task_pinned_to_a_drained_node_waits_for_drained() {
    let (mut l, mut s) = cluster();
    l.apply(
        &mut s,
        Command::DrainNode {
            node: NodeId(1),
            deadline_ms: None,
        },
    );
    let t = submitted_tasks(l.apply(
        &mut s,
        submit(JobSpec {
            nodes: vec!["n1".into()],
            ..spec(1, 1, 0)
        }),
    ));
    let plan = s.plan(&l.s);
    assert!(plan.is_empty(), "{plan:?}");
    let (r, d) = reason(&s, &l, t[0]);
    assert_eq!(r, "drained", "{d}");
    assert!(d.contains("n1 (node-1)"), "{d}");
    let e = explain(&l.s, t[0], None, 0, &PreemptionConfig::default()).expect("explain");
    let verdicts: Vec<&str> = e.nodes.iter().map(|n| n.verdict.as_str()).collect();
    assert_eq!(verdicts, vec!["drained", "locality"]);
}

#[test]
fn with_no_node_taking_work_every_task_still_gets_a_reason() {
    let (mut l, mut s) = cluster();
    for n in [1, 2] {
        l.apply(
            &mut s,
            Command::DrainNode {
                node: NodeId(n),
                deadline_ms: None,
            },
        );
    }
    let t = submitted_tasks(l.apply(&mut s, submit(spec(3, 1, 0))));
    let _ = s.plan(&l.s);
    for task in t {
        let (r, d) = reason(&s, &l, task);
        assert_eq!(r, "drained", "{d}");
    }
}

#[test]
fn cpu_tasks_kept_off_a_gpu_nodes_reserve_wait_for_pool() {
    use crate::sched::multiqueue::{Ordering, ReserveHistory};
    let mut s = IndexedScheduler::new(PolicyKind::BestFit, 0)
        .with_ordering(Ordering::Pipeline)
        .with_reserved_pools(ReserveHistory::new(2000));
    let mut l = Log::new();
    // 8 CPUs and 2 GPUs: a reserve of 4 CPUs while a GPU task waits (one that fits nowhere).
    l.apply(&mut s, node(1, 8, 2, &[]));
    let mut waiting = spec(1, 2, 1);
    waiting.resources.mem_mib = 1_000_000;
    let gpu = submitted_tasks(l.apply(&mut s, submit(waiting)));
    let cpu = submitted_tasks(l.apply(&mut s, submit(spec(8, 1, 0))));
    let plan = s.plan(&l.s);
    assert_eq!(plan.assignments.len(), 4, "{plan:?}");
    l.apply(&mut s, Command::ApplyPlan(plan));
    let _ = s.plan(&l.s);
    let (r, d) = reason(&s, &l, cpu[7]);
    assert_eq!(r, "pool", "{d}");
    assert!(d.contains("borrowing") && d.contains("closed"), "{d}");
    let (r, d) = reason(&s, &l, gpu[0]);
    assert_eq!(r, "resources", "{d}");
    assert!(d.starts_with("mem"), "{d}");
}

/// Issue 53: a task behind another user's at equal priority waits for `fair-share`, naming
/// both users' factors when fair share decided; another user's task of the same shape (one
/// blocked key) is never told it waits behind itself.
#[test]
fn behind_a_user_ahead_in_fair_share_a_task_waits_for_fair_share_naming_the_factors() {
    let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 1)
        .with_ordering(crate::sched::multiqueue::Ordering::Drf);
    let mut l = Log::new();
    l.apply(&mut s, node(1, 2, 0, &[]));
    // c fills the node; a's and b's tasks have one shape (one blocked key).
    let job = |user: &str, cpus| JobSpec {
        user: user.into(),
        ..spec(2 / cpus as u32, cpus, 0)
    };
    let fill = submitted_tasks(l.apply(&mut s, submit(job("c", 2))));
    let plan = s.plan(&l.s);
    assert_eq!(plan.assignments.len(), 1, "{fill:?}");
    l.apply(&mut s, Command::ApplyPlan(plan));
    let a = submitted_tasks(l.apply(&mut s, submit(job("a", 1))));
    let b = submitted_tasks(l.apply(&mut s, submit(job("b", 1))));
    s.set_fair_share(std::collections::BTreeMap::from([
        ("a".to_string(), 0.25),
        ("c".to_string(), 0.5),
    ]));
    for round in 0..2 {
        let plan = s.plan(&l.s);
        assert!(plan.assignments.is_empty(), "{plan:?}");
        let (r, d) = reason(&s, &l, a[1]);
        assert_eq!(r, "fair-share", "round {round}: {d}");
        assert!(
            d.contains(&format!("behind b's {}", b[0]))
                && d.contains("a's fair-share factor 0.250 is below b's 1.000"),
            "round {round}: {d}"
        );
        let (r, d) = reason(&s, &l, b[1]);
        assert_ne!(r, "fair-share", "b is first: round {round}: {d}");
    }
}
