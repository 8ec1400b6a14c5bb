//! The books kept around the chain, not inside it: which tasks are blocked until a change
//! (`blocked.rs`), why the waiting tasks wait (`why.rs`), and whether a plan can be skipped
//! because nothing changed since one that found everything blocked (`quiet.rs`).
//!
//! The driver asks the books before a task goes through the chain (is it passed over?) and
//! tells them what the chain decided; no stage reads or writes them, so a stage added to
//! the chain is blocked, explained and skipped like the others without knowing of them.

use super::blocked::{BlockKey, Blocked};
use super::context::Decision;
use super::queue_stage::QueueStage;
use super::quiet::{Quiet, Tally};
use super::stage::PendingTask;
use super::why::Reasons;
use crate::sched::multiqueue::{Ordering, Queued};
use crate::state::ClusterState;
use hetsched_common::{JobId, TaskId};
use std::collections::BTreeSet;

/// The books, kept across plans.
#[derive(Debug, Default)]
pub(super) struct Books {
    /// Tasks blocked until a change.
    pub blocked: Blocked,
    /// Why the tasks the latest plan left waiting wait.
    pub reasons: Reasons,
    /// What the latest plan depended on, when it found everything blocked.
    quiet: Option<Quiet>,
    /// Plans skipped as unchanged since a quiet one.
    skipped: u64,
}

/// One plan's part of the books.
#[derive(Debug)]
pub(super) struct PlanBooks {
    /// Keys found stuck in this plan (blocked for the rest of it).
    stuck_now: BTreeSet<BlockKey>,
    /// What the plan probed, blocked and passed over.
    tally: Tally,
    /// Whether a stuck key stays blocked across plans: only where nothing but resources
    /// decides (no slave queues; see blocked.rs).
    across: bool,
}

impl Books {
    /// Whether the plan over `view` at `now_ms` can be skipped: nothing changed since a plan
    /// that found every task blocked (counted as skipped).
    pub fn quiet_holds(&mut self, view: &ClusterState, now_ms: u64) -> bool {
        let Some(q) = self.quiet.take() else {
            return false;
        };
        if !q.holds(view, self.blocked.generation(), now_ms) {
            return false;
        }
        self.quiet = Some(q);
        self.skipped += 1;
        true
    }

    /// Plans skipped so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// A plan starts, in `ordering`, with S3 pools on or not, with the users' fair-share
    /// `factors`; `across`: see [`PlanBooks`].
    pub fn begin(
        &mut self,
        ordering: Ordering,
        pools: bool,
        factors: std::collections::BTreeMap<String, u64>,
        across: bool,
    ) -> PlanBooks {
        self.reasons.begin(ordering, pools, factors);
        PlanBooks {
            stuck_now: BTreeSet::new(),
            tally: Tally::default(),
            across,
        }
    }

    /// Whether `head`'s key is blocked from the plan's start (the chain will pass it over:
    /// no parallel group proposes for it, `parallel.rs`).
    pub fn is_blocked(&self, head: &PendingTask<'_>) -> bool {
        head.job.spec.program.is_none() && self.blocked.contains(&BlockKey::of(head))
    }

    /// `queued` as the chain sees it, with its blocked key, or `None` when the plan passes
    /// it over: the queue stage does not admit it now (a back-off, a job `stuck` at its
    /// priority), or its key is blocked (it keeps its place, probed again after a change).
    pub fn admit<'v>(
        &mut self,
        pb: &mut PlanBooks,
        now_ms: u64,
        stuck: &BTreeSet<(JobId, i64)>,
        queued: Queued<'v>,
    ) -> Option<(PendingTask<'v>, Option<BlockKey>)> {
        let Some(head) = QueueStage::admit_queued(now_ms, stuck, queued) else {
            if let Some(nb) = queued.t.not_before_ms.filter(|nb| *nb > now_ms) {
                pb.tally.backoff(nb);
            }
            return None;
        };
        let key = head.job.spec.program.is_none().then(|| BlockKey::of(&head));
        if key
            .as_ref()
            .is_some_and(|k| pb.stuck_now.contains(k) || self.blocked.contains(k))
        {
            return None;
        }
        self.blocked.probed();
        pb.tally.probed += 1;
        Some((head, key))
    }

    /// The chain decided `decision` for `head` (`key` from [`admit`](Self::admit); `room`:
    /// whether the plan could still hold a preemption when the chain began on it).
    pub fn decided(
        &mut self,
        pb: &mut PlanBooks,
        view: &ClusterState,
        head: &PendingTask<'_>,
        decision: &Decision,
        key: Option<BlockKey>,
        room: bool,
    ) {
        self.reasons.decided(view, head, decision, key.as_ref());
        // A held task waits for a job's end, a task's end or a start slot: each frees
        // resources or changes the pending set, so it counts as blocked for a quiet plan.
        if matches!(decision, Decision::Hold { .. }) && pb.across {
            pb.tally.blocked += 1;
        }
        let awaiting = view.awaiting().contains_key(&head.task);
        if let (Decision::Stuck, Some(k), false) = (decision, key, awaiting) {
            if pb.across && room {
                self.blocked.insert(k.clone());
                pb.tally.blocked += 1;
            }
            pb.stuck_now.insert(k);
        }
    }

    /// The plan reached `order[..reached]` (`no_nodes`: none takes work): the waiting
    /// reasons are settled.
    pub fn finish(
        &mut self,
        pb: &PlanBooks,
        view: &ClusterState,
        order: Vec<TaskId>,
        reached: usize,
        no_nodes: bool,
    ) {
        let blocked = &self.blocked;
        let keep = |k: &BlockKey| blocked.contains(k) || pb.stuck_now.contains(k);
        self.reasons.finish(view, order, reached, no_nodes, keep);
    }

    /// The plan is made: when it reached every task (`whole`) and decided nothing
    /// (`empty`), the next plans may be skipped until something changes.
    pub fn after(&mut self, pb: &PlanBooks, view: &ClusterState, whole: bool, empty: bool) {
        if whole && empty {
            self.quiet = Quiet::of(view, self.blocked.generation(), &pb.tally);
        }
    }
}
