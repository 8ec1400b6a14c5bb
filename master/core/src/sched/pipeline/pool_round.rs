//! The S3 pools' part of one plan (docs/DESIGN.md, S3.3–S3.4), kept in the plan context:
//! the loads, the reserve history and this plan's pool bookkeeping. Several stages read it
//! (the pool-borrow stage hides reserves through it, selection places GPU tasks through it,
//! take-back finds borrowers through it), so it lives here rather than in any one of them.

use crate::sched::index::PlacementIndex;
use crate::sched::loads::Loads;
use crate::sched::multiqueue::{Queued, ReserveHistory};
use crate::sched::pools::PoolPlan;
#[cfg(test)]
use crate::state::ClusterState;
use hetsched_common::ResourceRequest;
#[cfg(test)]
use hetsched_common::TaskId;

/// The pools' part of one plan: the S3 loads (out of the scheduler for the plan), the
/// reserve history and this plan's pool bookkeeping.
#[derive(Debug)]
pub(super) struct PoolRound {
    loads: Option<Loads>,
    history: Option<ReserveHistory>,
    /// Present when pools are on (both loads and a history).
    plan: Option<PoolPlan>,
}

/// The pools in use in this plan, as the stages read them.
#[derive(Debug)]
pub(super) struct Pools<'a> {
    /// This plan's pool bookkeeping.
    pub plan: &'a mut PoolPlan,
    /// Holdings and GPU pools per node.
    pub loads: &'a Loads,
    /// The reserve's size.
    pub history: &'a ReserveHistory,
}

impl PoolRound {
    /// The pools of a plan over `view` whose tasks come in `order` (off unless both
    /// `loads` and `history` are given).
    #[cfg(test)]
    pub fn new(
        view: &ClusterState,
        loads: Option<Loads>,
        history: Option<ReserveHistory>,
        order: &[TaskId],
    ) -> Self {
        let reqs = order
            .iter()
            .filter_map(|t| view.tasks().get(t).and_then(|t| view.job_resources(t.job)));
        Self::with(loads, history, reqs)
    }

    /// The same for the plan's `order` as the queue stage read it (no lookups).
    pub fn of_queued(
        loads: Option<Loads>,
        history: Option<ReserveHistory>,
        order: &[Queued<'_>],
    ) -> Self {
        Self::with(loads, history, order.iter().map(|q| &q.job.spec.resources))
    }

    fn with<'r>(
        loads: Option<Loads>,
        history: Option<ReserveHistory>,
        reqs: impl Iterator<Item = &'r ResourceRequest>,
    ) -> Self {
        let plan = match (&loads, history) {
            (Some(_), Some(_)) => Some(PoolPlan::of_requests(reqs)),
            _ => None,
        };
        Self {
            loads,
            history,
            plan,
        }
    }

    /// The pools, when on.
    pub fn active(&mut self) -> Option<Pools<'_>> {
        match (&mut self.plan, &self.loads, &self.history) {
            (Some(plan), Some(loads), Some(history)) => Some(Pools {
                plan,
                loads,
                history,
            }),
            _ => None,
        }
    }

    /// Issue 53: the users' fair-share factors (parts per billion) the plan orders by;
    /// `None` when fair share is off or nobody has usage yet.
    pub fn fair_share(&self) -> Option<&std::collections::BTreeMap<String, u64>> {
        self.loads
            .as_ref()
            .map(|l| l.fair_share())
            .filter(|f| !f.is_empty())
    }

    /// Into `out`: the pools' terms at the plan's start, with the reserve's size (nothing:
    /// pools off).
    pub fn terms_into(&self, out: &mut Vec<u64>) {
        if let (Some(p), Some(h)) = (&self.plan, &self.history) {
            p.terms_into(out);
            out.push(h.per_gpu_milli());
        }
    }

    /// Ends the plan: shows `index` what is hidden, and returns the loads.
    pub fn finish(mut self, index: &mut PlacementIndex) -> Option<Loads> {
        if let Some(pp) = &mut self.plan {
            pp.unhide(index);
        }
        self.loads
    }
}
