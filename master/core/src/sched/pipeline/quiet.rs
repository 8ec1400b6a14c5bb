//! A plan that found every waiting task blocked is not redone until something changes.
//!
//! With a deep backlog where nothing fits, a plan still orders every pending task, counts
//! the pools' queues and passes each task over by its blocked key (`blocked.rs`): work in
//! the size of the backlog, for a plan that decides nothing. The leader plans again on
//! events that change none of that (a task's start report, a submission refused), so a
//! plan remembers, when it ended *quiet*, what it depended on:
//! - the blocked set's generation (resources freed, a node joining, the pools' terms, the
//!   priority configuration, a reservation released, new victims: every such change bumps
//!   it, see `blocked.rs`);
//! - the pending set, exactly, and the highest task id (a submission, a cancellation, a
//!   requeue change it; a task's job, request and priority never change while it waits);
//! - the earliest retry back-off it passed over (a plan at or after that time reaches the
//!   task again).
//!
//! A plan is quiet when it decided nothing, reached every task in its order, and every task
//! it probed was blocked across plans (no program task, slave queue, gang or preemptor
//! awaiting victims: their chances change with what the blocked set does not follow).
//! While all of the above hold, the next plan is the same empty plan with the same
//! reasons, so it is skipped: its cost no longer grows with the backlog. Derived data like
//! the blocked set: the same log gives the same plans.

use crate::state::ClusterState;
use hetsched_common::TaskId;

/// What a quiet plan depended on.
#[derive(Debug, Default)]
pub(super) struct Quiet {
    /// The blocked set's generation at the plan's end.
    generation: u64,
    /// The highest task id the state held.
    high: Option<TaskId>,
    /// The pending tasks, ascending.
    pending: Vec<TaskId>,
    /// The earliest retry back-off end it passed over.
    due_ms: Option<u64>,
}

/// One plan's tally toward being quiet.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Tasks that went through the stages.
    pub probed: usize,
    /// Of those, the ones blocked across plans.
    pub blocked: usize,
    /// The earliest retry back-off end passed over.
    pub due_ms: Option<u64>,
}

impl Tally {
    /// A task passed over until `nb` (its retry back-off).
    pub fn backoff(&mut self, nb: u64) {
        self.due_ms = Some(self.due_ms.map_or(nb, |d| d.min(nb)));
    }
}

impl Quiet {
    /// The mark of a plan over `view` that decided nothing and reached every task, with
    /// the blocked set at `generation`; `None` unless every probe was blocked.
    pub fn of(view: &ClusterState, generation: u64, tally: &Tally) -> Option<Self> {
        (tally.probed == tally.blocked).then(|| Self {
            generation,
            high: view.tasks().keys().next_back().copied(),
            pending: view.pending().iter().copied().collect(),
            due_ms: tally.due_ms,
        })
    }

    /// Whether a plan over `view` at `now_ms`, with the blocked set at `generation`, would
    /// be this quiet plan again.
    pub fn holds(&self, view: &ClusterState, generation: u64, now_ms: u64) -> bool {
        self.generation == generation
            && self.due_ms.is_none_or(|d| d > now_ms)
            && self.high == view.tasks().keys().next_back().copied()
            && self.pending.len() == view.pending().len()
            && self.pending.iter().eq(view.pending().iter())
    }
}
