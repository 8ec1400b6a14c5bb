//! S3 — the pools' bookkeeping during one plan (docs/DESIGN.md §S3.3, §S3.4): who may use
//! which capacity.
//!
//! - **Reserved CPU pool.** On each GPU node, [`ReserveHistory::reserve_on`] CPUs are kept
//!   for GPU tasks. While a GPU task waits, CPU tasks do not see the part of it GPU tasks
//!   do not use yet (it is hidden from the index); with the GPU queues empty they may
//!   borrow it (taken back later by the pipeline's take-back stage).
//! - **GPU tasks borrowing CPU-pool CPUs.** A GPU task uses its node's unused reserve;
//!   while CPU tasks wait it goes only where that covers its CPUs, and with the CPU queue
//!   empty it may take the node's other CPUs (the CPU pool) too. (With the reserve sized
//!   from the highest CPUs per GPU seen, this is rare: the reserve covers any mix of GPU
//!   tasks seen unless it is capped at the node's CPUs.)
//! - **GPU pools.** `gpu-single` tasks go to single-pool nodes, `gpu-multi` tasks to
//!   multi-pool nodes (the split follows demand, `sched::pool_split`). A pool's idle GPUs
//!   are lent per plan: a task no node of its own pool fits may take a node of the other
//!   pool where nothing waiting in that pool's queue fits now (all of them when that queue
//!   is empty). Lent GPUs come back when their borrower ends, as in the seed.
//! - The reserve is hidden from CPU tasks only on GPU nodes whose free GPUs a waiting GPU
//!   task could use: on a node whose GPUs are taken, reserved CPUs serve no GPU task.
//!
//! A placement on any of these borrowed capacities is marked `borrowed` in its `Assign`.
//! Pure: the plan's order, the index and [`Loads`] in, decisions out.

use super::index::{Candidates, PlacementIndex, PlacementQuery};
use super::loads::Loads;
use super::multiqueue::{QueueKind, ReserveHistory};
use crate::state::ClusterState;
use hetsched_common::protocol::GpuPool;
use hetsched_common::{allocate_gpus, NodeId, NodeResources, ResourceRequest, TaskId};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The GPU pool a queue's tasks belong to (`None`: the CPU queue).
pub fn pool_of_queue(q: QueueKind) -> Option<GpuPool> {
    match q {
        QueueKind::GpuSingle => Some(GpuPool::Single),
        QueueKind::GpuMulti => Some(GpuPool::Multi),
        QueueKind::Cpu => None,
    }
}

/// The GPU pool a task of queue `q` is kept to first, when the cluster has both pools
/// (with one, or none, there is nothing to separate: `None`).
pub fn separated_pool(loads: &Loads, q: QueueKind) -> Option<GpuPool> {
    pool_of_queue(q)
        .filter(|p| !loads.pool_nodes(*p).is_empty() && !loads.pool_nodes(p.other()).is_empty())
}

/// The queue whose tasks a pool serves first.
pub fn queue_of_pool(p: GpuPool) -> QueueKind {
    match p {
        GpuPool::Single => QueueKind::GpuSingle,
        GpuPool::Multi => QueueKind::GpuMulti,
    }
}

/// `pool`'s nodes within `allowed` (`None`: no other constraint).
pub fn within<'a>(pool: &'a Candidates, allowed: Option<&Candidates>) -> Cow<'a, Candidates> {
    match allowed {
        None => Cow::Borrowed(pool),
        Some(a) => Cow::Owned(
            pool.as_slice()
                .iter()
                .copied()
                .filter(|n| a.contains(*n))
                .collect(),
        ),
    }
}

/// The pool stage's bookkeeping during one plan.
#[derive(Debug)]
pub struct PoolPlan {
    /// Tasks of each queue not placed yet in this plan (indexed by `QueueKind as usize`).
    waiting: [usize; 3],
    /// The distinct requests waiting in each GPU queue at the plan's start (indexed like
    /// `waiting`), smallest GPU ask first: what a pool's idle GPUs are kept for.
    shapes: [Vec<ResourceRequest>; 3],
    /// CPU thousandths GPU tasks took per node in this plan (tentatively).
    planned_gpu_cpu: BTreeMap<NodeId, u64>,
    /// Whether GPU nodes' unused reserves are hidden from the index (from CPU tasks, while
    /// a GPU task waits), and what was taken out.
    hiding: bool,
    hidden: Vec<(NodeId, u64)>,
    /// GPU nodes where CPU tasks borrow the reserve, once asked for in this plan.
    borrowed_on: Option<Vec<NodeId>>,
}

impl PoolPlan {
    /// Counts the tasks of `order` per queue.
    pub fn new(view: &ClusterState, order: &[TaskId]) -> Self {
        Self::of_requests(
            order
                .iter()
                .filter_map(|t| view.tasks().get(t).and_then(|t| view.job_resources(t.job))),
        )
    }

    /// Counts the waiting tasks' requests (`reqs`, in queue order) per queue.
    pub fn of_requests<'r>(reqs: impl Iterator<Item = &'r ResourceRequest>) -> Self {
        let mut waiting = [0; 3];
        // Distinct shapes, compared without building one per task (a plan sees every
        // waiting task here; most share a few shapes).
        type Shape<'r> = (u64, u64, u32, u32, &'r [String]);
        let mut distinct: [BTreeMap<Shape<'r>, &ResourceRequest>; 3] = Default::default();
        for req in reqs {
            let q = QueueKind::of(req);
            waiting[q as usize] += 1;
            if !req.gpu.is_none() {
                let g = &req.gpu;
                let shape = (req.cpu_milli, req.mem_mib, g.count, g.milli, &g.models[..]);
                distinct[q as usize].entry(shape).or_insert(req);
            }
        }
        let shapes = distinct.map(|d| {
            let mut v: Vec<ResourceRequest> = d.into_values().cloned().collect();
            v.sort_by_key(|r| (r.gpu.total_milli(), r.gpu.count));
            v
        });
        Self {
            waiting,
            shapes,
            planned_gpu_cpu: BTreeMap::new(),
            hiding: false,
            hidden: Vec::new(),
            borrowed_on: None,
        }
    }

    /// What lending and the hidden reserve depend on, at the plan's start: which queues
    /// are empty and the distinct requests waiting in the GPU queues (the blocked set is
    /// probed again when these change), appended to `out`.
    pub fn terms_into(&self, out: &mut Vec<u64>) {
        out.extend(self.waiting.iter().map(|w| (*w == 0) as u64));
        for shapes in &self.shapes {
            out.push(u64::MAX);
            for r in shapes {
                out.extend([
                    r.cpu_milli,
                    r.mem_mib,
                    r.gpu.count as u64,
                    r.gpu.milli as u64,
                ]);
                for m in &r.gpu.models {
                    out.extend(m.bytes().map(u64::from));
                    out.push(u64::MAX - 1);
                }
            }
        }
    }

    /// Tasks of `q` still waiting in this plan.
    pub fn waiting(&self, q: QueueKind) -> usize {
        self.waiting[q as usize]
    }

    fn gpu_waiting(&self) -> usize {
        self.waiting(QueueKind::GpuSingle) + self.waiting(QueueKind::GpuMulti)
    }

    /// Whether a GPU task waiting at the plan's start could use `free`'s GPUs (CPU and
    /// memory aside).
    fn gpus_wanted(&self, free: &NodeResources) -> bool {
        if free.gpus.iter().all(|d| d.free_milli == 0) {
            return false;
        }
        [QueueKind::GpuSingle, QueueKind::GpuMulti]
            .iter()
            .flat_map(|q| &self.shapes[*q as usize])
            .any(|r| allocate_gpus(&free.gpus, &r.gpu).is_some())
    }

    /// Whether something waiting in queue `q` at the plan's start fits `free` now.
    fn wanted_by(&self, q: QueueKind, free: &NodeResources) -> bool {
        self.shapes[q as usize].iter().any(|r| free.fits(r))
    }

    /// The reserved CPUs of `node` GPU tasks do not use (this plan's placements included).
    pub fn outstanding(&self, loads: &Loads, history: &ReserveHistory, node: NodeId) -> u64 {
        let Some((gpus, cpu_milli)) = loads.gpu_node(node) else {
            return 0;
        };
        history
            .reserve_on(gpus, cpu_milli)
            .saturating_sub(loads.gpu_task_cpu_milli(node))
            .saturating_sub(self.planned_gpu_cpu.get(&node).copied().unwrap_or(0))
    }

    /// Before placing a task of queue `q`: hide from the index what it may not use now
    /// (a CPU task, while a GPU task waits: the GPU nodes' unused reserves).
    pub fn before(
        &mut self,
        index: &mut PlacementIndex,
        loads: &Loads,
        history: &ReserveHistory,
        q: QueueKind,
    ) {
        let want = !q.is_gpu() && self.gpu_waiting() > 0;
        if want == self.hiding {
            return;
        }
        self.unhide(index);
        if !want {
            return;
        }
        self.hiding = true;
        for (node, _, _) in loads.gpu_nodes() {
            let Some(free) = index.free(node) else {
                continue;
            };
            if !self.gpus_wanted(free) {
                continue; // its GPUs serve no waiting GPU task now: nor does its reserve
            }
            let take = self.outstanding(loads, history, node).min(free.cpu_milli);
            if take == 0 {
                continue;
            }
            let mut less = free.clone();
            less.cpu_milli -= take;
            index.upsert_node(node, &less);
            self.hidden.push((node, take));
        }
    }

    /// Where a GPU task of queue `q` asking `req` goes, within `allowed`: its own pool's
    /// nodes, then (no node of its pool fitting it) the other pool's nodes that nothing
    /// waiting in that pool's queue fits now (lent for this plan); on a node whose unused
    /// reserve covers its CPUs unless the CPU queue is empty.
    /// `place` is the selection stage. Returns the node and whether it is the other pool's.
    #[allow(clippy::too_many_arguments)]
    pub fn place_gpu(
        &self,
        loads: &Loads,
        history: &ReserveHistory,
        task: TaskId,
        req: &ResourceRequest,
        q: QueueKind,
        allowed: Option<&Candidates>,
        index: &mut PlacementIndex,
        place: &mut dyn FnMut(&mut PlacementIndex, &PlacementQuery<'_>) -> Option<NodeId>,
    ) -> Option<(NodeId, bool)> {
        let Some(own) = separated_pool(loads, q) else {
            return self
                .place_within(loads, history, task, req, allowed, index, place)
                .map(|n| (n, false));
        };
        let mine = within(loads.pool_nodes(own), allowed);
        if let Some(n) = self.place_within(loads, history, task, req, Some(&mine), index, place) {
            return Some((n, false));
        }
        // The other pool lends the nodes its own queue has nothing for now.
        let owner = queue_of_pool(own.other());
        let theirs = within(loads.pool_nodes(own.other()), allowed);
        let lent: Cow<'_, Candidates> = if self.waiting(owner) == 0 {
            theirs
        } else {
            // Only nodes this task fits can be chosen: those are checked against the owner's
            // waiting requests, not every node of the pool (a blocked GPU task's probe
            // walked them all, each against every waiting request).
            Cow::Owned(
                theirs
                    .as_slice()
                    .iter()
                    .copied()
                    .filter(|n| {
                        index
                            .free(*n)
                            .is_some_and(|f| f.fits(req) && !self.wanted_by(owner, f))
                    })
                    .collect(),
            )
        };
        if lent.is_empty() {
            return None;
        }
        self.place_within(loads, history, task, req, Some(&lent), index, place)
            .map(|n| (n, true))
    }

    #[allow(clippy::too_many_arguments)]
    fn place_within(
        &self,
        loads: &Loads,
        history: &ReserveHistory,
        task: TaskId,
        req: &ResourceRequest,
        nodes: Option<&Candidates>,
        index: &mut PlacementIndex,
        place: &mut dyn FnMut(&mut PlacementIndex, &PlacementQuery<'_>) -> Option<NodeId>,
    ) -> Option<NodeId> {
        let mut query = PlacementQuery::new(req).for_task(task);
        if let Some(c) = nodes {
            query = query.with_candidates(c);
        }
        let node = place(index, &query)?;
        if self.waiting(QueueKind::Cpu) == 0
            || self.outstanding(loads, history, node) >= req.cpu_milli
        {
            return Some(node);
        }
        // It would borrow CPU-pool CPUs while CPU tasks wait: only nodes whose unused
        // reserve covers it.
        let covered: Candidates = loads
            .gpu_nodes()
            .map(|(n, _, _)| n)
            .filter(|n| nodes.is_none_or(|c| c.contains(*n)))
            .filter(|n| self.outstanding(loads, history, *n) >= req.cpu_milli)
            .collect();
        place(
            index,
            &PlacementQuery::new(req)
                .for_task(task)
                .with_candidates(&covered),
        )
    }

    /// GPU nodes (ascending) where CPU tasks ask more CPUs than the node keeps outside its
    /// reserve, i.e. borrow part of it: the only nodes a take-back can free. Found once per
    /// plan (the loads and the reserve change only between plans), so a plan's take-back
    /// probes, one per distinct blocked GPU request, do not each walk every node.
    pub fn borrowed_on(&mut self, loads: &Loads, history: &ReserveHistory) -> &[NodeId] {
        self.borrowed_on.get_or_insert_with(|| {
            loads
                .gpu_nodes()
                .filter(|(n, gpus, cpu)| {
                    let own = cpu.saturating_sub(history.reserve_on(*gpus, *cpu));
                    loads.cpu_task_req_milli(*n) > own
                })
                .map(|(n, _, _)| n)
                .collect()
        })
    }

    /// Gives back to the index what is hidden (at the end of the plan, and between kinds).
    pub fn unhide(&mut self, index: &mut PlacementIndex) {
        for (node, amount) in std::mem::take(&mut self.hidden) {
            if let Some(free) = index.free(node) {
                let mut more = free.clone();
                more.cpu_milli = more.cpu_milli.saturating_add(amount);
                index.upsert_node(node, &more);
            }
        }
        self.hiding = false;
    }

    /// A task of queue `q` asking `req` was placed on `node` (already taken from `index`);
    /// `lent`: on the other GPU pool. Returns whether it runs on borrowed capacity.
    #[allow(clippy::too_many_arguments)]
    pub fn placed(
        &mut self,
        index: &PlacementIndex,
        loads: &Loads,
        history: &ReserveHistory,
        node: NodeId,
        req: &ResourceRequest,
        q: QueueKind,
        lent: bool,
    ) -> bool {
        let outstanding = self.outstanding(loads, history, node);
        self.waiting[q as usize] = self.waiting[q as usize].saturating_sub(1);
        if q.is_gpu() {
            *self.planned_gpu_cpu.entry(node).or_default() += req.cpu_milli;
            // Beyond the node's unused reserve, its CPUs are the CPU pool's.
            lent || req.cpu_milli > outstanding
        } else {
            // Free after it is below the unused reserve: it holds part of the reserve.
            !self.hiding && index.free(node).is_some_and(|f| f.cpu_milli < outstanding)
        }
    }
}
