//! QueueStage — the head of the chain: which pending task comes next.
//!
//! At plan start it orders the pending tasks (S1: priority, then submission; S3: DRF between
//! users, or the pipeline's queues — `sched::queue`, `sched::multiqueue`); per task it
//! decides whether the task is considered in this plan at all. It comes first because the
//! order is the policy: when room is short, the most important work is placed first and
//! only it may preempt, and everything after it works on one task at a time.

use super::stage::PendingTask;
use crate::sched::loads::Loads;
use crate::sched::multiqueue::{ordered_refs, Ordering, QueueKind, Queued};
use crate::state::ClusterState;
use hetsched_common::JobId;
#[cfg(test)]
use hetsched_common::TaskId;
use std::collections::{BTreeMap, BTreeSet};

/// The queue stage: the configured order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueStage {
    /// S1 submission, S3 DRF or the S3 pipeline order.
    pub ordering: Ordering,
}

impl QueueStage {
    /// The pending tasks of `view` in the order this plan considers them; DRF reads what
    /// users hold from `loads` (none kept: as if nobody held anything).
    #[cfg(test)]
    pub fn order(&self, view: &ClusterState, loads: Option<&Loads>) -> Vec<TaskId> {
        match loads {
            Some(l) => crate::sched::multiqueue::ordered_with(
                view,
                self.ordering,
                l.users(),
                &l.capacity(),
            ),
            None => crate::sched::multiqueue::ordered_with(
                view,
                self.ordering,
                &BTreeMap::new(),
                &Default::default(),
            ),
        }
    }

    /// [`order`](Self::order), each task with what the ordering read of it.
    pub fn order_refs<'v>(&self, view: &'v ClusterState, loads: Option<&Loads>) -> Vec<Queued<'v>> {
        match loads {
            Some(l) => ordered_refs(
                view,
                self.ordering,
                l.users(),
                &l.capacity(),
                l.fair_share(),
            ),
            None => ordered_refs(
                view,
                self.ordering,
                &BTreeMap::new(),
                &Default::default(),
                &BTreeMap::new(),
            ),
        }
    }

    /// `task` as the next stages see it, or `None` when this plan passes it over: gone, or
    /// waiting out a retry backoff past `now_ms`, or of a job (at its priority) already
    /// `stuck` in this plan.
    #[cfg(test)]
    pub fn admit<'v>(
        view: &'v ClusterState,
        now_ms: u64,
        stuck: &BTreeSet<(JobId, i64)>,
        task: TaskId,
    ) -> Option<PendingTask<'v>> {
        let t = view.tasks().get(&task)?;
        let job = view.jobs().get(&t.job)?;
        Self::admit_queued(now_ms, stuck, Queued { task, t, job })
    }

    /// [`admit`](Self::admit) for a task of the plan's order (already looked up).
    pub fn admit_queued<'v>(
        now_ms: u64,
        stuck: &BTreeSet<(JobId, i64)>,
        q: Queued<'v>,
    ) -> Option<PendingTask<'v>> {
        let Queued { task, t, job } = q;
        if t.not_before_ms.is_some_and(|nb| nb > now_ms) {
            return None; // waiting out a retry backoff
        }
        if stuck.contains(&(t.job, t.priority)) {
            return None;
        }
        let req = &job.spec.resources;
        Some(PendingTask {
            task,
            t,
            job,
            req,
            queue: QueueKind::of(req),
        })
    }
}

#[cfg(test)]
#[path = "queue_stage_tests.rs"]
mod tests;
