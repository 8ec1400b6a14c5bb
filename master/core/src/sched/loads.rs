//! S3 — what the DRF and pool stages need of the cluster, kept incrementally.
//!
//! The queue stage orders users by dominant share (what each user's tasks hold over the
//! capacity of the nodes taking work), and the pool stage needs, per GPU node, the CPUs its
//! GPU tasks hold and its GPU pool. Recomputing these from every node's tasks at every plan
//! made `drf` and `pipeline` an order of magnitude slower than `fifo` in the simulator
//! (BENCHMARKS.md). Like the placement index, [`Loads`] is derived data the scheduler keeps
//! in step through `nodes_changed` (each touched node's contribution is taken out and
//! re-read) and rebuilds on `reset`. Pure: no I/O, no clock.

use super::index::Candidates;
use super::multiqueue::DrfUsage;
use super::pool_split::PoolDemand;
use crate::state::{ClusterState, Node};
use hetsched_common::protocol::GpuPool;
use hetsched_common::NodeId;
use std::collections::BTreeMap;

/// One node's contribution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NodeLoad {
    /// What each user's tasks there hold.
    users: Vec<(String, DrfUsage)>,
    /// CPU thousandths held by GPU tasks there (they use the node's reserved pool first).
    gpu_task_cpu_milli: u64,
    /// CPU thousandths the CPU tasks there ask (their requests: what a take-back counts).
    cpu_task_req_milli: u64,
    /// Its capacity, counted while it takes work.
    capacity: DrfUsage,
    /// Whether it has GPUs and takes work (a member of one GPU pool).
    gpu: bool,
    /// The pool its slave announced (`None`: split by demand, `pool_split`).
    announced: Option<GpuPool>,
    /// GPUs and CPU thousandths (for the reserve's size), while it takes work.
    gpus: usize,
    cpu_milli: u64,
}

impl NodeLoad {
    fn of(view: &ClusterState, n: &Node) -> Self {
        let mut users: Vec<(String, DrfUsage)> = Vec::new();
        let mut gpu_task_cpu_milli = 0u64;
        let mut cpu_task_req_milli = 0u64;
        for t in &n.tasks {
            let Some((task, job)) = view
                .tasks()
                .get(t)
                .and_then(|t| Some((t, view.jobs().get(&t.job)?)))
            else {
                continue;
            };
            let req = &job.spec.resources;
            // S3.5: a task is charged the CPUs it holds now (its S3.2 searched or S3.6
            // compressed count), not its request.
            let mut used = DrfUsage::of(req);
            used.cpu_milli = task.cpu_milli.unwrap_or(req.cpu_milli);
            match users.iter_mut().find(|(u, _)| *u == job.spec.user) {
                Some((_, u)) => u.add(&used),
                None => users.push((job.spec.user.clone(), used)),
            }
            if !req.gpu.is_none() {
                gpu_task_cpu_milli = gpu_task_cpu_milli.saturating_add(used.cpu_milli);
            } else {
                cpu_task_req_milli = cpu_task_req_milli.saturating_add(req.cpu_milli);
            }
        }
        let working = n.takes_work();
        Self {
            users,
            gpu_task_cpu_milli,
            cpu_task_req_milli,
            capacity: if working {
                DrfUsage {
                    cpu_milli: n.capacity.cpu_milli,
                    mem_mib: n.capacity.mem_mib,
                    gpu_milli: n.capacity.gpu_free_milli(),
                }
            } else {
                DrfUsage::default()
            },
            gpu: working && !n.capacity.gpus.is_empty(),
            announced: n.gpu_pool(),
            gpus: if working { n.capacity.gpus.len() } else { 0 },
            cpu_milli: if working { n.capacity.cpu_milli } else { 0 },
        }
    }
}

/// Users' holdings, the capacity taking work, GPU tasks' CPUs per node and the GPU pools,
/// as of the last `sync`/`rebuild`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loads {
    nodes: BTreeMap<NodeId, NodeLoad>,
    users: BTreeMap<String, DrfUsage>,
    capacity: DrfUsage,
    /// Each GPU node's pool, as the last [`resplit`](Self::resplit) decided.
    members: BTreeMap<NodeId, GpuPool>,
    /// `members` as index locality constraints (rebuilt when a pool's membership changes).
    pools: BTreeMap<GpuPool, Candidates>,
    /// The GPU nodes changed since the last split (joined, left, drained, relabelled).
    split_stale: bool,
    /// The multi pool's GPU target the last split was for.
    split_target: Option<u64>,
    /// GPUs of the GPU nodes taking work (kept with `nodes`, so that a plan's check of
    /// the split reads no node).
    gpu_total: u64,
    /// Issue 53: each user's fair-share factor, as the leader last computed it from the
    /// accounting book, in parts per billion (users absent: no usage, factor 1).
    fair_share: BTreeMap<String, u64>,
}

impl Loads {
    /// Built from scratch.
    pub fn of(view: &ClusterState) -> Self {
        let mut l = Self::default();
        l.rebuild(view);
        l
    }

    /// Re-reads every node.
    pub fn rebuild(&mut self, view: &ClusterState) {
        *self = Self::default();
        for n in view.nodes().values() {
            self.add(n.id, NodeLoad::of(view, n));
        }
        self.split_stale = true;
    }

    /// Re-reads `node` (gone from `view`: its contribution is dropped).
    pub fn sync(&mut self, view: &ClusterState, node: NodeId) {
        let old = self.remove(node);
        let new = view.nodes().get(&node).map(|n| {
            let load = NodeLoad::of(view, n);
            let key = (load.gpu, load.announced, load.gpus);
            self.add(node, load);
            key
        });
        if old != new {
            self.split_stale = true;
        }
    }

    /// Splits the GPU nodes into pools for `demand` (`pool_split::split`) when the nodes or
    /// the demand's target changed since the last split; returns whether a node changed
    /// pools.
    pub fn resplit(&mut self, demand: &PoolDemand) -> bool {
        // Every plan asks: the nodes are read only when they or the target changed.
        let target = demand.multi_target(self.gpu_total);
        if !self.split_stale && self.split_target == Some(target) {
            return false;
        }
        let gpu_nodes: Vec<(NodeId, usize, Option<GpuPool>)> = self
            .nodes
            .iter()
            .filter(|(_, l)| l.gpu)
            .map(|(id, l)| (*id, l.gpus, l.announced))
            .collect();
        self.split_stale = false;
        self.split_target = Some(target);
        let members = super::pool_split::split(&gpu_nodes, target);
        if members == self.members {
            return false;
        }
        self.members = members;
        for pool in [GpuPool::Single, GpuPool::Multi] {
            self.refresh_pool(pool);
        }
        true
    }

    fn add(&mut self, node: NodeId, load: NodeLoad) {
        for (user, used) in &load.users {
            if *used != DrfUsage::default() {
                // The name is copied only for a user new to the cluster's holdings.
                match self.users.get_mut(user) {
                    Some(u) => u.add(used),
                    None => {
                        let mut u = DrfUsage::default();
                        u.add(used);
                        self.users.insert(user.clone(), u);
                    }
                }
            }
        }
        self.capacity.add(&load.capacity);
        if load.gpu {
            self.gpu_total = self.gpu_total.saturating_add(load.gpus as u64);
        }
        self.nodes.insert(node, load);
    }

    /// Takes `node`'s contribution out; returns what its pool depends on.
    fn remove(&mut self, node: NodeId) -> Option<(bool, Option<GpuPool>, usize)> {
        let load = self.nodes.remove(&node)?;
        for (user, used) in &load.users {
            if let Some(u) = self.users.get_mut(user) {
                u.sub(used);
                if *u == DrfUsage::default() {
                    self.users.remove(user);
                }
            }
        }
        self.capacity.sub(&load.capacity);
        if load.gpu {
            self.gpu_total = self.gpu_total.saturating_sub(load.gpus as u64);
        }
        Some((load.gpu, load.announced, load.gpus))
    }

    fn refresh_pool(&mut self, pool: GpuPool) {
        let c: Candidates = self
            .members
            .iter()
            .filter(|(id, p)| **p == pool && self.nodes.get(id).is_some_and(|l| l.gpu))
            .map(|(id, _)| *id)
            .collect();
        if c.is_empty() {
            self.pools.remove(&pool);
        } else {
            self.pools.insert(pool, c);
        }
    }

    /// What each user's assigned and running tasks hold (users holding nothing absent).
    pub fn users(&self) -> &BTreeMap<String, DrfUsage> {
        &self.users
    }

    /// Each user's fair-share factor in parts per billion (issue 53; empty: fair share off
    /// or no usage yet).
    pub fn fair_share(&self) -> &BTreeMap<String, u64> {
        &self.fair_share
    }

    /// Sets the users' fair-share factors (0 < F ≤ 1) the next plans order by.
    pub fn set_fair_share(&mut self, factors: BTreeMap<String, f64>) {
        self.fair_share = factors
            .into_iter()
            .map(|(u, f)| (u, (f.clamp(0.0, 1.0) * 1e9) as u64))
            .collect();
    }

    /// The capacity of the nodes taking work.
    pub fn capacity(&self) -> DrfUsage {
        self.capacity
    }

    /// CPU thousandths GPU tasks hold on `node`.
    pub fn gpu_task_cpu_milli(&self, node: NodeId) -> u64 {
        self.nodes.get(&node).map_or(0, |l| l.gpu_task_cpu_milli)
    }

    /// The GPU pool of `node` (`None`: no GPUs or takes no work).
    pub fn pool_of(&self, node: NodeId) -> Option<GpuPool> {
        self.nodes
            .get(&node)
            .filter(|l| l.gpu)
            .and_then(|_| self.members.get(&node).copied())
    }

    /// The nodes taking work in `pool`.
    pub fn pool_nodes(&self, pool: GpuPool) -> &Candidates {
        static EMPTY: std::sync::OnceLock<Candidates> = std::sync::OnceLock::new();
        self.pools
            .get(&pool)
            .unwrap_or_else(|| EMPTY.get_or_init(Candidates::default))
    }

    /// CPU thousandths the CPU tasks on `node` ask (0 for a node not known).
    pub fn cpu_task_req_milli(&self, node: NodeId) -> u64 {
        self.nodes.get(&node).map_or(0, |l| l.cpu_task_req_milli)
    }

    /// A GPU node taking work: (GPUs, CPU thousandths).
    pub fn gpu_node(&self, node: NodeId) -> Option<(usize, u64)> {
        self.nodes
            .get(&node)
            .filter(|l| l.gpu)
            .map(|l| (l.gpus, l.cpu_milli))
    }

    /// GPU nodes taking work: (node, GPUs, CPU thousandths).
    pub fn gpu_nodes(&self) -> impl Iterator<Item = (NodeId, usize, u64)> + '_ {
        self.nodes
            .iter()
            .filter(|(_, l)| l.gpu)
            .map(|(id, l)| (*id, l.gpus, l.cpu_milli))
    }
}
