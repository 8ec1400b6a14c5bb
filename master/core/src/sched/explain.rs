//! `explain TASK`: for one task, every registered node's verdict, what preemption could
//! free and why it would or would not happen, and its place in its queue — read from the
//! applied state with the same checks the stages make (`sched::waiting`), beside the reason
//! the leader's latest plan gave (docs/CONTRACT.md, "Waiting reasons").

use super::index::Candidates;
use super::preemption::{plan_preemption, PreemptionConfig};
use super::waiting::{node_verdicts, queued_reason, Reader, WaitBoard};
use crate::state::{ClusterState, DepState, Job, JobStates};
use hetsched_common::protocol::{
    AttemptInfo, DependencyInfo, ExplainInfo, PreemptionVerdict, WaitingInfo,
};
use hetsched_common::{DependencyKind, TaskId, TaskState};
use std::collections::BTreeSet;

/// What preemption could do for `task` now.
fn preemption(view: &ClusterState, task: TaskId, cfg: &PreemptionConfig) -> PreemptionVerdict {
    let not = |detail: String| PreemptionVerdict {
        detail,
        ..PreemptionVerdict::default()
    };
    let Some(t) = view.task(task) else {
        return not("no such task".into());
    };
    if t.status.state != TaskState::Pending {
        return not(format!("not pending ({})", t.status.state.as_str()));
    }
    if let Some((node, victims)) = view.awaiting().get(&task) {
        return PreemptionVerdict {
            possible: true,
            node: Some(*node),
            victims: victims.iter().map(|v| v.task).collect(),
            detail: format!(
                "under way: waiting for {} task(s) to stop on node-{}",
                victims.len(),
                node.get()
            ),
        };
    }
    let base = view.priority().base_priority;
    if t.priority <= base {
        return not(format!(
            "never: its priority {} is not above the base priority {base}",
            t.priority
        ));
    }
    let Some(job) = view.jobs().get(&t.job) else {
        return not("its job is gone".into());
    };
    let only: Option<Candidates> =
        (!job.candidates.is_empty()).then(|| job.candidates.iter().copied().collect());
    match plan_preemption(view, task, only.as_ref(), &BTreeSet::new(), cfg) {
        Some(p) => PreemptionVerdict {
            possible: true,
            node: Some(p.node),
            victims: p.victims.iter().map(|v| v.task).collect(),
            detail: format!(
                "stopping {} lower-priority task(s) on node-{} would make room; the next \
                 plan does it unless a free node comes first",
                p.victims.len(),
                p.node.get()
            ),
        },
        None => not(format!(
            "no node would have room after stopping the tasks of priority below {} that may \
             be stopped (not protected, preempted fewer than {} times)",
            t.priority, cfg.max_preemptions
        )),
    }
}

/// `explain` for `task` at leader time `now_ms`: `None` when there is no such task.
/// `board`: the leader's latest plan's reasons.
pub fn explain(
    view: &ClusterState,
    task: TaskId,
    board: Option<&WaitBoard>,
    now_ms: u64,
    cfg: &PreemptionConfig,
) -> Option<ExplainInfo> {
    let t = view.task(task)?;
    let job = view.jobs().get(&t.job)?;
    let nodes = node_verdicts(view, job, task);
    let (waiting, queue_position): (Option<WaitingInfo>, Option<u64>) = match t.status.state {
        TaskState::Pending => (
            board
                .and_then(|b| b.get(t, job, now_ms))
                .map(|w| Reader::new(view).read(t, job, &w)),
            board.and_then(|b| b.position(task)),
        ),
        TaskState::Assigned => match queued_on(view, task) {
            Some((node, pos)) => (Some(queued_reason(node, job, task)), Some(pos)),
            None => (None, None),
        },
        _ => (None, None),
    };
    Some(ExplainInfo {
        task,
        state: t.status.state.as_str().to_string(),
        waiting,
        nodes,
        preemption: preemption(view, task, cfg),
        queue_position,
        job_id: Some(t.job),
        submitted_ms: Some(job.submitted_ms),
        started_ms: t
            .started_ms
            .filter(|_| t.status.state == TaskState::Running),
        attempts: t
            .attempt_nodes
            .iter()
            .map(|(a, n)| AttemptInfo {
                attempt: *a,
                node: *n,
            })
            .collect(),
        dependencies: dependencies(view, job, t.index),
    })
}

/// Issue 51: each job task `index` of `job` follows, its state, and whether it is met.
pub fn dependencies(view: &ClusterState, job: &Job, index: u32) -> Vec<DependencyInfo> {
    let mut states = JobStates::default();
    job.spec
        .dependencies()
        .map(|(kind, up)| {
            let state = if kind == DependencyKind::AfterEach {
                view.job(up)
                    .and_then(|j| j.tasks.get(index as usize))
                    .and_then(|t| view.task(*t))
                    .map_or("gone", |t| t.status.state.as_str())
            } else {
                states.of(&view.dependency_view(), up)
            };
            let status = match view.dependency_item(kind, up, index, &mut states) {
                DepState::Met => "met",
                DepState::Waiting(_) => "waiting",
                DepState::Never(_) => "never",
            };
            DependencyInfo {
                kind: kind.key().to_string(),
                job: up,
                state: state.to_string(),
                status: status.to_string(),
            }
        })
        .collect()
}

/// The node whose local queue holds `task`, and its place there (1: next).
pub fn queued_on(view: &ClusterState, task: TaskId) -> Option<(&crate::state::Node, u64)> {
    let t = view.task(task)?;
    let node = view.node(t.status.node?)?;
    let pos = node.queued.iter().position(|q| *q == task)?;
    Some((node, pos as u64 + 1))
}
