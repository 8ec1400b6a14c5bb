//! `IndexedScheduler` — the master's default scheduler: a chain of pure stages, driven once
//! per plan over one [`PlanContext`](context::PlanContext).
//!
//! ```text
//! admission (at apply: S1 priority, sched::admission)
//! plan start: the workload mix and reserve history learn the new arrivals (caches.rs),
//!             waiting preemptors' reservations are kept (reservations.rs), and the
//!             PlanContext is built: the queue order, partitions, pools, engine use
//! per task, in queue order, the first stage that decides wins:
//!   → QueueStage         S1/S3 order; skips tasks backing off and jobs stuck this plan
//!   → feasibility        the nodes its partition and locality permit (the index's
//!                        candidate constraint; resources, GPU model are the index's part),
//!                        computed once and read by every stage below (`Step::scope`)
//!   ── the chain (chain.rs), one `Stage` each ──
//!   → DependencyGate     issue 51: held until its dependencies are met, its singleton
//!                        slot is free and its job is under `max_running`
//!   → GangStage          S2 batch jobs: the whole gang on its pinned slaves, or it waits
//!   → PoolBorrowStage    S3: hides GPU nodes' unused reserves from CPU tasks while GPU
//!                        tasks wait
//!   → EngineChoiceStage  S0.1–2, program tasks: a ranked engine, or wait/queue on a target
//!   → SelectionStage     S4 policy (least-fit, best-fit, frag, ...) among the nodes that
//!                        fit; S3 pools decide where a GPU task may go
//!   → TakeBackStage      S3: a GPU task stops CPU tasks borrowing its pool's reserve
//!   → PreemptionStage    S1: stop lower-priority work (sched::preemption)
//!   → SlaveQueueStage    S0.3 (`--queue-depth`): wait in the shortest slave queue; idle
//!                        slaves steal from long queues (S0.4, sched::steal)
//!   → nothing decided: the job is stuck at this priority for the rest of the plan
//! ```
//!
//! Each stage is a type in a file of its own (`*_stage.rs`), with its tests beside it
//! (`*_stage_tests.rs`), implementing the one interface of `stage.rs` and importing no
//! other stage; the list is assembled in `chain.rs` only (as Nomad's `GenericStack` lists
//! its iterators), and the scheduler's `decide` runs one task through it.
//!
//! Why a cache beside the replicated state rather than in it: the index is derived data
//! (rebuildable from the nodes' free vectors at any time), so it stays out of the log and
//! the state hash. The leader keeps it in step with every applied change through
//! [`Scheduler::nodes_changed`] and rebuilds it on [`Scheduler::reset`] (new leadership,
//! snapshot restore). Within one plan, decisions are taken out of the index tentatively;
//! once the plan is applied or refused, the touched nodes are re-read from the state.

mod blocked;
mod books;
mod borrow_stage;
mod caches;
mod chain;
mod context;
mod dependency_stage;
mod engine_stage;
mod feasibility_stage;
mod gang_stage;
mod parallel;
mod pool_round;
mod preemption_stage;
mod queue_stage;
mod quiet;
mod reservations;
mod selection_stage;
mod slave_queue_stage;
mod stage;
mod take_back_stage;
mod why;

pub use parallel::ParallelConfig;
pub use why::WaitBoard;

#[cfg(test)]
mod tests;

use super::engine_choice::EngineChoiceConfig;
use super::index::{IndexConfig, PlacementIndex, PolicyKind};
use super::loads::Loads;
use super::multiqueue::{Ordering, Queued, QueueingConfig, ReserveHistory};
use super::preemption::PreemptionConfig;
use super::Scheduler;
use crate::state::{ClusterState, Plan};
use books::{Books, PlanBooks};
use chain::{Chain, ChainConfig};
use context::{Decision, PlanContext};
use feasibility_stage::PartitionCache;
use hetsched_common::{NodeId, TaskId};
use queue_stage::QueueStage;
use stage::{PendingTask, Step};
use std::collections::BTreeSet;

/// Pending tasks in queue order, each to the node the policy picks among those that fit.
///
/// Two policies: one for tasks that ask for GPUs, one (the CPU policy) for the rest. With
/// `frag` as the GPU policy, CPU-only tasks go to CPU-only nodes first (chosen by the CPU
/// policy), then to the GPU node where they fragment least (`index::frag`).
#[derive(Debug)]
pub struct IndexedScheduler {
    index: PlacementIndex,
    /// The queue stage (S1 submission, S3 DRF or the S3 pipeline order).
    queue: QueueStage,
    /// What the chain is built from (policies, engine bounds, queue depth).
    cfg: ChainConfig,
    /// The stages after the queue stage, in order (`chain.rs`).
    chain: Chain,
    /// Most assignments per plan: bounds the size of one `ApplyPlan` entry.
    pub max_per_plan: usize,
    /// The preemption stage's limits.
    pub preemption: PreemptionConfig,
    /// Nodes holding a reservation for a preemptor (S1 × S4.5).
    reserved: BTreeSet<NodeId>,
    /// S3 reserved CPU pools on GPU nodes, with borrowing and take-back; `None`: off.
    pools: Option<ReserveHistory>,
    /// The highest task id the reserve history has seen.
    pool_seen: TaskId,
    /// Users' holdings, capacity, GPU tasks' CPUs and GPU pools per node, kept in step like
    /// the index (`None` under plain submission order without pools: nothing reads them).
    loads: Option<Loads>,
    /// Blocked tasks, waiting reasons and quiet plans, kept around the chain (`books.rs`).
    books: Books,
    /// The feasibility stage's partition sets, kept across plans.
    partitions: PartitionCache,
    /// S4.7 parallel selection: the groups' views of the index (`parallel.rs`).
    groups: parallel::Groups,
}

impl IndexedScheduler {
    /// A scheduler with `policy` (seeded with `seed` where the policy is random) over an
    /// exact index (θ = 1). CPU-only tasks use the same policy, except under `frag`, whose
    /// CPU policy is `least-fit` (see [`with_cpu_policy`](Self::with_cpu_policy)).
    pub fn new(policy: PolicyKind, seed: u64) -> Self {
        let cfg = ChainConfig {
            policy,
            seed,
            cpu_policy: None,
            engine: EngineChoiceConfig::default(),
            queue_depth: 0,
        };
        Self {
            index: PlacementIndex::new(IndexConfig::default()),
            queue: QueueStage {
                ordering: Ordering::Submission,
            },
            cfg,
            chain: Chain::standard(&cfg),
            max_per_plan: 4096,
            preemption: PreemptionConfig::default(),
            reserved: BTreeSet::new(),
            pools: None,
            pool_seen: TaskId(0),
            loads: None,
            books: Books::default(),
            partitions: PartitionCache::default(),
            groups: parallel::Groups::default(),
        }
    }

    /// The same with S4.7 parallel selection: `cfg.groups` groups (part of the plan's
    /// input; 1: off) computed on `cfg.threads` threads (`parallel.rs`).
    pub fn with_parallel(mut self, cfg: ParallelConfig) -> Self {
        self.groups = parallel::Groups::new(ParallelConfig {
            groups: cfg.groups.max(1),
            threads: cfg.threads.max(1),
        });
        self
    }

    /// The S4.7 groups and threads in use.
    pub fn parallel(&self) -> ParallelConfig {
        self.groups.cfg
    }

    /// S4.7: proposals the groups made and those the chain took (the rest lost a conflict
    /// or went to another stage), since the start.
    pub fn proposals(&self) -> (u64, u64) {
        (self.groups.proposed, self.groups.taken)
    }

    /// The same with this queue order (S3 DRF or pipeline).
    pub fn with_ordering(mut self, ordering: Ordering) -> Self {
        self.queue.ordering = ordering;
        if ordering != Ordering::Submission {
            self.loads.get_or_insert_with(Loads::default);
        }
        self
    }

    /// The same with the master's S3 settings: the queue order, and reserved CPU pools
    /// under `pipeline`.
    pub fn with_queueing(self, cfg: QueueingConfig) -> Self {
        let s = self.with_ordering(cfg.ordering);
        if cfg.ordering == Ordering::Pipeline {
            s.with_reserved_pools(ReserveHistory::new(cfg.reserve_start_milli_per_gpu))
        } else {
            s
        }
    }

    /// The same with S3 reserved CPU pools on GPU nodes, sized from `history`.
    pub fn with_reserved_pools(mut self, history: ReserveHistory) -> Self {
        self.pools = Some(history);
        self.loads.get_or_insert_with(Loads::default);
        self
    }

    /// The same with these engine-choice bounds (S0.1–2).
    pub fn with_engine_choice(mut self, cfg: EngineChoiceConfig) -> Self {
        self.cfg.engine = cfg;
        self.chain = Chain::standard(&self.cfg);
        self
    }

    /// The same with slave queues of `depth` tasks beyond free resources (S0.3; 0: off).
    pub fn with_queue_depth(mut self, depth: u32) -> Self {
        self.cfg.queue_depth = depth;
        self.chain = Chain::standard(&self.cfg);
        self
    }

    /// The same with these preemption limits.
    pub fn with_preemption(mut self, preemption: PreemptionConfig) -> Self {
        self.preemption = preemption;
        self
    }

    /// Uses `cpu` for tasks that ask no GPU (`frag` there means the same as for GPU tasks:
    /// CPU-only nodes first under the GPU policy's tie order, then the least fragmenting).
    pub fn with_cpu_policy(mut self, cpu: PolicyKind, seed: u64) -> Self {
        self.cfg.cpu_policy = Some((cpu, seed));
        self.chain = Chain::standard(&self.cfg);
        self
    }

    /// The S3 loads this scheduler keeps (`None`: not kept), for tests.
    pub fn loads(&self) -> Option<&Loads> {
        self.loads.as_ref()
    }

    /// What single- and multi-GPU tasks asked so far (`None`: pools off).
    pub fn pool_demand(&self) -> Option<crate::sched::pool_split::PoolDemand> {
        self.pools.map(|p| *p.demand())
    }

    /// CPU thousandths per GPU the reserved pools hold now (`None`: pools off).
    pub fn reserve_per_gpu_milli(&self) -> Option<u64> {
        self.pools.map(|p| p.per_gpu_milli())
    }

    /// The policy in use for GPU tasks.
    pub fn policy(&self) -> PolicyKind {
        self.cfg.policy
    }

    /// The policy in use for tasks that ask no GPU.
    pub fn cpu_policy(&self) -> PolicyKind {
        self.cfg.cpu_kind()
    }

    /// Keys blocked until a change, and tasks probed through the stages so far.
    pub fn blocked(&self) -> (usize, u64) {
        (self.books.blocked.len(), self.books.blocked.probes())
    }

    /// Plans skipped because nothing changed since a plan that found every task blocked.
    pub fn plans_skipped(&self) -> u64 {
        self.books.skipped()
    }

    /// The stages of the chain after the queue stage, in the order they run (`chain.rs`).
    pub fn stages(&self) -> Vec<&'static str> {
        self.chain.names()
    }

    /// Issue 51, a deliberate bug (chaos): the chain without the dependency gate when
    /// `on` is false, the standard chain again when true.
    fn gate(&mut self, on: bool) {
        self.chain = match on {
            true => Chain::standard(&self.cfg),
            false => Chain::standard(&self.cfg).without("dependency"),
        };
    }

    /// The same without the stage named `name` (a chain without an optional stage).
    #[cfg(test)]
    fn without_stage(mut self, name: &str) -> Self {
        self.chain = Chain::standard(&self.cfg).without(name);
        self
    }

    /// Nodes in the index.
    pub fn indexed_nodes(&self) -> usize {
        self.index.len()
    }

    /// The context of a plan over `view` at `now_ms` (the S3 loads go into it for the plan).
    fn context<'v>(&mut self, view: &'v ClusterState, now_ms: u64) -> PlanContext<'v> {
        let partitions = self.partitions.sets(view);
        let loads = self.loads.take();
        let ctx = PlanContext::with(view, now_ms, &self.queue, loads, self.pools, partitions);
        self.books.blocked.check_terms(|t| ctx.pools.terms_into(t));
        ctx
    }

    /// Ends the plan that reached `order[..reached]`: the books settle, the index gets back
    /// what the pools hid, the loads come back.
    fn finish_plan(
        &mut self,
        view: &ClusterState,
        ctx: PlanContext<'_>,
        order: &[Queued<'_>],
        reached: usize,
        pb: &PlanBooks,
    ) -> Plan {
        let no_nodes = self.index.is_empty();
        let whole = reached == order.len() && !no_nodes;
        let tasks = order.iter().map(|q| q.task).collect();
        self.books.finish(pb, view, tasks, reached, no_nodes);
        let (mut plan, loads) = ctx.finish(&mut self.index);
        self.loads = loads;
        self.note_victims(view, &plan);
        plan.queue_depth = self.cfg.queue_depth;
        self.books.after(pb, view, whole, plan.is_empty());
        plan
    }

    /// S4.7: the parallel groups' proposals for the tasks that may reach selection (see
    /// `parallel.rs` for which), put where the selection stage reads them.
    fn propose(&mut self, ctx: &mut PlanContext<'_>) {
        if !self.groups.on() {
            return;
        }
        let (view, now_ms) = (ctx.view, ctx.now_ms);
        let none = BTreeSet::new();
        let pools = self.pools.is_some();
        let heads: Vec<PendingTask<'_>> = ctx
            .order
            .iter()
            .filter_map(|q| QueueStage::admit_queued(now_ms, &none, *q))
            .filter(|h| h.job.spec.program.is_none() && !view.is_gang(h.job.id))
            .filter(|h| !(pools && h.is_gpu()))
            .filter(|h| !self.books.is_blocked(h))
            .take(self.max_per_plan)
            .collect();
        for h in &heads {
            ctx.feasibility.scope(h.job);
        }
        let feasibility = &ctx.feasibility;
        let work: Vec<parallel::Work<'_>> = heads
            .iter()
            .map(|h| parallel::Work {
                head: *h,
                allowed: feasibility.scope_built(h.job).allowed(),
            })
            .collect();
        let cfg = self.cfg;
        let selection = |g: u64| Chain::selection(&cfg, g);
        let config = *self.index.config();
        *ctx.state.part::<parallel::Proposals>() =
            self.groups.propose(view, config, &selection, &work);
    }

    /// S4.7: the groups' views built afresh from `view` (with the index, on rebuild).
    fn build_views(&mut self, view: &ClusterState) {
        self.groups.clear();
        let cfg = self.cfg;
        let selection = |g: u64| Chain::selection(&cfg, g);
        let config = *self.index.config();
        self.groups.build(view, config, &selection);
    }

    /// One task through the chain after the queue stage: each stage either decides (the
    /// task is placed, queued, preempts or is stuck) or hands it to the next.
    fn decide<'v>(&mut self, ctx: &mut PlanContext<'v>, head: &PendingTask<'v>) -> Decision {
        let mut step = Step {
            head,
            view: ctx.view,
            now_ms: ctx.now_ms,
            index: &mut self.index,
            scope: ctx.feasibility.scope(head.job),
            pools: &mut ctx.pools,
            decided: &mut ctx.decided,
            state: &mut ctx.state,
            reserved: &self.reserved,
            preemption: &self.preemption,
            queue_depth: self.cfg.queue_depth,
        };
        self.chain.decide(&mut step)
    }
}

impl Scheduler for IndexedScheduler {
    fn plan(&mut self, view: &ClusterState) -> Plan {
        self.plan_at(view, view.last_ms())
    }

    fn plan_at(&mut self, view: &ClusterState, now_ms: u64) -> Plan {
        self.refresh(view);
        if self.books.quiet_holds(view, now_ms) {
            let queue_depth = self.cfg.queue_depth;
            return Plan {
                queue_depth,
                ..Plan::default()
            };
        }
        let mut ctx = self.context(view, now_ms);
        self.propose(&mut ctx);
        let across = self.cfg.queue_depth == 0; // see blocked.rs
        let factors = ctx.pools.fair_share().cloned().unwrap_or_default();
        let mut pb = self
            .books
            .begin(self.queue.ordering, self.pools.is_some(), factors, across);
        let order = std::mem::take(&mut ctx.order);
        let mut reached = order.len();
        for (pos, &queued) in order.iter().enumerate() {
            if ctx.decided.plan.assignments.len() >= self.max_per_plan || self.index.is_empty() {
                reached = pos;
                break;
            }
            let stuck = &ctx.decided.stuck;
            let Some((head, key)) = self.books.admit(&mut pb, now_ms, stuck, queued) else {
                continue;
            };
            let room = ctx.decided.preempt_room(self.preemption.max_per_plan);
            let decision = self.decide(&mut ctx, &head);
            self.books
                .decided(&mut pb, view, &head, &decision, key, room);
            if let Decision::Preempt(p) = &decision {
                // Stopping a batch task stops its whole gang (S2): its mates are gone too,
                // so no later preemption of this plan may count on them as victims.
                ctx.decided.victims.extend(gang_mates(view, &p.victims));
            }
            ctx.decided.record(&head, decision);
        }
        let proposals = ctx.state.part::<parallel::Proposals>();
        self.groups.count(proposals, &ctx.decided.plan.assignments);
        self.finish_plan(view, ctx, &order, reached, &pb)
    }

    fn nodes_changed(&mut self, view: &ClusterState, nodes: &[NodeId]) {
        for n in nodes {
            if let Some(node) = view.nodes().get(n).filter(|n| n.takes_work()) {
                if blocked::grew(self.index.free(*n), &node.free) {
                    self.books.blocked.changed();
                }
            }
            self.sync(view, *n);
            self.partitions.node_changed(view, *n);
            self.groups.node_changed(*n);
            if let Some(l) = &mut self.loads {
                l.sync(view, *n);
            }
        }
    }

    fn reset(&mut self, view: &ClusterState) {
        self.rebuild(view);
    }

    fn waiting(&self) -> Option<(std::sync::Arc<super::waiting::WaitBoard>, u64)> {
        Some(self.books.reasons.board())
    }

    fn set_dependency_gate(&mut self, on: bool) {
        self.gate(on);
    }

    fn set_fair_share(&mut self, factors: std::collections::BTreeMap<String, f64>) {
        if let Some(l) = self.loads.as_mut() {
            l.set_fair_share(factors);
        }
    }
}

/// Every task of the batch jobs (gangs) among `victims`' jobs.
fn gang_mates(view: &ClusterState, victims: &[crate::state::TaskRef]) -> Vec<TaskId> {
    let jobs: BTreeSet<_> = victims
        .iter()
        .filter_map(|v| view.tasks().get(&v.task).map(|t| t.job))
        .filter(|j| view.is_gang(*j))
        .collect();
    jobs.iter()
        .filter_map(|j| view.jobs().get(j))
        .flat_map(|j| j.tasks.iter().copied())
        .collect()
}

#[cfg(test)]
#[path = "blocked_tests.rs"]
mod blocked_tests;
