//! EngineChoiceStage — S0.1–2, API-program tasks (docs/DESIGN.md, S0.2): which engine kind
//! and which slave.
//!
//! `sched::engine_choice` ranks the slaves with a free target engine (or, the target kind
//! being scarce, a second-best one); this stage tries them in that order against the index,
//! and when none can take the task, leaves it waiting for a target engine, in the least
//! loaded target slave's queue where slave queues are on. It sits after feasibility (it
//! ranks only the nodes the task may use) and before selection, because for a program task
//! the engine ranking replaces the placement policy; a task whose relation is unknown, or
//! whose permitted nodes have no engine of the relation, falls through to selection.

use super::context::Decision;
use super::stage::{queue_node, PendingTask, Scope, Stage, Step};
use crate::sched::engine_choice::{self, EngineChoice, EngineChoiceConfig, EngineLoad};
use crate::sched::index::PlacementIndex;
use crate::state::{with_unit, Assign, ClusterState, Job};
use hetsched_common::program::EngineTotal;
use hetsched_common::{EngineKind, JobId, NodeId};
use std::collections::BTreeMap;

/// The engine-choice part of one plan, kept in the plan context (`stage::PlanState`).
#[derive(Debug, Default)]
pub(super) struct EngineRound {
    /// Engine use per node, built at the first program task of the plan, then counting
    /// this plan's decisions.
    pub load: Option<EngineLoad>,
    /// Each job's task–engine relation (`None`: not a program task, or none known), looked
    /// up once per plan (a copy: the round outlives no state, but holds no borrow of one).
    relations: BTreeMap<JobId, Option<Vec<EngineTotal>>>,
}

impl EngineRound {
    /// `job`'s relation (kinds by total time, fastest first).
    #[cfg(test)]
    pub fn relation(&mut self, view: &ClusterState, job: &Job) -> Option<&[EngineTotal]> {
        relation(&mut self.relations, view, job)
    }
}

/// `job`'s relation from `relations`, looked up in `view` on first use.
fn relation<'r>(
    relations: &'r mut BTreeMap<JobId, Option<Vec<EngineTotal>>>,
    view: &ClusterState,
    job: &Job,
) -> Option<&'r [EngineTotal]> {
    relations
        .entry(job.id)
        .or_insert_with(|| {
            job.spec
                .program
                .as_ref()
                .and_then(|p| view.relations().get(&p.kind()))
                .filter(|r| !r.is_empty())
                .cloned()
        })
        .as_deref()
}

/// The engine-choice stage: its bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineChoiceStage {
    /// `--engine-efficiency-bound` and `--load-bound`.
    pub cfg: EngineChoiceConfig,
}

impl EngineChoiceStage {
    /// A program task's decision: placed or queued with an engine kind, or stuck; `None`
    /// for a task the stage does not decide (see the module docs).
    #[allow(clippy::too_many_arguments)]
    pub fn decide<'v>(
        &self,
        index: &mut PlacementIndex,
        round: &mut EngineRound,
        queue_depth: u32,
        queued_now: &BTreeMap<NodeId, u32>,
        view: &'v ClusterState,
        head: &PendingTask<'v>,
        scope: &Scope<'_>,
    ) -> Option<Decision> {
        let relation = relation(&mut round.relations, view, head.job)?;
        let load = round.load.get_or_insert_with(|| EngineLoad::of(view));
        let may_use = |n: NodeId| scope.may_use(n);
        let choice = engine_choice::choose(&self.cfg, relation, load, may_use)?;
        let placed = match Self::take_ranked(index, &choice, head) {
            Some(p) => Some(p),
            None => self.wait(
                load,
                relation,
                &choice,
                queue_depth,
                queued_now,
                view,
                head,
                scope,
            ),
        };
        Some(match placed {
            Some((node, kind, queued)) => {
                load.add(node, kind);
                Decision::Assign(Assign {
                    task: head.task,
                    node,
                    queued,
                    engine: Some(kind),
                    borrowed: false,
                })
            }
            None => Decision::Stuck,
        })
    }

    /// The first ranked node whose index entry fits the task (and is not held for another
    /// task's preemption), taken from `index`: `(node, kind, false)`.
    fn take_ranked(
        index: &mut PlacementIndex,
        choice: &EngineChoice,
        head: &PendingTask<'_>,
    ) -> Option<(NodeId, EngineKind, bool)> {
        if choice.waiting {
            return None;
        }
        for &(node, kind) in &choice.ranked {
            // A node held for a waiting preemptor is not this task's to take.
            let held = index.reservation(node).is_some_and(|r| r.task != head.task);
            // The task takes its resources and the engine unit it books (S0.2).
            let (req, _) = with_unit(head.req, kind);
            let fits = !held && index.free(node).is_some_and(|f| f.fits(&req));
            if fits && index.take(node, &req).is_some() {
                return Some((node, kind, false));
            }
        }
        None
    }

    /// No ranked engine could take it: it waits on a target engine (counted in `load`),
    /// in the least loaded target slave's queue when there is room: `(node, kind, true)`.
    /// An overflow to a second-best kind does not queue there (it would rather wait).
    #[allow(clippy::too_many_arguments)]
    fn wait(
        &self,
        load: &mut EngineLoad,
        relation: &[EngineTotal],
        choice: &EngineChoice,
        queue_depth: u32,
        queued_now: &BTreeMap<NodeId, u32>,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
    ) -> Option<(NodeId, EngineKind, bool)> {
        if let Some(&(_, kind)) = choice.ranked.first() {
            load.wait(kind);
        }
        // Wait on a target engine: in the least loaded target slave's queue.
        let targets: Vec<NodeId> = choice.ranked.iter().map(|r| r.0).collect();
        let (_, second) = engine_choice::targets(relation, self.cfg.efficiency_bound);
        if choice.overflow && second.is_some() {
            return None;
        }
        // Units other than cores are granted at assignment (a queued task books nothing):
        // a task waiting for one waits in the master's queue.
        if choice.ranked.iter().any(|r| r.1 != EngineKind::Cpu) {
            return None;
        }
        let may_use = |n: NodeId| scope.may_use(n);
        let node = queue_node(
            queue_depth,
            view,
            head.req,
            &may_use,
            queued_now,
            Some(&targets),
        )?;
        let kind = choice
            .ranked
            .iter()
            .find(|r| r.0 == node)
            .map(|r| r.1)
            .unwrap_or(EngineKind::Cpu);
        Some((node, kind, true))
    }
}

impl Stage for EngineChoiceStage {
    fn name(&self) -> &'static str {
        "engine-choice"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        step.head.job.spec.program.as_ref()?; // not a program task: not this stage's
        let round = step.state.part::<EngineRound>();
        let queued_now = &step.decided.queued_now;
        let (view, head, depth) = (step.view, step.head, step.queue_depth);
        self.decide(
            step.index,
            round,
            depth,
            queued_now,
            view,
            head,
            &step.scope,
        )
    }
}

#[cfg(test)]
#[path = "engine_stage_tests.rs"]
mod tests;
