use crate::sched::index::PolicyKind;
use crate::sched::test_log::{node, spec, Log};
use crate::sched::{IndexedScheduler, Scheduler};
use crate::state::{
    Assign, BatchBlock, BatchJobSpec, BatchSpec, BatchTask, Command, Outcome, Plan, Real, TaskBlock,
};
use hetsched_common::{JobId, NodeId, TaskId, TaskState};

/// A batch job of one-core tasks pinned to `pins`, each processing one block.
fn job(pins: &[u64]) -> BatchJobSpec {
    let mut s = spec(pins.len() as u32, 1, 0);
    s.name = "b".into();
    BatchJobSpec {
        spec: s,
        planned_start_s: Real(0.0),
        planned_finish_s: Real(1.0),
        speed: Real(10.0),
        blocks: pins
            .iter()
            .map(|_| BatchBlock {
                size_mb: Real(10.0),
                replicas: vec![0],
            })
            .collect(),
        tasks: pins
            .iter()
            .enumerate()
            .map(|(i, p)| BatchTask {
                node: NodeId(*p),
                blocks: vec![TaskBlock {
                    block: i as u32,
                    read_from: NodeId(*p),
                }],
            })
            .collect(),
    }
}

fn batch(jobs: Vec<BatchJobSpec>) -> Command {
    Command::SubmitBatch {
        batch: BatchSpec {
            planned_makespan_s: Real(1.0),
            hosts: vec![NodeId(1), NodeId(2)],
            host_cores: vec![2, 2],
            transfer_speed: Real(100.0),
            alpha: Real(0.05),
            jobs,
        },
    }
}

fn setup(jobs: Vec<BatchJobSpec>) -> (Log, IndexedScheduler, Vec<JobId>) {
    let mut l = Log::new();
    let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 1);
    l.apply(&mut s, node(1, 2, 0, &[]));
    l.apply(&mut s, node(2, 2, 0, &[]));
    let ids = match l.apply(&mut s, batch(jobs)) {
        Outcome::BatchSubmitted { jobs, .. } => jobs,
        o => panic!("{o:?}"),
    };
    (l, s, ids)
}

fn tasks_of(l: &Log, job: JobId) -> Vec<TaskId> {
    l.s.job(job).map(|j| j.tasks.clone()).unwrap_or_default()
}

#[test]
fn a_gang_is_placed_whole_on_its_pins() {
    let (mut l, mut s, jobs) = setup(vec![job(&[1, 1, 2])]);
    let plan = s.plan(&l.s);
    let pins: Vec<(TaskId, NodeId)> = plan.assignments.iter().map(|a| (a.task, a.node)).collect();
    let t = tasks_of(&l, jobs[0]);
    assert_eq!(
        pins,
        vec![(t[0], NodeId(1)), (t[1], NodeId(1)), (t[2], NodeId(2))]
    );
    match l.apply(&mut s, Command::ApplyPlan(plan)) {
        Outcome::PlanApplied {
            accepted, rejected, ..
        } => {
            assert_eq!((accepted.len(), rejected), (3, 0));
        }
        o => panic!("{o:?}"),
    }
    let env = l.s.task_env(t[2], l.s.job(jobs[0]).expect("job"));
    assert_eq!(
        env.get("HETSCHED_BLOCKS").map(String::as_str),
        Some(r#"[{"job_block":2,"size_mb":10.0,"read_from":"n2"}]"#)
    );
}

#[test]
fn a_gang_that_does_not_fit_waits_whole() {
    // Job 0 takes n2's two cores; job 1 needs n1 and two of n2: none of it starts.
    let (mut l, mut s, jobs) = setup(vec![job(&[2, 2]), job(&[1, 2, 2])]);
    let plan = s.plan(&l.s);
    let second = tasks_of(&l, jobs[1]);
    assert_eq!(plan.assignments.len(), 2);
    assert!(plan.assignments.iter().all(|a| !second.contains(&a.task)));
    l.apply(&mut s, Command::ApplyPlan(plan));
    assert!(s.plan(&l.s).assignments.is_empty());
    for t in second {
        assert_eq!(
            l.s.task(t).map(|t| t.status.state),
            Some(TaskState::Pending)
        );
    }
}

#[test]
fn apply_refuses_part_of_a_gang() {
    let (mut l, _s, jobs) = setup(vec![job(&[1, 2])]);
    let t = tasks_of(&l, jobs[0]);
    // Only one member, or a member off its pin: nothing of the gang applies.
    for assignments in [
        vec![Assign::to(t[0], NodeId(1))],
        vec![Assign::to(t[0], NodeId(1)), Assign::to(t[1], NodeId(1))],
    ] {
        let plan = Plan {
            assignments,
            ..Default::default()
        };
        match l.apply_bare(Command::ApplyPlan(plan)) {
            Outcome::PlanApplied { accepted, .. } => assert!(accepted.is_empty()),
            o => panic!("{o:?}"),
        }
    }
}

#[test]
fn a_replan_repins_pending_tasks() {
    let (mut l, _s, jobs) = setup(vec![job(&[1, 2])]);
    let t = tasks_of(&l, jobs[0]);
    let new = BatchTask {
        node: NodeId(1),
        blocks: vec![TaskBlock {
            block: 1,
            read_from: NodeId(2),
        }],
    };
    let o = l.apply_bare(Command::ReplanBatchJob {
        job: jobs[0],
        tasks: vec![(t[1], new.clone())],
    });
    assert_eq!(
        o,
        Outcome::BatchReplanned {
            job: jobs[0],
            tasks: 1
        }
    );
    assert_eq!(l.s.batch_task(t[1]), Some(&new));
    let info = l.s.batch_info(1).expect("batch");
    assert_eq!(info.replans, 1);
}
