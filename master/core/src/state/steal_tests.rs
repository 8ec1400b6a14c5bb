use super::StealRules;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, place, run, tasks_of};
use crate::state::{Outcome, TaskRef};
use hetsched_common::{NodeId, TaskId, TaskReason, TaskState};

const VICTIM: NodeId = NodeId(1);
const THIEF: NodeId = NodeId(2);

fn steal(l: &mut Log, task: TaskId, attempt: u32, to: NodeId) -> Outcome {
    StealRules {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &l.s.jobs,
    }
    .steal(task, attempt, VICTIM, to)
}

/// Two 2-core nodes; the victim runs a 2-core task and queues a 1-core one.
fn queued_on_victim() -> (Log, TaskId) {
    let mut l = cluster(2, 2);
    let (_, a) = job(&mut l, tasks_of(1, 2));
    let (_, q) = job(&mut l, tasks_of(1, 1));
    run(&mut l, a[0], VICTIM);
    place(&mut l, q[0], VICTIM, true);
    (l, q[0])
}

#[test]
fn a_stolen_task_runs_its_next_attempt_on_the_thief() {
    let (mut l, q) = queued_on_victim();
    let o = steal(&mut l, q, 1, THIEF);
    let assigned = TaskRef {
        task: q,
        node: THIEF,
        attempt: 2,
    };
    assert!(
        matches!(o, Outcome::Stolen { assigned: Some(a), .. } if a == assigned),
        "{o:?}"
    );
    assert!(l.s.nodes()[&VICTIM].queued.is_empty());
    assert!(l.s.nodes()[&THIEF].tasks.contains(&q));
    assert_eq!(free_cpu(&l, THIEF), 1000);
    let counts = |n: NodeId| (l.s.nodes()[&n].steals_in, l.s.nodes()[&n].steals_out);
    assert_eq!((counts(VICTIM), counts(THIEF)), ((0, 1), (1, 0)));
}

#[test]
fn a_stale_steal_changes_nothing() {
    let (mut l, q) = queued_on_victim();
    let before = l.s.clone();
    assert!(matches!(steal(&mut l, q, 2, THIEF), Outcome::Ignored(_)));
    assert_eq!(l.s, before);
}

#[test]
fn a_thief_that_cannot_take_it_sends_it_back_to_pending() {
    let (mut l, q) = queued_on_victim();
    let (_, filler) = job(&mut l, tasks_of(1, 2));
    run(&mut l, filler[0], THIEF);
    let o = steal(&mut l, q, 1, THIEF);
    assert!(matches!(o, Outcome::Stolen { assigned: None, .. }), "{o:?}");
    let t = &l.s.tasks()[&q];
    assert_eq!(
        (t.status.state, t.status.reason),
        (TaskState::Pending, Some(TaskReason::Lost))
    );
    assert!(l.s.pending().contains(&q));
    assert!(l.s.nodes()[&VICTIM].queued.is_empty());
}
