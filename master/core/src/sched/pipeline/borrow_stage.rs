//! PoolBorrowStage — S3 pools (docs/DESIGN.md, S3.3–S3.4): before a task is placed,
//! the index shows it only the capacity its pool may use now.
//!
//! While a GPU task waits, a CPU task must not see the part of a GPU node's reserved CPU
//! pool that GPU tasks do not use yet: that part is hidden from the index before the CPU
//! task goes on, and shown again before a GPU task (or at the end of the plan). It sits
//! after feasibility and before engine choice and selection, because both of those read
//! the index's free vectors, and must read them as this task may use them. The rest of
//! the pools' rules (GPU pools, borrowing by GPU tasks) acts inside selection through
//! [`PoolPlan`]; taking a borrowed reserve back is the take-back stage.

use super::context::Decision;
use super::pool_round::PoolRound;
use super::stage::{Stage, Step};
use crate::sched::index::PlacementIndex;
#[cfg(test)]
use crate::sched::loads::Loads;
use crate::sched::multiqueue::QueueKind;
#[cfg(test)]
use crate::sched::multiqueue::ReserveHistory;
#[cfg(test)]
use hetsched_common::TaskId;

/// The pool stage before placement.
#[derive(Debug)]
pub(super) struct PoolBorrowStage;

impl PoolBorrowStage {
    /// Before a task of `queue` goes on: hides from `index` what it may not use now (a CPU
    /// task, while a GPU task waits: the GPU nodes' unused reserves), or shows again what
    /// was hidden for an earlier task. Nothing with pools off.
    pub fn before(index: &mut PlacementIndex, round: &mut PoolRound, queue: QueueKind) {
        if let Some(p) = round.active() {
            p.plan.before(index, p.loads, p.history, queue);
        }
    }
}

/// A filter that decides nothing: it only changes what the later stages see of the index.
impl Stage for PoolBorrowStage {
    fn name(&self) -> &'static str {
        "pool-borrow"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        Self::before(step.index, step.pools, step.head.queue);
        None
    }
}

#[cfg(test)]
#[path = "borrow_stage_tests.rs"]
mod tests;
