use super::SubmitRules;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, tasks_of};
use crate::state::{BatchJobSpec, BatchSpec, BatchTask, Outcome, TaskBlock};
use hetsched_common::priority::PriorityConfig;
use hetsched_common::{JobId, NodeId, TaskId, TaskState};

fn rules<'a>(l: &'a mut Log, priority: &'a PriorityConfig) -> SubmitRules<'a> {
    SubmitRules {
        jobs: &mut l.s.jobs,
        tasks: &mut l.s.tasks,
        nodes: &l.s.nodes,
        profiles: &mut l.s.profiles,
        priority,
        batch: &mut l.s.batch,
        index: 42,
        at_ms: 1_234,
    }
}

#[test]
fn a_job_gets_the_next_ids_and_its_tasks_queue_in_order() {
    let mut l = cluster(2, 4);
    let prio = PriorityConfig::default();
    let mut spec = tasks_of(3, 1);
    spec.nodes = vec!["n2".into(), "1".into(), "n2".into()];
    let o = rules(&mut l, &prio).submit(spec);
    let tasks = vec![TaskId(1), TaskId(2), TaskId(3)];
    assert_eq!(
        o,
        Outcome::Submitted {
            job: JobId(1),
            tasks: tasks.clone()
        }
    );
    let j = &l.s.jobs()[&JobId(1)];
    assert_eq!((j.open, j.submitted_ms, j.submitted_index), (3, 1_234, 42));
    assert_eq!(
        j.candidates,
        vec![NodeId(1), NodeId(2)],
        "resolved, sorted, once each"
    );
    assert_eq!(l.s.pending().iter().copied().collect::<Vec<_>>(), tasks);
    assert!(tasks
        .iter()
        .all(|t| l.s.tasks()[t].status.state == TaskState::Pending));
}

#[test]
fn refused_submissions_change_nothing() {
    let mut l = cluster(1, 4);
    let prio = PriorityConfig::default();
    let before = l.s.clone();
    let mut unknown_node = tasks_of(1, 1);
    unknown_node.nodes = vec!["nowhere".into()];
    let mut protected = tasks_of(1, 1);
    protected.no_preempt = true;
    for spec in [unknown_node, protected, tasks_of(0, 1)] {
        let o = rules(&mut l, &prio).submit(spec);
        assert!(matches!(o, Outcome::Rejected(_)), "{o:?}");
    }
    assert_eq!(l.s, before);
}

fn batch_job(count: u32, pins: &[u64]) -> BatchJobSpec {
    BatchJobSpec {
        spec: tasks_of(count, 1),
        planned_start_s: Default::default(),
        planned_finish_s: Default::default(),
        speed: Default::default(),
        blocks: Vec::new(),
        tasks: pins
            .iter()
            .map(|n| BatchTask {
                node: NodeId(*n),
                blocks: Vec::new(),
            })
            .collect(),
    }
}

fn batch(jobs: Vec<BatchJobSpec>) -> BatchSpec {
    BatchSpec {
        hosts: vec![NodeId(1)],
        host_cores: vec![4],
        jobs,
        ..Default::default()
    }
}

#[test]
fn a_batch_is_submitted_whole_or_not_at_all() {
    let mut l = cluster(1, 4);
    let prio = PriorityConfig::default();
    let before = l.s.clone();
    let bad = batch(vec![batch_job(1, &[1]), batch_job(1, &[7])]);
    assert!(matches!(
        rules(&mut l, &prio).submit_batch(bad),
        Outcome::Rejected(_)
    ));
    assert_eq!(l.s, before);
    let good = batch(vec![batch_job(2, &[1, 1]), batch_job(1, &[1])]);
    match rules(&mut l, &prio).submit_batch(good) {
        Outcome::BatchSubmitted { batch, jobs, tasks } => {
            assert_eq!((batch, jobs.len(), tasks.len()), (1, 2, 3));
            assert!(jobs.iter().all(|j| l.s.is_gang(*j)));
            assert_eq!(l.s.batch_book().batches[&1].submitted_ms, 1_234);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_replan_repins_pending_tasks_of_the_job_only() {
    let mut l = cluster(2, 4);
    let prio = PriorityConfig::default();
    rules(&mut l, &prio).submit_batch(batch(vec![batch_job(1, &[1])]));
    let pin = |n| BatchTask {
        node: NodeId(n),
        blocks: vec![TaskBlock {
            block: 0,
            read_from: NodeId(n),
        }],
    };
    let o = rules(&mut l, &prio).replan_batch_job(JobId(1), vec![(TaskId(9), pin(2))]);
    assert!(
        matches!(o, Outcome::Ignored(_)),
        "not a task of the job: {o:?}"
    );
    let o = rules(&mut l, &prio).replan_batch_job(JobId(1), vec![(TaskId(1), pin(2))]);
    assert!(
        matches!(o, Outcome::Rejected(_)),
        "block 0 of a job of none: {o:?}"
    );
    let mut fresh = pin(2);
    fresh.blocks.clear();
    let o = rules(&mut l, &prio).replan_batch_job(JobId(1), vec![(TaskId(1), fresh)]);
    assert_eq!(
        o,
        Outcome::BatchReplanned {
            job: JobId(1),
            tasks: 1
        }
    );
    assert_eq!(l.s.batch_task(TaskId(1)).map(|b| b.node), Some(NodeId(2)));
    assert_eq!(l.s.batch_book().batches[&1].replans, 1);
}
