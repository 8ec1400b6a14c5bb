use super::Grants;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, place, run, tasks_of};
use hetsched_common::{NodeId, TaskReason, TaskState};

const N: NodeId = NodeId(1);

fn grants(l: &mut Log) -> Grants<'_> {
    Grants {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &l.s.jobs,
    }
}

#[test]
fn a_release_gives_the_grant_back_and_promotes_the_queue_head_into_it() {
    let mut l = cluster(1, 4);
    let (big, a) = job(&mut l, tasks_of(1, 4));
    let (_, b) = job(&mut l, tasks_of(1, 2));
    run(&mut l, a[0], N);
    place(&mut l, b[0], N, true);
    assert_eq!(free_cpu(&l, N), 0);
    grants(&mut l).release(N, a[0], big, &Vec::new());
    let n = &l.s.nodes()[&N];
    assert!(!n.tasks.contains(&a[0]));
    assert!(n.tasks.contains(&b[0]) && n.queued.is_empty(), "{n:?}");
    assert_eq!(free_cpu(&l, N), 2000);
}

#[test]
fn a_queued_task_released_only_leaves_the_queue() {
    let mut l = cluster(1, 2);
    let (_, a) = job(&mut l, tasks_of(1, 2));
    let (qjob, q) = job(&mut l, tasks_of(1, 2));
    run(&mut l, a[0], N);
    place(&mut l, q[0], N, true);
    grants(&mut l).release(N, q[0], qjob, &Vec::new());
    let n = &l.s.nodes()[&N];
    assert!(n.queued.is_empty() && n.tasks.contains(&a[0]));
    assert_eq!(free_cpu(&l, N), 0, "the queued task held nothing");
}

#[test]
fn requeue_node_sends_held_and_queued_attempts_back_to_pending() {
    let mut l = cluster(1, 2);
    let (_, a) = job(&mut l, tasks_of(1, 2));
    let (_, q) = job(&mut l, tasks_of(1, 1));
    run(&mut l, a[0], N);
    place(&mut l, q[0], N, true);
    let lost = grants(&mut l).requeue_node(N, TaskReason::Drained);
    let ended: Vec<_> = lost.iter().map(|r| (r.task, r.attempt)).collect();
    assert_eq!(ended, vec![(a[0], 1), (q[0], 1)]);
    for t in [a[0], q[0]] {
        let task = &l.s.tasks()[&t];
        assert_eq!(task.status.state, TaskState::Pending);
        assert_eq!(task.status.reason, Some(TaskReason::Drained));
        assert!(l.s.pending().contains(&t));
    }
    assert_eq!(free_cpu(&l, N), 2000);
}

#[test]
fn only_a_stopping_attempt_is_released_as_one() {
    let mut l = cluster(1, 2);
    let (_, a) = job(&mut l, tasks_of(1, 1));
    run(&mut l, a[0], N);
    assert!(!grants(&mut l).release_stopping(N, a[0], 1));
    assert!(
        l.s.nodes()[&N].tasks.contains(&a[0]),
        "a running attempt stays"
    );
}
