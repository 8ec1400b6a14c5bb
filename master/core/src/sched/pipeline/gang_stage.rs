//! GangStage — S2 batch jobs (docs/DESIGN.md §S2, "In the cluster"; docs/CONTRACT.md,
//! "Batch jobs"): the pending tasks of a batch job are placed together, each on the slave
//! the leader's plan pinned it to, or none is. So no task of a batch job starts before all
//! of its tasks hold their cores, which is the planner's model (a job's cores start together).
//!
//! It runs first in the chain for a batch task and always decides it: the other stages
//! never see one (no policy choice, no engine choice, no slave queue, so a gang is never
//! stolen). A gang that does not fit waits whole (`gang` is its waiting reason); what it
//! tentatively took from the index is given back. Apply re-checks the same rule
//! (`state::batch_gang`).

use super::context::Decision;
use super::stage::{PendingTask, Stage, Step};
use crate::sched::index::PlacementIndex;
use crate::state::{partition_of, Assign, ClusterState};
use hetsched_common::{GpuAlloc, JobId, NodeId, TaskState};
use std::collections::BTreeSet;

/// The gang stage (no configuration: batch jobs are always gangs).
#[derive(Debug)]
pub(super) struct GangStage;

impl GangStage {
    /// `None` for a task that is not of a batch job; else the whole gang placed
    /// ([`Decision::Gang`]) or skipped. `seen` holds the batch jobs this plan decided
    /// already (their other tasks are skipped).
    pub fn decide(
        index: &mut PlacementIndex,
        view: &ClusterState,
        now_ms: u64,
        seen: &mut BTreeSet<JobId>,
        head: &PendingTask<'_>,
    ) -> Option<Decision> {
        let job = head.t.job;
        if !view.is_gang(job) {
            return None;
        }
        if !seen.insert(job) {
            return Some(Decision::Skip);
        }
        let mut gang = Vec::new();
        for tid in &head.job.tasks {
            let Some(t) = view.task(*tid) else { continue };
            if t.status.state != TaskState::Pending {
                continue;
            }
            if t.not_before_ms.is_some_and(|nb| nb > now_ms) {
                return Some(Decision::Skip); // one member backs off: the gang waits
            }
            let pin = view.batch_task(*tid).map(|b| b.node)?;
            gang.push((*tid, pin));
        }
        let mut taken: Vec<(NodeId, GpuAlloc)> = Vec::with_capacity(gang.len());
        let partition = partition_of(&head.job.spec);
        for (_, node) in &gang {
            let up = view
                .node(*node)
                .filter(|n| n.takes_work() && n.serves(partition));
            match up.and_then(|_| index.take(*node, head.req)) {
                Some(alloc) => taken.push((*node, alloc)),
                None => {
                    for (n, alloc) in taken {
                        if let Some(cap) = view.node(n).map(|x| &x.capacity) {
                            index.give_back(n, head.req, &alloc, cap);
                        }
                    }
                    return Some(Decision::Skip);
                }
            }
        }
        Some(Decision::Gang(
            gang.into_iter().map(|(t, n)| Assign::to(t, n)).collect(),
        ))
    }
}

impl Stage for GangStage {
    fn name(&self) -> &'static str {
        "gang"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let gangs = &mut step.decided.gangs;
        Self::decide(step.index, step.view, step.now_ms, gangs, step.head)
    }
}

#[cfg(test)]
#[path = "gang_stage_tests.rs"]
mod tests;
