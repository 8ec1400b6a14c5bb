use super::LifecycleRules;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, place, run, tasks_of};
use crate::state::{NodeLiveness, Outcome, TaskRef};
use hetsched_common::{NodeId, TaskReason, TaskState};

const N: NodeId = NodeId(1);
const NOW: u64 = 9_000;

fn rules(l: &mut Log) -> LifecycleRules<'_> {
    LifecycleRules {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &mut l.s.jobs,
        now_ms: NOW,
    }
}

#[test]
fn a_lost_node_sends_its_attempts_back_with_the_next_attempt() {
    let mut l = cluster(1, 2);
    let (_, t) = job(&mut l, tasks_of(1, 2));
    let (_, q) = job(&mut l, tasks_of(1, 1));
    run(&mut l, t[0], N);
    place(&mut l, q[0], N, true);
    match rules(&mut l).node_down(N) {
        Outcome::NodeDown { requeued, .. } => assert_eq!(requeued.len(), 2),
        o => panic!("{o:?}"),
    }
    assert_eq!(l.s.nodes()[&N].liveness, NodeLiveness::Down);
    assert_eq!(free_cpu(&l, N), 2000);
    assert_eq!(l.s.tasks()[&t[0]].status.reason, Some(TaskReason::Lost));
    assert!(matches!(rules(&mut l).node_down(N), Outcome::Ignored(_)));
    assert!(matches!(
        rules(&mut l).node_down(NodeId(9)),
        Outcome::Rejected(_)
    ));
}

#[test]
fn cancelling_a_job_stops_what_runs_and_finishes_the_job() {
    let mut l = cluster(1, 4);
    let (j, t) = job(&mut l, tasks_of(3, 1));
    run(&mut l, t[0], N);
    let done = crate::state::Command::TaskFinished {
        node: N,
        task: t[1],
        attempt: 1,
        exit_code: 0,
        reason: None,
    };
    run(&mut l, t[1], N);
    l.apply_bare(done);
    let o = rules(&mut l).cancel_job(j);
    let stop = vec![TaskRef {
        task: t[0],
        node: N,
        attempt: 1,
    }];
    assert_eq!(
        o,
        Outcome::Cancelled {
            job: j,
            tasks: 2,
            stop
        }
    );
    assert_eq!(l.s.tasks()[&t[2]].status.state, TaskState::Cancelled);
    assert!(l.s.pending().is_empty());
    assert_eq!(free_cpu(&l, N), 4000);
    assert_eq!(l.s.job(j).and_then(|j| j.finished_ms), Some(NOW));
    // Nothing is left to cancel.
    let again = rules(&mut l).cancel_task(t[0]);
    assert!(
        matches!(again, Outcome::Cancelled { tasks: 0, .. }),
        "{again:?}"
    );
}

#[test]
fn only_a_draining_node_is_requeued_at_its_deadline() {
    let mut l = cluster(1, 2);
    let (_, t) = job(&mut l, tasks_of(1, 1));
    run(&mut l, t[0], N);
    assert!(matches!(
        rules(&mut l).requeue_drained(N),
        Outcome::Ignored(_)
    ));
    l.s.nodes.drain(N, 1, Some(2));
    match rules(&mut l).requeue_drained(N) {
        Outcome::Drained { requeued, .. } => assert_eq!(requeued.len(), 1),
        o => panic!("{o:?}"),
    }
    assert_eq!(l.s.tasks()[&t[0]].status.reason, Some(TaskReason::Drained));
}
