//! SelectionStage — S4 (docs/DESIGN.md, S4.3): the node the placement policy picks among
//! those the index finds fit for the task, taken from the index at once.
//!
//! Two policies: one for GPU tasks, one for tasks that ask no GPU; under `frag` the
//! `index::frag` placer ranks the fit set by the fragmentation a placement adds (and sends
//! CPU tasks to CPU-only nodes first). With S3 pools on, a GPU task is offered its own GPU
//! pool first ([`PoolPlan::place_gpu`](crate::sched::pools::PoolPlan::place_gpu)).
//!
//! It comes after engine choice (a program task with a known relation is placed by engine
//! rank, not by policy) and before take-back and preemption: a task that fits somewhere
//! as things stand never stops other work. The take is tentative: later tasks of the plan
//! see the node without what this one took.

use super::context::Decision;
use super::parallel::Proposals;
use super::pool_round::Pools;
use super::stage::{PendingTask, Scope, Stage, Step};
use crate::sched::index::{AnyPolicy, FragPlacer, PlacementIndex, PlacementQuery, PolicyKind};
use crate::state::{Assign, ClusterState};
use hetsched_common::{NodeId, NodeResources, ResourceRequest, TaskId};

/// The selection stage: the policies and the `frag` placer.
#[derive(Debug)]
pub(crate) struct SelectionStage {
    policy: AnyPolicy,
    kind: PolicyKind,
    cpu_policy: AnyPolicy,
    cpu_kind: PolicyKind,
    /// The `frag` placer (its workload mix and CPU-only node set), when a policy is `frag`.
    frag: Option<FragPlacer>,
    /// The highest task id the workload mix has seen (ids grow with submission order).
    seen: TaskId,
}

impl SelectionStage {
    /// `policy` for GPU tasks (seeded with `seed` where random); the same for CPU tasks,
    /// except under `frag`, whose CPU policy is `least-fit`.
    pub fn new(policy: PolicyKind, seed: u64) -> Self {
        let cpu_kind = Self::default_cpu_kind(policy);
        Self {
            policy: policy.build(seed),
            kind: policy,
            cpu_policy: cpu_kind.build(seed),
            cpu_kind,
            frag: policy.uses_frag().then(FragPlacer::default),
            seen: TaskId(0),
        }
    }

    /// The policy of tasks that ask no GPU when none is set: `policy`, but `least-fit`
    /// under `frag` and `auto` (CPU-only nodes first, then the least fragmenting GPU node).
    pub fn default_cpu_kind(policy: PolicyKind) -> PolicyKind {
        match policy {
            PolicyKind::Frag | PolicyKind::Auto => PolicyKind::LeastFit,
            k => k,
        }
    }

    /// Uses `cpu` for tasks that ask no GPU.
    pub fn set_cpu_policy(&mut self, cpu: PolicyKind, seed: u64) {
        self.cpu_kind = cpu;
        self.cpu_policy = cpu.build(seed);
        if cpu.uses_frag() && self.frag.is_none() {
            self.frag = Some(FragPlacer::default());
        }
    }

    /// The policy for tasks that ask no GPU.
    #[cfg(test)]
    pub fn cpu_kind(&self) -> PolicyKind {
        self.cpu_kind
    }

    /// The node the policy for this kind of task picks among those that fit `q`. Under
    /// `auto` a GPU task goes by best-fit while the workload mix says `frag` loses there
    /// ([`FragPlacer::auto_picks_best_fit`]), else by `frag`.
    pub fn place(
        &mut self,
        index: &mut PlacementIndex,
        q: &PlacementQuery<'_>,
        req: &ResourceRequest,
    ) -> Option<NodeId> {
        let gpu = !req.gpu.is_none();
        let mut kind = if gpu { self.kind } else { self.cpu_kind };
        if kind == PolicyKind::Auto {
            let best_fit = self.frag.as_ref().is_some_and(|f| f.auto_picks_best_fit());
            kind = if gpu && best_fit {
                PolicyKind::BestFit
            } else {
                PolicyKind::Frag
            };
        }
        match (&mut self.frag, kind) {
            (Some(frag), PolicyKind::Frag) => {
                let tie = if gpu {
                    &mut self.policy
                } else {
                    &mut self.cpu_policy
                };
                frag.place(index, q, tie)
            }
            (Some(frag), _) if !gpu && self.kind.uses_frag() => {
                frag.place(index, q, &mut self.cpu_policy)
            }
            _ if gpu => index.place(q, &mut self.policy),
            _ => index.place(q, &mut self.cpu_policy),
        }
    }

    /// The task placed on the node selection picks within its `scope` (and, with `pools`
    /// on, its GPU pool), taken from `index`; `None` when no node fits it now.
    #[cfg(test)]
    pub fn decide(
        &mut self,
        index: &mut PlacementIndex,
        pools: Option<Pools<'_>>,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
    ) -> Option<Decision> {
        self.decide_with(index, pools, head, scope, None)
    }

    /// [`decide`](Self::decide) with a parallel group's proposal (S4.7, `parallel.rs`):
    /// taken when the node is one the task may use, holds no reservation and still has
    /// room for it in `index` as the plan left it so far (an earlier task in queue order
    /// keeps the room); else the task is selected over the whole index as with one group.
    /// GPU tasks under S3 pools never carry a proposal (the pools decide where they go).
    pub fn decide_with(
        &mut self,
        index: &mut PlacementIndex,
        mut pools: Option<Pools<'_>>,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
        proposal: Option<NodeId>,
    ) -> Option<Decision> {
        let (task, req, queue) = (head.task, head.req, head.queue);
        let allowed = scope.allowed();
        let proposed = proposal.filter(|&n| {
            !(pools.is_some() && head.is_gpu())
                && scope.may_use(n)
                && index.reservation(n).is_none()
                && index.free(n).is_some_and(|f| f.fits(req))
                && index.take(n, req).is_some()
        });
        let (node, lent) = match &pools {
            _ if proposed.is_some() => (proposed?, false),
            // S3 pools decide where a GPU task may go (its GPU pool, then the other's).
            Some(p) if head.is_gpu() => {
                let mut select =
                    |ix: &mut PlacementIndex, q: &PlacementQuery<'_>| self.place(ix, q, req);
                p.plan.place_gpu(
                    p.loads,
                    p.history,
                    task,
                    req,
                    queue,
                    allowed,
                    index,
                    &mut select,
                )?
            }
            _ => {
                let mut q = PlacementQuery::new(req).for_task(task);
                if let Some(c) = allowed {
                    q = q.with_candidates(c);
                }
                (self.place(index, &q, req)?, false)
            }
        };
        // Tentative: later tasks of this plan see the node without what this took (a
        // proposal was taken already).
        if proposed.is_none() && index.take(node, req).is_none() {
            return Some(Decision::Skip);
        }
        let borrowed = match &mut pools {
            Some(p) => p
                .plan
                .placed(index, p.loads, p.history, node, req, queue, lent),
            None => false,
        };
        Some(Decision::Assign(Assign {
            task,
            node,
            queued: false,
            engine: None,
            borrowed,
        }))
    }

    /// Teaches the workload mix (under `frag`) the tasks submitted since the last plan.
    pub fn observe_arrivals(&mut self, view: &ClusterState) {
        let Some(frag) = &mut self.frag else { return };
        let from = TaskId(self.seen.0.saturating_add(1));
        for (id, t) in view.tasks().range(from..) {
            if let Some(req) = view.job_resources(t.job) {
                frag.observe(req);
            }
            self.seen = *id;
        }
    }

    /// A node's free resources changed (`None`: it takes no work now).
    pub fn note_node(&mut self, node: NodeId, free: Option<&NodeResources>) {
        if let Some(f) = &mut self.frag {
            f.note_node(node, free);
        }
    }

    /// Rebuilds the `frag` placer from `view`: its nodes, and the mix relearnt from the
    /// most recent submissions.
    pub fn rebuild(&mut self, view: &ClusterState) {
        self.rebuild_where(view, &|_| true);
    }

    /// [`rebuild`](Self::rebuild) knowing only the nodes `keep` accepts (a parallel
    /// group's partition, `parallel.rs`).
    pub fn rebuild_where(&mut self, view: &ClusterState, keep: &dyn Fn(NodeId) -> bool) {
        let Some(f) = &mut self.frag else { return };
        f.clear();
        for n in view.nodes().values().filter(|n| keep(n.id)) {
            f.note_node(n.id, n.takes_work().then_some(&n.free));
        }
        // Relearn the mix from the most recent submissions.
        self.seen = TaskId(0);
        let recent: Vec<TaskId> = view
            .tasks()
            .keys()
            .rev()
            .take(FragPlacer::WINDOW_ON_RESET)
            .copied()
            .collect();
        for id in recent.into_iter().rev() {
            if let Some(req) = view
                .tasks()
                .get(&id)
                .and_then(|t| view.job_resources(t.job))
            {
                f.observe(req);
            }
            self.seen = id;
        }
    }
}

impl Stage for SelectionStage {
    fn name(&self) -> &'static str {
        "selection"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let proposal = step
            .state
            .part::<Proposals>()
            .0
            .get(&step.head.task)
            .copied();
        self.decide_with(
            step.index,
            step.pools.active(),
            step.head,
            &step.scope,
            proposal,
        )
    }

    fn begin_plan(&mut self, view: &ClusterState) {
        self.observe_arrivals(view);
    }

    fn node_changed(&mut self, node: NodeId, free: Option<&NodeResources>) {
        self.note_node(node, free);
    }

    fn rebuild(&mut self, view: &ClusterState) {
        SelectionStage::rebuild(self, view);
    }
}

#[cfg(test)]
#[path = "selection_stage_tests.rs"]
mod tests;
