//! Blocked tasks wait for a change: one probe per key per plan, none until something that
//! could make the key fit changed, and a blocked task keeps its place in the queue.

use super::*;
use crate::sched::index::PolicyKind;
use crate::sched::test_log::{node, spec, submit, submitted_tasks, Log};
use crate::sched::Scheduler;
use crate::state::{Command, Outcome};
use hetsched_common::{NodeId, TaskId};

fn run(l: &mut Log, sched: &mut IndexedScheduler) -> Vec<(TaskId, NodeId)> {
    let plan = sched.plan(&l.s);
    let Outcome::PlanApplied { accepted, .. } = l.apply(sched, Command::ApplyPlan(plan)) else {
        panic!("plan not applied");
    };
    for r in &accepted {
        l.apply(
            sched,
            Command::TaskStarted {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            },
        );
    }
    accepted.iter().map(|r| (r.task, r.node)).collect()
}

#[test]
fn a_blocked_key_is_probed_once_and_not_again_until_a_matching_change() {
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    let mut l = Log::new();
    l.apply(&mut sched, node(1, 4, 0, &[]));
    // A (one task of 8 cores) and B (three of 8 cores, another job, same key) fit nowhere.
    let a = submitted_tasks(l.apply(&mut sched, submit(spec(1, 8, 0))));
    let b = submitted_tasks(l.apply(&mut sched, submit(spec(3, 8, 0))));
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.blocked(), (1, 1), "one key, one probe for four tasks");
    // Nothing changed: no probe at all.
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.blocked(), (1, 1));
    // An arrival that fits is probed (and placed); the blocked key is not.
    let c = submitted_tasks(l.apply(&mut sched, submit(spec(1, 1, 0))));
    assert_eq!(run(&mut l, &mut sched), vec![(c[0], NodeId(1))]);
    assert_eq!(sched.blocked(), (1, 2));
    // Its end frees a core on the node: the key is probed again (once), still too big.
    l.apply(
        &mut sched,
        Command::TaskFinished {
            node: NodeId(1),
            task: c[0],
            attempt: 1,
            exit_code: 0,
            reason: None,
        },
    );
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.blocked(), (1, 3));
    // A node that fits one of them joins: the first in the queue gets it (A keeps its place
    // ahead of B's tasks).
    l.apply(&mut sched, node(2, 8, 0, &[]));
    assert_eq!(run(&mut l, &mut sched), vec![(a[0], NodeId(2))]);
    assert!(b.iter().all(|t| l.s.pending().contains(t)));
}

#[test]
fn a_blocked_task_keeps_its_place_when_a_later_one_fits() {
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    let mut l = Log::new();
    l.apply(&mut sched, node(1, 4, 0, &[]));
    let big = submitted_tasks(l.apply(&mut sched, submit(spec(1, 6, 0))));
    let small = submitted_tasks(l.apply(&mut sched, submit(spec(1, 2, 0))));
    // The small one goes past the blocked one (as S1's submission order allows: the big
    // one fits nowhere), which stays first in the queue.
    assert_eq!(run(&mut l, &mut sched), vec![(small[0], NodeId(1))]);
    let later = submitted_tasks(l.apply(&mut sched, submit(spec(1, 6, 0))));
    l.apply(&mut sched, node(2, 6, 0, &[]));
    // Room for one 6-core task: the earlier one, not the later one of the same key.
    assert_eq!(run(&mut l, &mut sched), vec![(big[0], NodeId(2))]);
    assert!(l.s.pending().contains(&later[0]));
}

#[test]
fn a_plan_with_nothing_changed_since_everything_blocked_is_skipped() {
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    let mut l = Log::new();
    l.apply(&mut sched, node(1, 4, 0, &[]));
    submit_blocked(&mut l, &mut sched);
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.plans_skipped(), 0, "the first plan probes");
    // Nothing the scheduler reads changed (an empty plan applied moves the log on): skipped.
    assert!(run(&mut l, &mut sched).is_empty());
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.plans_skipped(), 2);
    // A submission changes the pending set: planned again (its key is blocked: no probe).
    submit_blocked(&mut l, &mut sched);
    let probes = sched.blocked().1;
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!((sched.plans_skipped(), sched.blocked().1), (2, probes));
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(sched.plans_skipped(), 3);
    // One that fits is placed at once.
    let c = submitted_tasks(l.apply(&mut sched, submit(spec(1, 1, 0))));
    assert_eq!(run(&mut l, &mut sched), vec![(c[0], NodeId(1))]);
    assert_eq!(sched.plans_skipped(), 3);
    // Resources freed: planned again.
    l.apply(
        &mut sched,
        Command::TaskFinished {
            node: NodeId(1),
            task: c[0],
            attempt: 1,
            exit_code: 0,
            reason: None,
        },
    );
    let probes = sched.blocked().1;
    assert!(run(&mut l, &mut sched).is_empty());
    assert_eq!(
        (sched.plans_skipped(), sched.blocked().1),
        (3, probes + 1),
        "the key probed again once"
    );
}

#[test]
fn a_retry_back_off_ending_ends_the_skip() {
    use crate::sched::test_log::apply_tracked;
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    let mut l = Log::new();
    l.apply(&mut sched, node(1, 4, 0, &[]));
    let mut retried = spec(1, 1, 0);
    retried.retries = 1;
    retried.backoff_ms = 5_000;
    let t = submitted_tasks(l.apply(&mut sched, submit(retried)));
    assert_eq!(run(&mut l, &mut sched), vec![(t[0], NodeId(1))]);
    submit_blocked(&mut l, &mut sched);
    // The task fails at leader time 1,000: requeued with a retry back-off.
    l.i += 1;
    apply_tracked(
        &mut l.s,
        l.i,
        1_000,
        &mut sched,
        Command::TaskFinished {
            node: NodeId(1),
            task: t[0],
            attempt: 1,
            exit_code: 1,
            reason: None,
        },
    );
    let nb = l.s.tasks()[&t[0]]
        .not_before_ms
        .expect("requeued with a back-off");
    assert!(sched.plan_at(&l.s, nb - 1).is_empty(), "backing off");
    assert!(sched.plan_at(&l.s, nb - 1).is_empty());
    assert_eq!(sched.plans_skipped(), 1);
    let plan = sched.plan_at(&l.s, nb);
    assert_eq!(plan.assignments.len(), 1, "its back-off ended: placed");
}

fn submit_blocked(l: &mut Log, sched: &mut IndexedScheduler) {
    l.apply(sched, submit(spec(1, 8, 0)));
}
