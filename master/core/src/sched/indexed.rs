//! `IndexedScheduler` — the master's default scheduler: a pipeline of pure stages.
//!
//! ```text
//! admission (at apply: S1 priority, sched::admission)
//!   → queue (S1 order: priority, then submission; sched::queue)
//!   → engine choice for program tasks (S0.1–2, sched::engine_choice: target kind, load
//!     bound, second-best kind when the target is scarce) — the nodes it ranks are tried
//!     in its order
//!   → feasibility (S4 index: resources, GPU model, partition as candidate nodes)
//!   → selection (S4 policy: least-fit, best-fit, ...)
//!   → when nothing fits: preemption (S1, sched::preemption)
//!   → when nothing can be preempted: the slave queue (S0.3, `--queue-depth`): the node
//!     with the shortest queue among those the task may use takes it as a queued
//!     assignment, beyond its free resources; idle slaves steal from long queues
//!     (S0.4, sched::steal)
//! ```
//!
//! Why a cache beside the replicated state rather than in it: the index is derived data
//! (rebuildable from the nodes' free vectors at any time), so it stays out of the log and
//! the state hash. The leader keeps it in step with every applied change through
//! [`Scheduler::nodes_changed`] and rebuilds it on [`Scheduler::reset`] (new leadership,
//! snapshot restore). Within one plan, decisions are taken out of the index tentatively;
//! once the plan is applied or refused, the touched nodes are re-read from the state.

use super::engine_choice::{self, EngineChoiceConfig, EngineLoad};
use super::index::{
    AnyPolicy, Candidates, FragPlacer, IndexConfig, PlacementIndex, PlacementQuery, PolicyKind,
};
use super::loads::Loads;
use super::multiqueue::{ordered_with, Ordering, QueueKind, ReserveHistory};
use super::pools::{separated_pool, within, PoolPlan};
use super::preemption::{plan_preemption, PreemptionConfig};
use super::Scheduler;
use crate::state::{partition_of, Assign, ClusterState, Plan, Preemption, TaskRef};
use hetsched_common::{JobId, NodeId, ResourceRequest, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// Pending tasks in queue order, each to the node the policy picks among those that fit.
///
/// Two policies: one for tasks that ask for GPUs, one (the CPU policy) for the rest. With
/// `frag` as the GPU policy, CPU-only tasks go to CPU-only nodes first (chosen by the CPU
/// policy), then to the GPU node where they fragment least (`index::frag`).
#[derive(Debug)]
pub struct IndexedScheduler {
    index: PlacementIndex,
    policy: AnyPolicy,
    kind: PolicyKind,
    cpu_policy: AnyPolicy,
    cpu_kind: PolicyKind,
    /// The `frag` placer (its workload mix and CPU-only node set), when `kind` is `frag`.
    frag: Option<FragPlacer>,
    /// The highest task id the workload mix has seen (ids grow with submission order).
    seen: TaskId,
    /// Most assignments per plan: bounds the size of one `ApplyPlan` entry.
    pub max_per_plan: usize,
    /// The preemption stage's limits.
    pub preemption: PreemptionConfig,
    /// Nodes holding a reservation for a preemptor (S1 × S4.5).
    reserved: BTreeSet<NodeId>,
    /// The queue stage's order (S1 submission, S3 DRF or the S3 pipeline).
    ordering: Ordering,
    /// S3 reserved CPU pools on GPU nodes, with borrowing and take-back; `None`: off.
    pools: Option<ReserveHistory>,
    /// The highest task id the reserve history has seen.
    pool_seen: TaskId,
    /// Users' holdings, capacity, GPU tasks' CPUs and GPU pools per node, kept in step like
    /// the index (`None` under plain submission order without pools: nothing reads them).
    loads: Option<Loads>,
    /// S0.1–2 engine choice for program tasks.
    engine_choice: EngineChoiceConfig,
    /// S0.3: most queued assignments per node (0: no slave queues).
    queue_depth: u32,
}

/// Feasibility by partition: the up nodes serving each partition, as a locality
/// constraint for the index; `None` where every up node serves it (no constraint).
fn partition_candidates(view: &ClusterState) -> BTreeMap<String, Option<Candidates>> {
    let up: Vec<&crate::state::Node> = view.nodes().values().filter(|n| n.takes_work()).collect();
    let mut names: BTreeSet<&str> = BTreeSet::from(["default"]);
    for n in &up {
        names.extend(n.partitions.iter().map(String::as_str));
    }
    names
        .into_iter()
        .map(|p| {
            let serving: Candidates = up.iter().filter(|n| n.serves(p)).map(|n| n.id).collect();
            let all = serving.len() == up.len();
            (p.to_string(), (!all).then_some(serving))
        })
        .collect()
}

impl IndexedScheduler {
    /// A scheduler with `policy` (seeded with `seed` where the policy is random) over an
    /// exact index (θ = 1). CPU-only tasks use the same policy, except under `frag`, whose
    /// CPU policy is `least-fit` (see [`with_cpu_policy`](Self::with_cpu_policy)).
    pub fn new(policy: PolicyKind, seed: u64) -> Self {
        let cpu_kind = match policy {
            PolicyKind::Frag => PolicyKind::LeastFit,
            k => k,
        };
        Self {
            index: PlacementIndex::new(IndexConfig::default()),
            policy: policy.build(seed),
            kind: policy,
            cpu_policy: cpu_kind.build(seed),
            cpu_kind,
            frag: (policy == PolicyKind::Frag).then(FragPlacer::default),
            seen: TaskId(0),
            max_per_plan: 4096,
            preemption: PreemptionConfig::default(),
            reserved: BTreeSet::new(),
            ordering: Ordering::Submission,
            pools: None,
            pool_seen: TaskId(0),
            loads: None,
            engine_choice: EngineChoiceConfig::default(),
            queue_depth: 0,
        }
    }

    /// The same with this queue order (S3 DRF or pipeline).
    pub fn with_ordering(mut self, ordering: Ordering) -> Self {
        self.ordering = ordering;
        if ordering != Ordering::Submission {
            self.loads.get_or_insert_with(Loads::default);
        }
        self
    }

    /// The same with the master's S3 settings: the queue order, and reserved CPU pools
    /// under `pipeline`.
    pub fn with_queueing(self, cfg: super::multiqueue::QueueingConfig) -> Self {
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
        self.engine_choice = cfg;
        self
    }

    /// The same with slave queues of `depth` tasks beyond free resources (S0.3; 0: off).
    pub fn with_queue_depth(mut self, depth: u32) -> Self {
        self.queue_depth = depth;
        self
    }

    /// S0.3: the node where `req` may wait in the local queue: one the task may use, that
    /// could run it at all, with room in its queue; the shortest queue first, ties to the
    /// lower id. Only tasks that ask no devices or engine counts queue (devices are granted
    /// at assignment). `among`: restrict to these nodes.
    fn queue_node(
        &self,
        view: &ClusterState,
        req: &ResourceRequest,
        allowed: &dyn Fn(NodeId) -> bool,
        queued_now: &BTreeMap<NodeId, u32>,
        among: Option<&[NodeId]>,
    ) -> Option<NodeId> {
        if self.queue_depth == 0 || !req.gpu.is_none() || !req.engines.is_empty() {
            return None;
        }
        let depth = self.queue_depth as usize;
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

    /// The S3 loads this scheduler keeps (`None`: not kept), for tests.
    pub fn loads(&self) -> Option<&Loads> {
        self.loads.as_ref()
    }

    /// CPU thousandths per GPU the reserved pools hold now (`None`: pools off).
    pub fn reserve_per_gpu_milli(&self) -> Option<u64> {
        self.pools.map(|p| p.per_gpu_milli())
    }

    /// Teaches the reserve history the tasks submitted since the last plan.
    fn observe_reserve(&mut self, view: &ClusterState) {
        let Some(pools) = &mut self.pools else { return };
        let from = TaskId(self.pool_seen.0.saturating_add(1));
        for (id, t) in view.tasks().range(from..) {
            if let Some(req) = view.job_resources(t.job) {
                pools.observe(req);
            }
            self.pool_seen = *id;
        }
    }

    /// S3 take-back: a GPU node where `req` fits once CPU tasks borrowing its reserved
    /// CPUs stop; those borrowers (newest first) as victims.
    fn take_back(
        &self,
        view: &ClusterState,
        task: TaskId,
        req: &ResourceRequest,
        allowed: Option<&Candidates>,
        taken: &BTreeSet<TaskId>,
    ) -> Option<Preemption> {
        let pools = self.pools.as_ref()?;
        let priority = view.tasks().get(&task)?.priority;
        for n in view.nodes().values() {
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
            let mut with_cpus = free.clone();
            with_cpus.cpu_milli = req.cpu_milli;
            if !with_cpus.fits(req) {
                continue;
            }
            // The CPU tasks there, newest first; what they hold beyond the CPU pool's
            // share of the node is borrowed.
            let mut cpu_tasks: Vec<(TaskId, &hetsched_common::ResourceRequest, _)> = n
                .tasks
                .iter()
                .filter_map(|id| {
                    let t = view.tasks().get(id)?;
                    let r = view.job_resources(t.job)?;
                    r.gpu.is_none().then_some((*id, r, t))
                })
                .collect();
            let held: u64 = cpu_tasks.iter().map(|c| c.1.cpu_milli).sum();
            let reserve = pools.reserve_on(n.capacity.gpus.len(), n.capacity.cpu_milli);
            let mut borrowed = held.saturating_sub(n.capacity.cpu_milli.saturating_sub(reserve));
            cpu_tasks.sort_by_key(|c| std::cmp::Reverse(c.0));
            let mut short = req.cpu_milli - free.cpu_milli;
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
            if short == 0 && !victims.is_empty() {
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

    /// Keeps one index reservation per preemptor waiting for its victims to stop, on the
    /// node it preempted: the resources the victims give back are seen by that preemptor
    /// alone, so lower-priority pending tasks (the victims themselves, typically) cannot
    /// take them first and set off another round of preemption.
    fn sync_reservations(&mut self, view: &ClusterState) {
        let desired: BTreeMap<NodeId, (TaskId, &hetsched_common::ResourceRequest)> = view
            .awaiting()
            .iter()
            .filter_map(|(task, (node, _))| {
                let t = view.tasks().get(task)?;
                if t.status.state != hetsched_common::TaskState::Pending {
                    return None;
                }
                Some((*node, (*task, view.job_resources(t.job)?)))
            })
            .collect();
        for node in std::mem::take(&mut self.reserved) {
            let holder = self.index.reservation(node).map(|r| r.task);
            match desired.get(&node) {
                Some((task, _)) if holder == Some(*task) => {
                    self.reserved.insert(node);
                }
                _ => {
                    self.index.unreserve(node);
                }
            }
        }
        for (node, (task, req)) in desired {
            if self.index.reserve(node, task, req).is_ok() {
                self.reserved.insert(node);
            }
        }
    }

    /// The same with these preemption limits.
    pub fn with_preemption(mut self, preemption: PreemptionConfig) -> Self {
        self.preemption = preemption;
        self
    }

    /// Uses `cpu` for tasks that ask no GPU (`frag` there means the same as for GPU tasks:
    /// CPU-only nodes first under the GPU policy's tie order, then the least fragmenting).
    pub fn with_cpu_policy(mut self, cpu: PolicyKind, seed: u64) -> Self {
        self.cpu_kind = cpu;
        self.cpu_policy = cpu.build(seed);
        if cpu == PolicyKind::Frag && self.frag.is_none() {
            self.frag = Some(FragPlacer::default());
        }
        self
    }

    /// The policy in use for GPU tasks.
    pub fn policy(&self) -> PolicyKind {
        self.kind
    }

    /// The policy in use for tasks that ask no GPU.
    pub fn cpu_policy(&self) -> PolicyKind {
        self.cpu_kind
    }

    /// Nodes in the index.
    pub fn indexed_nodes(&self) -> usize {
        self.index.len()
    }

    fn sync(&mut self, view: &ClusterState, node: NodeId) {
        match view.nodes().get(&node) {
            // Draining nodes leave the index: they take no new tasks.
            Some(n) if n.takes_work() => {
                self.index.upsert_node(node, &n.free);
                if let Some(f) = &mut self.frag {
                    f.note_node(node, Some(&n.free));
                }
            }
            _ => {
                self.index.remove_node(node);
                if let Some(f) = &mut self.frag {
                    f.note_node(node, None);
                }
            }
        }
    }

    /// Teaches the workload mix the tasks submitted since the last plan.
    fn observe_arrivals(&mut self, view: &ClusterState) {
        let Some(frag) = &mut self.frag else { return };
        let from = TaskId(self.seen.0.saturating_add(1));
        for (id, t) in view.tasks().range(from..) {
            if let Some(req) = view.job_resources(t.job) {
                frag.observe(req);
            }
            self.seen = *id;
        }
    }

    /// Selection: the node the policy for this kind of task picks among those that fit `q`.
    fn place(&mut self, q: &PlacementQuery<'_>, req: &ResourceRequest) -> Option<NodeId> {
        let gpu = !req.gpu.is_none();
        let kind = if gpu { self.kind } else { self.cpu_kind };
        match (&mut self.frag, kind) {
            (Some(frag), PolicyKind::Frag) => {
                let tie = if gpu {
                    &mut self.policy
                } else {
                    &mut self.cpu_policy
                };
                frag.place(&mut self.index, q, tie)
            }
            (Some(frag), _) if !gpu && self.kind == PolicyKind::Frag => {
                frag.place(&mut self.index, q, &mut self.cpu_policy)
            }
            _ if gpu => self.index.place(q, &mut self.policy),
            _ => self.index.place(q, &mut self.cpu_policy),
        }
    }
}

impl Scheduler for IndexedScheduler {
    fn plan(&mut self, view: &ClusterState) -> Plan {
        self.plan_at(view, view.last_ms())
    }

    fn plan_at(&mut self, view: &ClusterState, now_ms: u64) -> Plan {
        self.observe_arrivals(view);
        self.observe_reserve(view);
        let mut plan = Plan::default();
        self.sync_reservations(view);
        let partitions = partition_candidates(view);
        let empty = Candidates::default();
        // Locality sets (within the job's partition), built once per job per plan.
        let mut localities: BTreeMap<JobId, Candidates> = BTreeMap::new();
        let mut victims_taken: BTreeSet<TaskId> = BTreeSet::new();
        // A job's tasks at one priority ask for the same, and the index only shrinks within
        // a plan: once one fits nowhere (and cannot preempt), skip the rest, so a queue
        // where nothing fits costs one probe per job, not one per task.
        let mut stuck: BTreeSet<(JobId, i64)> = BTreeSet::new();
        // Derived S3 loads: out of `self` for the plan (the index and policies are borrowed
        // mutably below); put back before returning.
        let loads = self.loads.take();
        let order = match &loads {
            Some(l) => ordered_with(view, self.ordering, l.users(), &l.capacity()),
            None => ordered_with(view, self.ordering, &BTreeMap::new(), &Default::default()),
        };
        // S3 pools (reserve, CPU pool, GPU pools): who may use which capacity.
        let history = self.pools;
        let mut pool_plan = match (&loads, history) {
            (Some(_), Some(_)) => Some(PoolPlan::new(view, &order)),
            _ => None,
        };
        // S0.1–2: engine use per node, built at the first program task of the plan.
        let mut engine_load: Option<EngineLoad> = None;
        let mut relations: BTreeMap<JobId, Option<&[hetsched_common::program::EngineTotal]>> =
            BTreeMap::new();
        // S0.3: queued assignments this plan made, per node.
        let mut queued_now: BTreeMap<NodeId, u32> = BTreeMap::new();
        for task in order {
            if plan.assignments.len() >= self.max_per_plan || self.index.is_empty() {
                break;
            }
            let Some(t) = view.tasks().get(&task) else {
                continue;
            };
            if t.not_before_ms.is_some_and(|nb| nb > now_ms) {
                continue; // waiting out a retry backoff
            }
            if stuck.contains(&(t.job, t.priority)) {
                continue;
            }
            let Some(job) = view.jobs().get(&t.job) else {
                continue;
            };
            let req = &job.spec.resources;
            let queue = QueueKind::of(req);
            let is_gpu = queue.is_gpu();
            let pooled = match (&mut pool_plan, &loads, &history) {
                (Some(pp), Some(l), Some(h)) => {
                    pp.before(&mut self.index, l, h, queue);
                    Some((l, h))
                }
                _ => None,
            };
            let partition = partitions.get(partition_of(&job.spec));
            if !job.candidates.is_empty() && !localities.contains_key(&job.id) {
                let within: Candidates = job
                    .candidates
                    .iter()
                    .copied()
                    .filter(|n| match partition {
                        Some(Some(c)) => c.contains(*n),
                        Some(None) => true,
                        None => false,
                    })
                    .collect();
                localities.insert(job.id, within);
            }
            let locality = localities.get(&job.id);
            let allowed = match (locality, partition) {
                (Some(c), _) | (None, Some(Some(c))) => Some(c),
                (None, Some(None)) => None,
                // No up node serves the partition.
                (None, None) => Some(&empty),
            };
            let may_use = |n: NodeId| match (locality, partition) {
                (Some(c), _) | (None, Some(Some(c))) => c.contains(n),
                (None, Some(None)) => true,
                (None, None) => false,
            };
            let relation = *relations.entry(job.id).or_insert_with(|| {
                job.spec
                    .program
                    .as_ref()
                    .and_then(|p| view.relations().get(&p.kind()))
                    .map(Vec::as_slice)
                    .filter(|r| !r.is_empty())
            });
            if let Some(relation) = relation {
                let load = engine_load.get_or_insert_with(|| EngineLoad::of(view));
                if let Some(choice) =
                    engine_choice::choose(&self.engine_choice, relation, load, may_use)
                {
                    let mut placed = None;
                    if !choice.waiting {
                        for &(node, kind) in &choice.ranked {
                            // A node held for a waiting preemptor is not this task's to take.
                            let held = self.index.reservation(node).is_some_and(|r| r.task != task);
                            let fits = !held && self.index.free(node).is_some_and(|f| f.fits(req));
                            if fits && self.index.take(node, req).is_some() {
                                placed = Some((node, kind, false));
                                break;
                            }
                        }
                    }
                    if placed.is_none() {
                        if let Some(&(_, kind)) = choice.ranked.first() {
                            load.wait(kind);
                        }
                        // Wait on a target engine: in the least loaded target slave's queue.
                        let targets: Vec<NodeId> = choice.ranked.iter().map(|r| r.0).collect();
                        let (_, second) =
                            engine_choice::targets(relation, self.engine_choice.efficiency_bound);
                        if !choice.overflow || second.is_none() {
                            if let Some(node) =
                                self.queue_node(view, req, &may_use, &queued_now, Some(&targets))
                            {
                                let kind = choice
                                    .ranked
                                    .iter()
                                    .find(|r| r.0 == node)
                                    .map(|r| r.1)
                                    .unwrap_or(hetsched_common::EngineKind::Cpu);
                                *queued_now.entry(node).or_insert(0) += 1;
                                placed = Some((node, kind, true));
                            }
                        }
                    }
                    match placed {
                        Some((node, kind, queued)) => {
                            load.add(node, kind);
                            plan.assignments.push(Assign {
                                task,
                                node,
                                queued,
                                engine: Some(kind),
                                borrowed: false,
                            });
                        }
                        None => {
                            stuck.insert((t.job, t.priority));
                        }
                    }
                    continue;
                }
            }
            let (placed, lent) = match (&pool_plan, pooled) {
                // S3 pools decide where a GPU task may go (its GPU pool, then the other's).
                (Some(pp), Some((l, h))) if is_gpu => {
                    let mut select = |q: &PlacementQuery<'_>| self.place(q, req);
                    match pp.place_gpu(l, h, task, req, queue, allowed, &mut select) {
                        Some((node, lent)) => (Some(node), lent),
                        None => (None, false),
                    }
                }
                _ => {
                    let mut q = PlacementQuery::new(req).for_task(task);
                    if let Some(c) = allowed {
                        q = q.with_candidates(c);
                    }
                    (self.place(&q, req), false)
                }
            };
            if let Some(node) = placed {
                // Tentative: later tasks of this plan see the node without what this took.
                if self.index.take(node, req).is_some() {
                    let borrowed = match (&mut pool_plan, pooled) {
                        (Some(pp), Some((l, h))) => {
                            pp.placed(&self.index, l, h, node, req, queue, lent)
                        }
                        _ => false,
                    };
                    plan.assignments.push(Assign {
                        task,
                        node,
                        queued: false,
                        engine: None,
                        borrowed,
                    });
                }
                continue;
            }
            if is_gpu
                && pooled.is_some()
                && !view.awaiting().contains_key(&task)
                && plan.preempt.len() < self.preemption.max_per_plan
            {
                // Take-back within its own GPU pool (where it has first claim).
                let own = pooled.and_then(|(l, _)| {
                    separated_pool(l, queue).map(|own| within(l.pool_nodes(own), allowed))
                });
                let here = own.as_deref().or(allowed);
                if let Some(p) = self.take_back(view, task, req, here, &victims_taken) {
                    victims_taken.extend(p.victims.iter().map(|v| v.task));
                    plan.preempt.push(p);
                    continue;
                }
            }
            let p = (plan.preempt.len() < self.preemption.max_per_plan)
                .then(|| plan_preemption(view, task, locality, &victims_taken, &self.preemption))
                .flatten();
            match p {
                Some(p) => {
                    victims_taken.extend(p.victims.iter().map(|v| v.task));
                    plan.preempt.push(p);
                }
                None => match self.queue_node(view, req, &may_use, &queued_now, None) {
                    Some(node) => {
                        *queued_now.entry(node).or_insert(0) += 1;
                        plan.assignments.push(Assign {
                            task,
                            node,
                            queued: true,
                            engine: None,
                            borrowed: false,
                        });
                    }
                    None => {
                        stuck.insert((t.job, t.priority));
                    }
                },
            }
        }
        if let Some(pp) = &mut pool_plan {
            pp.unhide(&mut self.index);
        }
        self.loads = loads;
        plan.queue_depth = self.queue_depth;
        plan
    }

    fn nodes_changed(&mut self, view: &ClusterState, nodes: &[NodeId]) {
        for n in nodes {
            self.sync(view, *n);
            if let Some(l) = &mut self.loads {
                l.sync(view, *n);
            }
        }
    }

    fn reset(&mut self, view: &ClusterState) {
        // Rebuilding drops every reservation; the next plan restores them.
        self.reserved.clear();
        if let Some(l) = &mut self.loads {
            l.rebuild(view);
        }
        self.index.rebuild(
            view.nodes()
                .values()
                .filter(|n| n.takes_work())
                .map(|n| (n.id, n.free.clone())),
        );
        if let Some(f) = &mut self.frag {
            f.clear();
            for n in view.nodes().values() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::test_log::Log;
    use crate::state::{Command, Outcome};
    use hetsched_common::{JobSpec, NodeResources, ResourceRequest};

    fn register(cpus: u64, key: u64) -> Command {
        Command::RegisterNode {
            key,
            node: None,
            name: String::new(),
            addr: String::new(),
            capacity: NodeResources {
                cpu_milli: cpus * 1000,
                mem_mib: 1000,
                ..Default::default()
            },
            labels: Default::default(),
            partitions: Vec::new(),
        }
    }

    fn job(count: u32, cpu_milli: u64) -> Command {
        Command::SubmitJob {
            spec: JobSpec {
                name: String::new(),
                user: String::new(),
                partition: String::new(),
                resources: ResourceRequest {
                    cpu_milli,
                    mem_mib: 10,
                    ..Default::default()
                },
                count,
                command: vec!["true".into()],
                ..Default::default()
            },
        }
    }

    #[test]
    fn least_fit_spreads_and_the_index_follows_applied_changes() {
        let mut sched = IndexedScheduler::new(PolicyKind::LeastFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(&mut sched, register(4, 1));
        l.apply(&mut sched, register(2, 2));
        assert_eq!(sched.indexed_nodes(), 2);
        l.apply(&mut sched, job(3, 1000));
        let plan = sched.plan(&l.s);
        // Most free first: node 1 (4 cores), then 1 again (3 left vs 2), then a tie at 2
        // cores each broken by the lower id... least-fit picks the most available.
        let nodes: Vec<u64> = plan.assignments.iter().map(|a| a.node.0).collect();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0], 1);
        let applied = l.apply(&mut sched, Command::ApplyPlan(plan));
        assert!(matches!(applied, Outcome::PlanApplied { rejected: 0, .. }));
        // The index now holds exactly the state's free vectors.
        let fresh = {
            let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 0);
            s.reset(&l.s);
            s
        };
        assert_eq!(
            format!("{:?}", sched.index.free(NodeId(1))),
            format!("{:?}", fresh.index.free(NodeId(1)))
        );
        assert_eq!(
            format!("{:?}", sched.index.free(NodeId(2))),
            format!("{:?}", fresh.index.free(NodeId(2)))
        );
        // A node going down leaves the index; nothing is placed on it.
        l.apply(&mut sched, Command::NodeDown { node: NodeId(1) });
        assert_eq!(sched.indexed_nodes(), 1);
        let plan = sched.plan(&l.s);
        assert!(plan.assignments.iter().all(|a| a.node == NodeId(2)));
    }

    #[test]
    fn frag_keeps_cpu_tasks_off_gpu_nodes_and_packs_shared_gpus() {
        use hetsched_common::{GpuDevice, GpuRequest};
        let mut sched = IndexedScheduler::new(PolicyKind::Frag, 0);
        assert_eq!(sched.cpu_policy(), PolicyKind::LeastFit);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(&mut sched, register(4, 1));
        let gpu_node = |key| Command::RegisterNode {
            key,
            node: None,
            name: String::new(),
            addr: String::new(),
            capacity: NodeResources {
                cpu_milli: 16_000,
                mem_mib: 1000,
                gpus: (0..2)
                    .map(|_| GpuDevice {
                        model: "T4".into(),
                        free_milli: 1000,
                        emulated: true,
                    })
                    .collect(),
                ..Default::default()
            },
            labels: Default::default(),
            partitions: Vec::new(),
        };
        l.apply(&mut sched, gpu_node(2));
        l.apply(&mut sched, gpu_node(3));
        // A CPU task: least-fit alone would take a 16-core GPU node; frag sends it to the
        // CPU-only node.
        l.apply(&mut sched, job(1, 2000));
        let plan = sched.plan(&l.s);
        assert_eq!(plan.assignments.len(), 1);
        assert_eq!(plan.assignments[0].node, NodeId(1));
        l.apply(&mut sched, Command::ApplyPlan(plan));
        // Two half-GPU tasks share one device of one node rather than break two.
        let mut half = job(2, 1000);
        if let Command::SubmitJob { spec } = &mut half {
            spec.resources.gpu = GpuRequest::fraction(500);
        }
        l.apply(&mut sched, half);
        let plan = sched.plan(&l.s);
        assert_eq!(plan.assignments.len(), 2);
        assert_eq!(plan.assignments[0].node, plan.assignments[1].node);
        l.apply(&mut sched, Command::ApplyPlan(plan));
        let used: Vec<u32> =
            l.s.nodes()
                .values()
                .flat_map(|n| n.free.gpus.iter().map(|g| g.free_milli))
                .collect();
        assert_eq!(used.iter().filter(|f| **f == 1000).count(), 3, "{used:?}");
    }

    #[test]
    fn plans_never_overcommit_and_match_first_fit_capacity() {
        let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        for k in 1..=3 {
            l.apply(&mut sched, register(2, k));
        }
        l.apply(&mut sched, job(10, 1000));
        let plan = sched.plan(&l.s);
        assert_eq!(plan.assignments.len(), 6, "3 nodes × 2 cores");
        match l.apply(&mut sched, Command::ApplyPlan(plan)) {
            Outcome::PlanApplied {
                accepted, rejected, ..
            } => {
                assert_eq!(accepted.len(), 6);
                assert_eq!(rejected, 0);
            }
            o => panic!("{o:?}"),
        }
        assert!(sched.plan(&l.s).is_empty());
    }

    #[test]
    fn a_job_that_does_not_fit_is_skipped_whole_and_later_jobs_still_place() {
        let mut sched = IndexedScheduler::new(PolicyKind::FirstFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(&mut sched, register(2, 1));
        l.apply(&mut sched, job(1, 1000));
        l.apply(&mut sched, job(500, 8000)); // never fits: 8 cores on a 2-core node
        l.apply(&mut sched, job(3, 1000));
        let plan = sched.plan(&l.s);
        let tasks: Vec<u64> = plan.assignments.iter().map(|a| a.task.0).collect();
        // Task 1 (job 1), then job 2's 500 tasks are skipped as one, then job 3's first.
        assert_eq!(tasks, vec![1, 502]);
    }
}
