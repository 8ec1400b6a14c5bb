//! The one interface every stage of the chain implements, and what a stage sees of the task
//! it considers and of the plan so far.
//!
//! A stage is a type in a `*_stage.rs` file of its own that imports nothing from another
//! stage: what several stages read (the task, where it may go, the pools' round, what the
//! plan decided) is defined here, in `context.rs` and in `pool_round.rs`. The list of
//! stages is assembled in one place (`chain.rs`); a new stage is one file and one line
//! there.
//!
//! Ready for parallel selection (S4.7): stages are `Send`, see the index through the
//! [`Step`] (a copy would do), and keep what they need for one plan in the plan context
//! ([`PlanState`]), not in themselves.

use super::context::{Decided, Decision};
use super::pool_round::PoolRound;
use crate::sched::index::{Candidates, PlacementIndex};
use crate::sched::multiqueue::QueueKind;
use crate::sched::preemption::PreemptionConfig;
use crate::state::{ClusterState, Job, Task};
use hetsched_common::{NodeId, NodeResources, ResourceRequest, TaskId};
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, BTreeSet};

/// One link of the chain.
pub(super) trait Stage: Send + std::fmt::Debug {
    /// Its name, for tests and for the module docs' diagram.
    fn name(&self) -> &'static str;

    /// Decides for `step.head` (placed, queued, preempts, stuck, skipped), or hands it to
    /// the next stage (`None`); a filter may change what the next stages see and decide
    /// nothing.
    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision>;

    /// At the start of every plan, with the state it is for (before any task).
    fn begin_plan(&mut self, _view: &ClusterState) {}

    /// A node's free resources changed (`None`: it takes no work any more).
    fn node_changed(&mut self, _node: NodeId, _free: Option<&NodeResources>) {}

    /// The scheduler rebuilds its caches from `view` (new leadership, snapshot).
    fn rebuild(&mut self, _view: &ClusterState) {}
}

/// What a stage sees while it considers one task.
#[derive(Debug)]
pub(super) struct Step<'s, 'v> {
    /// The task.
    pub head: &'s PendingTask<'v>,
    /// The applied state the plan is for.
    pub view: &'v ClusterState,
    /// Leader time of the plan.
    pub now_ms: u64,
    /// The placement index as this plan left it so far (decisions are taken out of it).
    pub index: &'s mut PlacementIndex,
    /// The nodes the task's partition and locality permit (the feasibility filter's answer,
    /// read by every stage after it).
    pub scope: Scope<'s>,
    /// The S3 pools' part of the plan.
    pub pools: &'s mut PoolRound,
    /// What the plan decided so far.
    pub decided: &'s mut Decided,
    /// The stages' own per-plan state.
    pub state: &'s mut PlanState,
    /// Nodes held for a waiting preemptor (S1 × S4.5).
    pub reserved: &'s BTreeSet<NodeId>,
    /// The preemption limits (shared by take-back and preemption).
    pub preemption: &'s PreemptionConfig,
    /// Most queued assignments per slave (S0.3; 0: no slave queues).
    pub queue_depth: u32,
}

/// Each stage's state for one plan, by type: a stage keeps here what it builds during a
/// plan (the engine use, say), so that the stage itself holds only its configuration and
/// what it learns across plans. Dropped with the plan.
#[derive(Debug, Default)]
pub(super) struct PlanState {
    parts: BTreeMap<TypeId, Box<dyn Any + Send>>,
}

impl PlanState {
    /// The part of type `T`, made with its default on first use in this plan.
    pub fn part<T: Any + Send + Default>(&mut self) -> &mut T {
        let part = self
            .parts
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        match part.downcast_mut::<T>() {
            Some(t) => t,
            // The entry under T's id holds a T: it was made just above or on an earlier call.
            None => unreachable!("a plan state part under another type's id"),
        }
    }
}

/// A task the queue stage let through, with what the later stages read of it.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingTask<'v> {
    /// Its id.
    pub task: TaskId,
    /// The task.
    pub t: &'v Task,
    /// Its job.
    pub job: &'v Job,
    /// What each of the job's tasks asks.
    pub req: &'v ResourceRequest,
    /// The S3 queue it belongs to (CPU, single-GPU or multi-GPU).
    pub queue: QueueKind,
}

impl PendingTask<'_> {
    /// Whether it asks for GPUs.
    pub fn is_gpu(&self) -> bool {
        self.queue.is_gpu()
    }
}

/// Where one job's tasks may go (built by `feasibility_stage::Feasibility`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Scope<'a> {
    /// The job's locality within its partition (`None`: the job names no nodes).
    locality: Option<&'a Candidates>,
    /// Its partition's nodes: `None` when no up node serves it, `Some(None)` when every
    /// up node does.
    partition: Option<&'a Option<Candidates>>,
    empty: &'a Candidates,
}

impl<'a> Scope<'a> {
    /// A scope from a job's locality set, its partition's nodes and an empty set (what
    /// [`allowed`](Self::allowed) answers when no up node serves the partition).
    pub fn new(
        locality: Option<&'a Candidates>,
        partition: Option<&'a Option<Candidates>>,
        empty: &'a Candidates,
    ) -> Self {
        Self {
            locality,
            partition,
            empty,
        }
    }

    /// The job's locality set (`None`: it names no nodes); preemption applies the
    /// partition itself.
    pub fn locality(&self) -> Option<&'a Candidates> {
        self.locality
    }

    /// The candidate constraint for the index (`None`: any node taking work).
    pub fn allowed(&self) -> Option<&'a Candidates> {
        match (self.locality, self.partition) {
            (Some(c), _) | (None, Some(Some(c))) => Some(c),
            (None, Some(None)) => None,
            // No up node serves the partition.
            (None, None) => Some(self.empty),
        }
    }

    /// Whether the job's tasks may use `node`.
    pub fn may_use(&self, node: NodeId) -> bool {
        match (self.locality, self.partition) {
            (Some(c), _) | (None, Some(Some(c))) => c.contains(node),
            (None, Some(None)) => true,
            (None, None) => false,
        }
    }
}

/// The node where `req` may wait in a slave's local queue (S0.3): one the task may use
/// (`allowed`), that could run it at all, with room in its queue of `depth` (counting
/// `queued_now`, this plan's queued assignments); the shortest queue first, ties to the
/// lower id. Only tasks that ask no devices or engine counts queue (devices are granted at
/// assignment). `among`: restrict to these nodes. Here rather than in the slave-queue stage
/// because engine choice queues program tasks on their target engines' slaves too.
pub(super) fn queue_node(
    depth: u32,
    view: &ClusterState,
    req: &ResourceRequest,
    allowed: &dyn Fn(NodeId) -> bool,
    queued_now: &BTreeMap<NodeId, u32>,
    among: Option<&[NodeId]>,
) -> Option<NodeId> {
    if depth == 0 || !req.gpu.is_none() || !req.engines.is_empty() {
        return None;
    }
    let depth = depth as usize;
    let len = |n: &crate::state::Node| {
        n.queued.len() + queued_now.get(&n.id).copied().unwrap_or(0) as usize
    };
    view.nodes()
        .values()
        .filter(|n| among.is_none_or(|a| a.contains(&n.id)))
        .filter(|n| n.takes_work() && allowed(n.id) && n.capacity.fits(req) && len(n) < depth)
        .min_by_key(|n| (len(n), n.id))
        .map(|n| n.id)
}
