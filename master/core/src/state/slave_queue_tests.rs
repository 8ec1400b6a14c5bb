use super::{QueueRules, QueueView};
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, place, run, tasks_of};
use hetsched_common::{NodeId, TaskId};

const N: NodeId = NodeId(1);

fn rules(l: &mut Log) -> QueueRules<'_> {
    QueueRules {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &l.s.jobs,
    }
}

fn view(l: &Log) -> QueueView<'_> {
    QueueView {
        nodes: &l.s.nodes,
        tasks: &l.s.tasks,
        jobs: &l.s.jobs,
    }
}

/// A 4-core node running a 3-core task, with a 2-core then a 1-core task queued.
fn one_core_free() -> (Log, TaskId, TaskId) {
    let mut l = cluster(1, 4);
    let (_, a) = job(&mut l, tasks_of(1, 3));
    let (_, b) = job(&mut l, tasks_of(1, 2));
    let (_, c) = job(&mut l, tasks_of(1, 1));
    run(&mut l, a[0], N);
    place(&mut l, b[0], N, true);
    place(&mut l, c[0], N, true);
    (l, b[0], c[0])
}

#[test]
fn the_queue_head_blocks_those_behind_it() {
    let (mut l, b, c) = one_core_free();
    rules(&mut l).promote_queued(N);
    assert_eq!(l.s.nodes()[&N].queued, vec![b, c], "c fits, but b is first");
    assert_eq!(free_cpu(&l, N), 1000);
}

#[test]
fn a_slave_may_ask_to_start_one_behind_the_head_when_it_fits() {
    let (mut l, b, c) = one_core_free();
    assert!(view(&l).promotable(N, &[(b, 1), (c, 1)]));
    assert!(!view(&l).promotable(N, &[(b, 1)]), "b does not fit");
    assert!(!rules(&mut l).promote_asked(N, b, 1));
    assert!(!rules(&mut l).promote_asked(N, c, 2), "a stale attempt");
    assert!(rules(&mut l).promote_asked(N, c, 1));
    let n = &l.s.nodes()[&N];
    assert_eq!((n.queued.clone(), n.tasks.contains(&c)), (vec![b], true));
    assert_eq!(free_cpu(&l, N), 0);
    assert_eq!(view(&l).promoted(N, &[(b, 1), (c, 1)]), vec![(c, 1)]);
}

#[test]
fn a_queued_task_started_without_room_waits_at_the_head() {
    let (mut l, b, c) = one_core_free();
    rules(&mut l).start_queued(N, c);
    assert!(l.s.nodes()[&N].tasks.contains(&c), "c's core was free");
    assert_eq!(free_cpu(&l, N), 0);
    let (_, d) = job(&mut l, tasks_of(1, 1));
    place(&mut l, d[0], N, true);
    assert_eq!(l.s.nodes()[&N].queued, vec![b, d[0]]);
    rules(&mut l).start_queued(N, d[0]);
    assert_eq!(
        l.s.nodes()[&N].queued,
        vec![d[0], b],
        "d first once room frees"
    );
    assert!(
        !l.s.nodes()[&N].tasks.contains(&d[0]),
        "d holds nothing yet"
    );
}
