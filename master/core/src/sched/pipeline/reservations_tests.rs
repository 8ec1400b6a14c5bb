use super::*;
use crate::sched::preemption::{plan_preemption, PreemptionConfig};
use crate::sched::test_log::{
    assign, index_of, node, spec, submit, submitted_tasks as tasks, Log, HI_LO_PRIORITIES as CONFIG,
};
use crate::state::{Command, Plan};
use hetsched_common::priority::parse_priority_toml;
use hetsched_common::JobSpec;

/// A 2-CPU node full with low-priority tasks, and a high-priority task whose preemption
/// of one of them is applied: it waits for its victim to stop.
fn awaiting() -> (Log, TaskId) {
    let mut l = Log::new();
    l.apply_bare(Command::SetPriorityConfig {
        config: parse_priority_toml(CONFIG).expect("config"),
    });
    l.apply_bare(node(1, 2, 0, &[]));
    l.apply_bare(node(2, 1, 0, &[]));
    let lo = tasks(l.apply_bare(submit(JobSpec {
        user: "lo".into(),
        ..spec(2, 1, 0)
    })));
    assign(&mut l, &lo, NodeId(1));
    let hi = tasks(l.apply_bare(submit(JobSpec {
        user: "hi".into(),
        ..spec(1, 2, 0)
    })))[0];
    let p = plan_preemption(
        &l.s,
        hi,
        None,
        &BTreeSet::new(),
        &PreemptionConfig::default(),
    )
    .expect("a preemption");
    l.apply_bare(Command::ApplyPlan(Plan {
        preempt: vec![p],
        ..Default::default()
    }));
    assert!(l.s.awaiting().contains_key(&hi));
    (l, hi)
}

#[test]
fn a_waiting_preemptor_holds_its_node_until_it_no_longer_waits() {
    let (mut l, hi) = awaiting();
    let mut index = index_of(&l.s);
    let mut reserved = BTreeSet::new();
    sync(&mut index, &mut reserved, &l.s);
    assert_eq!(reserved, BTreeSet::from([NodeId(1)]));
    assert_eq!(index.reservation(NodeId(1)).map(|r| r.task), Some(hi));
    assert!(index.reservation(NodeId(2)).is_none());
    // Kept as it is while the preemptor waits.
    sync(&mut index, &mut reserved, &l.s);
    assert_eq!(reserved, BTreeSet::from([NodeId(1)]));
    assert_eq!(index.reservation(NodeId(1)).map(|r| r.task), Some(hi));
    // Cancelled, it waits no more: the node is let go.
    let job = l.s.tasks()[&hi].job;
    l.apply_bare(Command::CancelJob { job });
    sync(&mut index, &mut reserved, &l.s);
    assert!(reserved.is_empty());
    assert!(index.reservation(NodeId(1)).is_none());
}

#[test]
fn a_reservation_whose_holder_changed_is_dropped() {
    let (l, _) = awaiting();
    let mut index = index_of(&l.s);
    let req = spec(1, 1, 0).resources;
    index
        .reserve(NodeId(1), TaskId(999), &req)
        .expect("reserve");
    let mut reserved = BTreeSet::from([NodeId(1)]);
    sync(&mut index, &mut reserved, &l.s);
    // The stale holder is dropped; the real waiting preemptor gets the node.
    assert_eq!(reserved, BTreeSet::from([NodeId(1)]));
    assert_ne!(
        index.reservation(NodeId(1)).map(|r| r.task),
        Some(TaskId(999))
    );
}
