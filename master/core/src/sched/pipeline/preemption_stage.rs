//! PreemptionStage — S1 (docs/DESIGN.md, S1.4): a task that fits nowhere stops running
//! lower-priority tasks on the node where that makes room most cheaply
//! (`sched::preemption` chooses the node and the victims).
//!
//! It sits after selection and take-back because stopping work is the most expensive
//! decision the scheduler takes, and before the slave queue because a higher-priority task
//! should run (at the cost of lower-priority ones) rather than wait. Bounded per plan, and
//! a victim chosen by an earlier preemption of the plan is not chosen again.

use super::context::{Decided, Decision};
use super::stage::{PendingTask, Scope, Stage, Step};
use crate::sched::preemption::{plan_preemption, PreemptionConfig};
use crate::state::ClusterState;

/// The preemption stage (its limits are the scheduler's public `preemption`).
#[derive(Debug)]
pub(super) struct PreemptionStage;

impl PreemptionStage {
    /// The victims the task needs, on the best node within its locality; `None` when the
    /// plan holds `cfg.max_per_plan` preemptions already or no node can make room.
    pub fn decide(
        cfg: &PreemptionConfig,
        decided: &Decided,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
    ) -> Option<Decision> {
        if !decided.preempt_room(cfg.max_per_plan) {
            return None;
        }
        plan_preemption(view, head.task, scope.locality(), &decided.victims, cfg)
            .map(Decision::Preempt)
    }
}

impl Stage for PreemptionStage {
    fn name(&self) -> &'static str {
        "preemption"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        Self::decide(
            step.preemption,
            step.decided,
            step.view,
            step.head,
            &step.scope,
        )
    }
}

#[cfg(test)]
#[path = "preemption_stage_tests.rs"]
mod tests;
