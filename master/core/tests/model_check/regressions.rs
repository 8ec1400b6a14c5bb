//! Failures the model check found, shrunk to short logs and kept as named regression tests.
//! Each log is replayed with every invariant checked after every entry (`driver::replay`),
//! then the state is asserted where the bug showed.

use super::driver::replay;
use super::fixture::LogBuilder;
use hetsched_common::{JobId, NodeId, TaskId, TaskState};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::{command_nodes, touched_nodes, ClusterState, Command, Outcome};

fn clean(log: &[hetsched_master_core::state::CommandEnvelope]) -> ClusterState {
    match replay(log) {
        Ok(s) => s,
        Err(f) => panic!("entry {} broke {:#?}", f.index, f.violations),
    }
}

const A: NodeId = NodeId(1);

/// GC collected a cancelled job while a preempted attempt of its task was still stopping:
/// the node then held that attempt's resources for good (they are given back by the job's
/// spec, and the job was gone). A job waits for its stopping attempts before it goes.
#[test]
fn gc_waits_for_the_stopping_attempts_of_a_cancelled_job() {
    let mut b = LogBuilder::default();
    b.node(1, 8, 0).priorities(16);
    b.job("u0", 1, 6000, false)
        .place(&[(1, 1, false)])
        .started(1, 1, 1);
    b.job("u1", 1, 6000, false).preempt(2, 1, &[(1, 1)]);
    b.push(Command::CancelJob { job: JobId(1) });
    let gc = Command::GcJobs {
        jobs_finished_before_ms: Some(u64::MAX),
        requests_before_ms: None,
        keyed_requests_before_ms: None,
    };
    b.push(gc.clone());
    let s = clean(&b.log);
    assert!(s.job(JobId(1)).is_some(), "kept while task 1 is stopping");
    assert_eq!(s.node(A).map(|n| n.free.cpu_milli), Some(2000));
    // The stop is reported: the resources return, and the next GC takes the job.
    b.finished(1, 1, 1, -15).push(gc);
    let s = clean(&b.log);
    assert_eq!(s.node(A).map(|n| n.free.cpu_milli), Some(8000));
    assert!(s.job(JobId(1)).is_none() && s.job_was_collected(JobId(1)));
}

/// A task queued on its slave (S0.3) and reported started while the state had no room for
/// it took "as far as it goes": the node held more than its capacity, and the shortfall was
/// forgotten when grants came back (free then over-reported). It now waits at the head of
/// the queue, holding nothing, and takes its resources first once they free.
#[test]
fn a_queued_task_started_before_room_frees_takes_its_resources_when_they_do() {
    let mut b = LogBuilder::default();
    b.node(1, 4, 0).job("u0", 2, 3000, false);
    b.place(&[(1, 1, false), (2, 1, true)]).started(1, 1, 1);
    b.started(1, 2, 1);
    let s = clean(&b.log);
    let n = &s.nodes()[&A];
    assert_eq!(
        s.task(TaskId(2)).map(|t| t.status.state),
        Some(TaskState::Running)
    );
    assert_eq!(
        (n.queued.clone(), n.free.cpu_milli),
        (vec![TaskId(2)], 1000)
    );
    b.finished(1, 1, 1, 0);
    let s = clean(&b.log);
    let n = &s.nodes()[&A];
    assert!(n.queued.is_empty() && n.tasks.contains(&TaskId(2)));
    assert_eq!(n.free.cpu_milli, 1000);
    b.finished(1, 2, 1, 0);
    assert_eq!(clean(&b.log).nodes()[&A].free.cpu_milli, 4000);
}

/// A CPU change (S3.2 search step, S3.6 compression) of a task still queued on its slave
/// moved cores it never held into the node's free vector. Such a task holds nothing yet:
/// the change is ignored.
#[test]
fn live_cpu_changes_leave_a_task_that_holds_nothing_yet_alone() {
    let mut b = LogBuilder::default();
    b.node(1, 4, 1)
        .job("u0", 1, 3000, false)
        .job("u0", 1, 1000, true);
    b.place(&[(1, 1, false), (2, 1, false)]);
    b.job("u0", 1, 3000, false).place(&[(3, 1, true)]);
    b.push(Command::SetTaskCpus {
        node: A,
        task: TaskId(3),
        attempt: 1,
        cpu_milli: 1000,
    });
    b.push(Command::CompressTask {
        node: A,
        task: TaskId(3),
        attempt: 1,
        cpu_milli: 1000,
        gpu_task: TaskId(2),
    });
    let s = clean(&b.log);
    assert_eq!(s.nodes()[&A].free.cpu_milli, 0);
    assert_eq!(s.task(TaskId(3)).and_then(|t| t.cpu_milli), None);
}

/// A preemption naming the same victim twice stopped it and then failed half-way: the plan
/// reported the decision refused, so no one told the victim's slave to stop it, while the
/// state had it stopping and pending (free to run elsewhere as well). Refused whole now.
#[test]
fn a_preemption_naming_a_victim_twice_is_refused_whole() {
    let mut b = LogBuilder::default();
    b.node(1, 8, 0).priorities(16);
    b.job("u0", 1, 6000, false)
        .place(&[(1, 1, false)])
        .started(1, 1, 1);
    b.job("u1", 1, 6000, false).preempt(2, 1, &[(1, 1), (1, 1)]);
    let s = clean(&b.log);
    assert_eq!(
        s.task(TaskId(1)).map(|t| t.status.state),
        Some(TaskState::Running)
    );
    assert!(s.nodes()[&A].stopping.is_empty());
}

/// A `TaskStarted` of a task queued on its slave takes the node's resources, but
/// `command_nodes` did not name its node, so the scheduler's placement index kept the old
/// free vector and its next plan placed a task where there was no room (refused at apply).
#[test]
fn a_started_report_is_a_change_of_its_nodes_free_resources() {
    let mut b = LogBuilder::default();
    // Node A (4 CPUs): task 1 (3000) runs, task 2 (2000) waits in A's queue.
    b.node(1, 4, 0)
        .job("u0", 1, 3000, false)
        .job("u0", 1, 2000, false);
    b.place(&[(1, 1, false), (2, 1, true)]).started(1, 1, 1);
    // Task 1 shrinks to one CPU (no queue promotion): 3000 free, then task 2 starts there.
    b.push(Command::SetTaskCpus {
        node: A,
        task: TaskId(1),
        attempt: 1,
        cpu_milli: 1000,
    });
    let start = Command::TaskStarted {
        node: A,
        task: TaskId(2),
        attempt: 1,
    };
    assert!(command_nodes(&start).contains(&A));
    b.push(start);
    let mut state = ClusterState::new();
    let mut sched = IndexedScheduler::new(PolicyKind::FirstFit, 1);
    for (i, e) in b.log.iter().enumerate() {
        let pre = command_nodes(&e.command);
        let o = state.apply(i as u64 + 1, e.clone());
        sched.nodes_changed(&state, &touched_nodes(pre, &o));
    }
    assert_eq!(state.nodes()[&A].free.cpu_milli, 1000);
    // A 2500-millicore task fits nowhere now: the plan must not place it.
    let o = state.apply(
        100,
        hetsched_master_core::state::CommandEnvelope {
            at_ms: 2_000_000,
            request: None,
            command: Command::SubmitJob {
                spec: hetsched_common::JobSpec {
                    resources: hetsched_common::ResourceRequest {
                        cpu_milli: 2500,
                        mem_mib: 1,
                        ..Default::default()
                    },
                    count: 1,
                    command: vec!["true".into()],
                    ..Default::default()
                },
            },
        },
    );
    assert!(matches!(o, Outcome::Submitted { .. }), "{o:?}");
    let plan = sched.plan_at(&state, 2_000_000);
    assert!(plan.assignments.is_empty(), "{plan:?}");
    assert!(clean(&b.log).nodes()[&A].queued.is_empty());
}
