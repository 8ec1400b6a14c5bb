//! The per-plan context: everything one plan carries from task to task, built at the start
//! of a plan and dropped at its end.
//!
//! Grouped by what each part is for (feasibility's partition and locality sets, the pools'
//! bookkeeping, what the plan decided so far, the stages' own per-plan state by type), so
//! that a stage borrows its own part mutably while it reads the others.

use super::feasibility_stage::{Feasibility, PartitionSets};
use super::pool_round::PoolRound;
use super::queue_stage::QueueStage;
use super::stage::{PendingTask, PlanState};
use crate::sched::index::PlacementIndex;
use crate::sched::loads::Loads;
use crate::sched::multiqueue::{Queued, ReserveHistory};
use crate::state::{Assign, ClusterState, Plan, Preemption};
use hetsched_common::{JobId, NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What one stage decided for one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Placed on a node, or queued in a slave's local queue (`queued`).
    Assign(Assign),
    /// S2: a batch job's whole gang, each task on its pinned slave (gang_stage.rs).
    Gang(Vec<Assign>),
    /// Room made on a node by stopping other tasks (S1 preemption or S3 take-back).
    Preempt(Preemption),
    /// Nothing for it this plan, nor for the rest of its job's tasks at its priority.
    Stuck,
    /// Nothing for it this plan (its chosen node could not be taken after all); the next
    /// task of its job is still tried.
    Skip,
    /// Issue 51: held by the dependency gate (`dependency_stage.rs`) whatever the resources:
    /// `dependency` or `throttle`, with what it waits for. `job`: the whole job is held
    /// (its other tasks are passed over this plan); else only this task (`after_each`).
    /// Never blocks a resource key: other jobs asking the same are still probed.
    Hold {
        /// The waiting reason and its detail.
        info: hetsched_common::protocol::WaitingInfo,
        /// Whether the hold covers every task of the job.
        job: bool,
    },
}

/// What the plan decided so far: the plan itself and what later stages must not reuse.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// The plan being built.
    pub plan: Plan,
    /// Victims a preemption of this plan chose already: no two preemptors share one.
    pub victims: BTreeSet<TaskId>,
    /// S0.3: queued assignments this plan made, per node.
    pub queued_now: BTreeMap<NodeId, u32>,
    /// A job's tasks at one priority ask for the same, and the index only shrinks within
    /// a plan: once one fits nowhere (and cannot preempt), the rest are skipped, so a queue
    /// where nothing fits costs one probe per job, not one per task.
    pub stuck: BTreeSet<(JobId, i64)>,
    /// S2: batch jobs whose gang this plan decided already.
    pub gangs: BTreeSet<JobId>,
}

impl Decided {
    /// Whether the plan may hold one more preemption (both preemption and take-back count).
    pub fn preempt_room(&self, max_per_plan: usize) -> bool {
        self.plan.preempt.len() < max_per_plan
    }

    /// Adds `decision` for `head` to the plan.
    pub fn record(&mut self, head: &PendingTask<'_>, decision: Decision) {
        match decision {
            Decision::Assign(a) => {
                if a.queued {
                    *self.queued_now.entry(a.node).or_insert(0) += 1;
                }
                self.plan.assignments.push(a);
            }
            Decision::Gang(all) => self.plan.assignments.extend(all),
            Decision::Preempt(p) => {
                self.victims.extend(p.victims.iter().map(|v| v.task));
                self.plan.preempt.push(p);
            }
            Decision::Stuck => {
                self.stuck.insert((head.t.job, head.t.priority));
            }
            Decision::Skip | Decision::Hold { job: false, .. } => {}
            Decision::Hold { job: true, .. } => {
                self.stuck.insert((head.t.job, head.t.priority));
            }
        }
    }
}

/// One plan's state, from the first task to the last.
#[derive(Debug)]
pub(super) struct PlanContext<'v> {
    /// The applied state the plan is for.
    pub view: &'v ClusterState,
    /// Leader time of the plan (tasks backing off until later are left queued).
    pub now_ms: u64,
    /// The queue stage's order; taken by the driver when it starts.
    pub order: Vec<Queued<'v>>,
    /// Feasibility: the nodes serving each partition, locality sets per job.
    pub feasibility: Feasibility,
    /// S3 pools: the loads, the reserve history and this plan's pool bookkeeping.
    pub pools: PoolRound,
    /// The stages' own per-plan state (engine use, say), by type.
    pub state: PlanState,
    /// What the plan decided so far.
    pub decided: Decided,
}

impl<'v> PlanContext<'v> {
    /// The context of a plan over `view` at `now_ms`: the queue stage's order, and the
    /// S3 `loads` (out of the scheduler for the plan) with the reserve `history`.
    #[cfg(test)]
    pub fn new(
        view: &'v ClusterState,
        now_ms: u64,
        queue: &QueueStage,
        loads: Option<Loads>,
        history: Option<ReserveHistory>,
    ) -> Self {
        let partitions = Arc::new(super::feasibility_stage::partition_candidates(view));
        Self::with(view, now_ms, queue, loads, history, partitions)
    }

    /// [`new`](Self::new) with the partition sets of `view` given (kept across plans).
    pub fn with(
        view: &'v ClusterState,
        now_ms: u64,
        queue: &QueueStage,
        loads: Option<Loads>,
        history: Option<ReserveHistory>,
        partitions: Arc<PartitionSets>,
    ) -> Self {
        let order = queue.order_refs(view, loads.as_ref());
        let pools = PoolRound::of_queued(loads, history, &order);
        Self {
            view,
            now_ms,
            order,
            feasibility: Feasibility::with(partitions),
            pools,
            state: PlanState::default(),
            decided: Decided::default(),
        }
    }

    /// Ends the plan: gives back to `index` what the pool stage hid, and returns the plan
    /// and the S3 loads (to go back into the scheduler).
    pub fn finish(self, index: &mut PlacementIndex) -> (Plan, Option<Loads>) {
        (self.decided.plan, self.pools.finish(index))
    }
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
