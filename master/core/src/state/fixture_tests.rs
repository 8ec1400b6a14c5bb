//! What the handlers' unit tests share: a state built through `apply` from the shared test
//! log (`sched::test_log`), so each test starts from books a log could produce and then
//! calls one handler on them directly — no sockets, no runtime.

use super::{Assign, Command, JobId, NodeId, Outcome, Plan, TaskId};
use crate::sched::test_log::{node, spec, submit, Log};
use hetsched_common::JobSpec;

/// A state with `nodes` up nodes of `cpus` cores and no GPU (ids 1, 2, ...).
pub(super) fn cluster(nodes: u64, cpus: u64) -> Log {
    let mut l = Log::new();
    for key in 1..=nodes {
        l.apply_bare(node(key, cpus, 0, &[]));
    }
    l
}

/// `count` tasks of `cpus` cores each, submitted as one job.
pub(super) fn tasks_of(count: u32, cpus: u64) -> JobSpec {
    spec(count, cpus, 0)
}

/// Submits `spec`; returns its job and tasks.
pub(super) fn job(l: &mut Log, spec: JobSpec) -> (JobId, Vec<TaskId>) {
    match l.apply_bare(submit(spec)) {
        Outcome::Submitted { job, tasks } => (job, tasks),
        o => panic!("{o:?}"),
    }
}

/// Places `task` on `node` (in its slave queue when `queued`); panics unless accepted.
pub(super) fn place(l: &mut Log, task: TaskId, node: NodeId, queued: bool) {
    let plan = Plan {
        assignments: vec![Assign {
            queued,
            ..Assign::to(task, node)
        }],
        queue_depth: 4,
        ..Default::default()
    };
    match l.apply_bare(Command::ApplyPlan(plan)) {
        Outcome::PlanApplied { rejected: 0, .. } => {}
        o => panic!("{o:?}"),
    }
}

/// Places `task` on `node` and reports its first attempt started.
pub(super) fn run(l: &mut Log, task: TaskId, node: NodeId) {
    place(l, task, node, false);
    let started = Command::TaskStarted {
        node,
        task,
        attempt: 1,
    };
    assert_eq!(l.apply_bare(started), Outcome::TaskUpdated);
}

/// Free millicores of `node`.
pub(super) fn free_cpu(l: &Log, node: NodeId) -> u64 {
    l.s.nodes()[&node].free.cpu_milli
}
