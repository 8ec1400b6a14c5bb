//! TakeBackStage — S3 take-back (docs/DESIGN.md, S3.3): a GPU task that fits nowhere
//! because CPU tasks borrowed the reserved CPU pool of a GPU node stops those borrowers
//! (newest first, only as many as needed) and takes the node.
//!
//! It sits after selection (a GPU task that fits somewhere stops nobody) and before
//! preemption, because taking a borrowed reserve back is the pools' own rule: it does not
//! need the preemptor to outrank its victims, only not to be outranked, and it keeps a
//! GPU task within its own GPU pool first. Take-backs count against the same per-plan
//! limit as preemptions, and never pick a victim another preemption of the plan chose.

use super::context::{Decided, Decision};
use super::pool_round::Pools;
use super::stage::{PendingTask, Scope, Stage, Step};
use crate::sched::index::{Candidates, PlacementIndex};
use crate::sched::multiqueue::ReserveHistory;
use crate::sched::pools::{separated_pool, within};
use crate::sched::preemption::PreemptionConfig;
use crate::state::{ClusterState, Node, Preemption, TaskRef};
use hetsched_common::{NodeId, ResourceRequest, TaskId};
use std::collections::BTreeSet;

/// The take-back stage over the scheduler's index and reservations.
#[derive(Debug)]
pub(super) struct TakeBackStage<'a> {
    /// The index as this plan left it so far.
    pub index: &'a PlacementIndex,
    /// Nodes held for a waiting preemptor: not taken back from.
    pub reserved: &'a BTreeSet<NodeId>,
    /// The per-plan limit shared with preemption.
    pub cfg: &'a PreemptionConfig,
}

impl TakeBackStage<'_> {
    /// A GPU task's take-back, with pools on: within its own GPU pool (where it has first
    /// claim) when the cluster has both pools; `None` when there is nothing to take back,
    /// the task already waits for victims, or the plan holds its limit of preemptions.
    pub fn decide(
        &self,
        pools: Option<Pools<'_>>,
        decided: &Decided,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
    ) -> Option<Decision> {
        let pools = pools?;
        if !head.is_gpu()
            || view.awaiting().contains_key(&head.task)
            || !decided.preempt_room(self.cfg.max_per_plan)
        {
            return None;
        }
        let lending = pools.plan.borrowed_on(pools.loads, pools.history);
        if lending.is_empty() {
            return None; // nobody borrows a reserve: nothing to take back
        }
        let allowed = scope.allowed();
        let own = separated_pool(pools.loads, head.queue)
            .map(|own| within(pools.loads.pool_nodes(own), allowed));
        let here = own.as_deref().or(allowed);
        let p = self.take_back_in(
            Some(lending),
            pools.history,
            view,
            head.task,
            head.req,
            here,
            &decided.victims,
        )?;
        Some(Decision::Preempt(p))
    }

    /// A GPU node where `req` fits once CPU tasks borrowing its reserved CPUs stop; those
    /// borrowers (newest first) as victims. `taken`: victims chosen already.
    #[cfg(test)]
    pub fn take_back(
        &self,
        history: &ReserveHistory,
        view: &ClusterState,
        task: TaskId,
        req: &ResourceRequest,
        allowed: Option<&Candidates>,
        taken: &BTreeSet<TaskId>,
    ) -> Option<Preemption> {
        self.take_back_in(None, history, view, task, req, allowed, taken)
    }

    /// [`take_back`](Self::take_back) over `lending` only (with S3 loads: the nodes where
    /// CPU tasks borrow the reserve, `PoolPlan::borrowed_on`; `None`: every node): a probe
    /// runs for every distinct blocked GPU request of a plan, and most GPU nodes lend no
    /// reserve.
    #[allow(clippy::too_many_arguments)]
    pub fn take_back_in(
        &self,
        lending: Option<&[NodeId]>,
        history: &ReserveHistory,
        view: &ClusterState,
        task: TaskId,
        req: &ResourceRequest,
        allowed: Option<&Candidates>,
        taken: &BTreeSet<TaskId>,
    ) -> Option<Preemption> {
        let priority = view.tasks().get(&task)?.priority;
        let nodes: Box<dyn Iterator<Item = &Node>> = match lending {
            Some(ids) => Box::new(ids.iter().filter_map(|id| view.nodes().get(id))),
            None => Box::new(view.nodes().values()),
        };
        for n in nodes {
            if !n.takes_work() || n.capacity.gpus.is_empty() || self.reserved.contains(&n.id) {
                continue;
            }
            if allowed.is_some_and(|c| !c.contains(n.id)) {
                continue;
            }
            let Some(free) = self.index.free(n.id) else {
                continue;
            };
            if free.cpu_milli >= req.cpu_milli {
                continue; // CPUs are not what is short here
            }
            // Everything but the CPUs must fit already (checked in place: this runs for
            // every GPU node, and a copy of the free vector per node was half a plan's cost).
            let rest_fits = free.mem_mib >= req.mem_mib
                && req
                    .engines
                    .iter()
                    .all(|(k, n)| free.engines.get(k).copied().unwrap_or(0) >= *n)
                && hetsched_common::allocate_gpus(&free.gpus, &req.gpu).is_some();
            if !rest_fits {
                continue;
            }
            let short = req.cpu_milli - free.cpu_milli;
            let victims = borrowers(history, view, n, short, priority, taken);
            if let Some(victims) = victims {
                return Some(Preemption {
                    preemptor: task,
                    node: n.id,
                    victims,
                    take_back: true,
                });
            }
        }
        None
    }
}

/// The CPU tasks on `n` that borrow its reserve, newest first, whose CPUs cover `short`:
/// only those of a priority at most `priority`, not protected, and not `taken` already.
/// `None` when they cannot cover it (or none is needed).
fn borrowers(
    history: &ReserveHistory,
    view: &ClusterState,
    n: &Node,
    mut short: u64,
    priority: i64,
    taken: &BTreeSet<TaskId>,
) -> Option<Vec<TaskRef>> {
    // The CPU tasks there, newest first; what they hold beyond the CPU pool's share of the
    // node is borrowed.
    let mut cpu_tasks: Vec<(TaskId, &ResourceRequest, _)> = n
        .tasks
        .iter()
        .filter_map(|id| {
            let t = view.tasks().get(id)?;
            let r = view.job_resources(t.job)?;
            r.gpu.is_none().then_some((*id, r, t))
        })
        .collect();
    let held: u64 = cpu_tasks.iter().map(|c| c.1.cpu_milli).sum();
    let reserve = history.reserve_on(n.capacity.gpus.len(), n.capacity.cpu_milli);
    let mut borrowed = held.saturating_sub(n.capacity.cpu_milli.saturating_sub(reserve));
    cpu_tasks.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut victims = Vec::new();
    for (id, r, t) in cpu_tasks {
        if short == 0 || borrowed == 0 {
            break;
        }
        if taken.contains(&id) || t.priority > priority || t.protected {
            continue;
        }
        let Some(node) = t.status.node else { continue };
        victims.push(TaskRef {
            task: id,
            node,
            attempt: t.status.attempt,
        });
        short = short.saturating_sub(r.cpu_milli);
        borrowed = borrowed.saturating_sub(r.cpu_milli);
    }
    (short == 0 && !victims.is_empty()).then_some(victims)
}

/// The take-back stage as a link of the chain: [`TakeBackStage`] over what the step shows.
#[derive(Debug)]
pub(super) struct TakeBackLink;

impl Stage for TakeBackLink {
    fn name(&self) -> &'static str {
        "take-back"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let stage = TakeBackStage {
            index: step.index,
            reserved: step.reserved,
            cfg: step.preemption,
        };
        stage.decide(
            step.pools.active(),
            step.decided,
            step.view,
            step.head,
            &step.scope,
        )
    }
}

#[cfg(test)]
#[path = "take_back_stage_tests.rs"]
mod tests;
