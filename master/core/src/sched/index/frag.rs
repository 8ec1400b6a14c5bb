//! `frag` — fragmentation-aware GPU placement, after FGD (Weng et al., "Beware of
//! Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
//! USENIX ATC 2023), over the S4 index's fit set (docs/DESIGN.md §S4.3: the candidates are the
//! nodes the index says fit; this module only ranks them).
//!
//! **Fragment.** For one task class `m` (CPU, memory, GPU count and share, accepted models), a
//! node's fragment `F(n, m)` is the free GPU capacity of the models `m` accepts on `n` that
//! `m` could not use:
//! - all of it when `m` cannot run on `n` at all (too little CPU or memory beside the GPUs,
//!   too few usable devices);
//! - otherwise the free thousandths of the accepted devices `m` cannot use: devices with
//!   less free than its share (a fraction), partly used devices (a whole-device ask).
//!
//! **Per GPU model.** Devices of a model `m` does not accept are not `m`'s fragments (they
//! never were its to use, like every GPU for a CPU-only class): counting them made every
//! placement on another model's node look like it removed fragments of the pinned classes,
//! and `frag` placed fewer pods than `best-fit` where a third of them name a model. A
//! node's measure is taken over the classes that accept its models, normalised by their
//! weight (the mix as that model sees it), so nodes of different models compare fairly.
//!
//! CPU-only classes are left out of the measure: every free GPU is a fragment to them, so
//! any placement changes their term by the same amount on every node and never changes a
//! choice.
//!
//! **Expected fragmentation** of a node is `Σ_m weight(m) · F(n, m)` over the current
//! workload mix ([`WorkloadMix`]: the classes of the last `window` arrivals, each weighted by
//! its share of their GPU demand — deterministic, integer arithmetic). A task goes to the fitting node where placing it
//! grows the expected fragmentation least (the "gradient"); ties go to the first node in
//! the index's ascending (best-fit) order. The device is the one `allocate_gpus` gives (the
//! tightest device that fits, which is also the least-fragmenting one in the common case),
//! so the measure judges exactly the allocation the state machine will make.
//!
//! **Scarcity.** Each class's weight is multiplied by the GPU nodes there are over the GPU
//! nodes that could hold one task of it now (counts kept in step by [`FragPlacer::note_node`]).
//! By weight alone a rare class that only a few large nodes can hold (8 GPUs with 120 of 128
//! cores on the Alibaba trace: 39 of 1,213 GPU nodes) counted for little, and tasks that fit
//! anywhere went to those nodes because they stranded less there; the rare class then failed
//! first. A class no node can hold keeps its weight: every placement changes its fragments
//! alike.
//!
//! **CPU-only tasks** must not strand GPUs: they go to CPU-only nodes first (chosen by the CPU
//! policy, e.g. least-fit), and only when none fits to the GPU node where they grow the
//! fragmentation least (taking CPU or memory that a GPU class needs turns that node's free
//! GPUs into fragments).

use super::{Candidates, Dir, PlacementIndex, PlacementQuery, Policy};
use hetsched_common::{allocate_gpus, GpuDevice, NodeId, NodeResources, ResourceRequest};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// One task class of the workload mix and how many of the window's arrivals it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DemandShape {
    /// CPU asked, millicores.
    pub cpu_milli: u64,
    /// Memory asked, MiB.
    pub mem_mib: u64,
    /// GPU devices asked (≥ 1: CPU-only classes are not part of the measure).
    pub gpu_count: u32,
    /// Thousandths asked on each device (1000 = whole devices).
    pub gpu_milli: u32,
    /// Accepted models; empty means any.
    pub models: Vec<String>,
}

impl DemandShape {
    /// The class of `req`, or `None` for a request of no GPU.
    pub fn of(req: &ResourceRequest) -> Option<Self> {
        if req.gpu.is_none() {
            return None;
        }
        let mut models = req.gpu.models.clone();
        models.sort();
        models.dedup();
        Some(Self {
            cpu_milli: req.cpu_milli,
            mem_mib: req.mem_mib,
            gpu_count: req.gpu.count,
            gpu_milli: req.gpu.milli,
            models,
        })
    }

    /// GPU thousandths one task of the class asks in all.
    pub fn demand_milli(&self) -> u64 {
        self.gpu_count as u64 * self.gpu_milli as u64
    }

    fn accepts(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    fn is_fraction(&self) -> bool {
        self.gpu_count == 1 && self.gpu_milli < hetsched_common::GPU_MILLI_PER_DEVICE
    }
}

/// The fragment `F(n, m)` of one node for one class, in GPU thousandths: see the module docs.
/// `free` gives each device's free thousandths (it may differ from `devices[i].free_milli`:
/// a hypothetical state), `devices` their models.
pub fn class_fragment(
    cpu_milli: u64,
    mem_mib: u64,
    devices: &[GpuDevice],
    free: &[u32],
    class: &DemandShape,
) -> u64 {
    let total: u64 = devices
        .iter()
        .zip(free)
        .filter(|(d, _)| class.accepts(&d.model))
        .map(|(_, f)| *f as u64)
        .sum();
    if total == 0 {
        return 0;
    }
    if cpu_milli < class.cpu_milli || mem_mib < class.mem_mib {
        return total;
    }
    let need = class.gpu_milli.max(1);
    let (mut usable, mut usable_milli) = (0u32, 0u64);
    for (d, f) in devices.iter().zip(free) {
        if *f >= need && class.accepts(&d.model) {
            usable += 1;
            usable_milli += *f as u64;
        }
    }
    let enough = if class.is_fraction() {
        usable >= 1
    } else {
        usable >= class.gpu_count
    };
    if enough {
        total - usable_milli
    } else {
        total
    }
}

/// A node's expected fragmentation under `mix`: `Σ weight · F(n, m)`.
pub fn node_fragmentation(free: &NodeResources, mix: &[(DemandShape, u64)]) -> u64 {
    let f: Vec<u32> = free.gpus.iter().map(|d| d.free_milli).collect();
    fragmentation_of(free.cpu_milli, free.mem_mib, &free.gpus, &f, mix)
}

fn fragmentation_of(
    cpu_milli: u64,
    mem_mib: u64,
    devices: &[GpuDevice],
    free: &[u32],
    mix: &[(DemandShape, u64)],
) -> u64 {
    if free.iter().all(|f| *f == 0) {
        return 0;
    }
    mix.iter()
        .map(|(c, w)| w * class_fragment(cpu_milli, mem_mib, devices, free, c))
        .sum()
}

/// How much placing `req` on a node with `free` grows its expected fragmentation, or `None`
/// when it does not fit. Signed: a placement can also turn fragments into used capacity.
pub fn fragmentation_delta(
    free: &NodeResources,
    req: &ResourceRequest,
    mix: &[(DemandShape, u64)],
    scratch: &mut Vec<u32>,
) -> Option<i128> {
    if free.cpu_milli < req.cpu_milli || free.mem_mib < req.mem_mib {
        return None;
    }
    let alloc = allocate_gpus(&free.gpus, &req.gpu)?;
    scratch.clear();
    scratch.extend(free.gpus.iter().map(|d| d.free_milli));
    let before = fragmentation_of(free.cpu_milli, free.mem_mib, &free.gpus, scratch, mix);
    for (dev, milli) in &alloc {
        if let Some(f) = scratch.get_mut(*dev as usize) {
            *f = f.saturating_sub(*milli);
        }
    }
    let after = fragmentation_of(
        free.cpu_milli - req.cpu_milli,
        free.mem_mib - req.mem_mib,
        &free.gpus,
        scratch,
        mix,
    );
    // The mix as this node's models see it: normalised by the weight of the classes that
    // accept one of them (all of the mix when no class names a model).
    let all: u128 = mix.iter().map(|(_, w)| *w as u128).sum();
    let here: u128 = mix
        .iter()
        .filter(|(c, _)| free.gpus.iter().any(|d| c.accepts(&d.model)))
        .map(|(_, w)| *w as u128)
        .sum();
    let delta = after as i128 - before as i128;
    if here == 0 || here == all {
        return Some(delta);
    }
    Some(delta.saturating_mul(all as i128) / here as i128)
}

/// The workload mix: the GPU classes of the last `window` arrivals, with their counts.
/// Deterministic: it depends only on the sequence of observed requests.
#[derive(Clone, Debug)]
pub struct WorkloadMix {
    window: usize,
    recent: VecDeque<Option<DemandShape>>,
    counts: BTreeMap<DemandShape, u64>,
    /// The counts as a list, rebuilt when they changed.
    snapshot: Vec<(DemandShape, u64)>,
    stale: bool,
}

impl WorkloadMix {
    /// Arrivals remembered by default.
    pub const DEFAULT_WINDOW: usize = 2000;

    /// An empty mix over the last `window` arrivals (at least 1).
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            recent: VecDeque::new(),
            counts: BTreeMap::new(),
            snapshot: Vec::new(),
            stale: false,
        }
    }

    /// Notes one arrival.
    pub fn observe(&mut self, req: &ResourceRequest) {
        let class = DemandShape::of(req);
        if let Some(c) = &class {
            *self.counts.entry(c.clone()).or_insert(0) += 1;
            self.stale = true;
        }
        self.recent.push_back(class);
        while self.recent.len() > self.window {
            if let Some(Some(old)) = self.recent.pop_front() {
                if let Some(n) = self.counts.get_mut(&old) {
                    *n -= 1;
                    if *n == 0 {
                        self.counts.remove(&old);
                    }
                }
                self.stale = true;
            }
        }
    }

    /// Forgets every arrival.
    pub fn clear(&mut self) {
        *self = Self::new(self.window);
    }

    /// The classes and their weights: arrivals in the window × GPU thousandths asked, i.e.
    /// each class's share of the recent GPU *demand* (a class's fragments matter in
    /// proportion to the capacity it would take; weighting by popularity alone let the rare
    /// 8-GPU tasks strand whole nodes, 0.10 instead of 0.07 unallocated GPUs at the first
    /// failure on the default trace).
    pub fn classes(&mut self) -> &[(DemandShape, u64)] {
        if self.stale {
            self.snapshot = self
                .counts
                .iter()
                .map(|(c, n)| (c.clone(), n * c.demand_milli()))
                .collect();
            self.stale = false;
        }
        &self.snapshot
    }

    /// Arrivals in the window.
    pub fn len(&self) -> usize {
        self.recent.len()
    }

    /// Whether nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }
}

/// The `frag` placer: the mix, the set of CPU-only nodes, and a scratch buffer.
#[derive(Clone, Debug)]
pub struct FragPlacer {
    mix: WorkloadMix,
    cpu_only: BTreeSet<NodeId>,
    cpu_only_candidates: Option<Candidates>,
    scratch: Vec<u32>,
    /// Memo: state hash → (that free state, its fragmentation delta) for `memo_req` under
    /// the current scaled mix. Kept across decisions (a plan's tasks of one shape, the
    /// pools' second query for the same task) and cleared when the request or the scaled
    /// mix changes: the delta depends on nothing else.
    seen: HashMap<u64, (NodeResources, Option<i128>)>,
    memo_req: Option<ResourceRequest>,
    /// The previous scaled mix's buffer (reused).
    spare: Vec<(DemandShape, u64)>,
    /// Whether `scaled` is up to date (no arrival, node change or clear since).
    scaled_fresh: bool,
    /// Free resources of the nodes with GPUs, for the scarcity counts.
    gpu_nodes: BTreeMap<NodeId, NodeResources>,
    /// Per class of the mix: how many GPU nodes could hold one task of it now.
    holders: BTreeMap<DemandShape, u64>,
    /// The mix with each weight scaled by its class's scarcity (rebuilt per decision).
    scaled: Vec<(DemandShape, u64)>,
}

/// Whether a node with `free` could hold one task of `class` now.
fn holds(free: &NodeResources, class: &DemandShape) -> bool {
    if free.cpu_milli < class.cpu_milli || free.mem_mib < class.mem_mib {
        return false;
    }
    let need = class.gpu_milli.max(1);
    let usable = free
        .gpus
        .iter()
        .filter(|d| d.free_milli >= need && class.accepts(&d.model))
        .count() as u32;
    usable >= class.gpu_count.max(1)
}

/// A hash of what the fragmentation delta of a node depends on: its free CPU, memory and
/// devices. A hit is confirmed by comparing the two nodes' free resources.
fn signature(free: &NodeResources) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |x: u64| {
        h ^= x;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    mix(free.cpu_milli);
    mix(free.mem_mib);
    for d in &free.gpus {
        mix(d.free_milli as u64);
        mix(d.model.len() as u64);
        for b in d.model.bytes() {
            mix(b as u64);
        }
    }
    h
}

impl Default for FragPlacer {
    fn default() -> Self {
        Self::new(WorkloadMix::DEFAULT_WINDOW)
    }
}

impl FragPlacer {
    /// Submissions relearned after a rebuild (new leadership, snapshot restore).
    pub const WINDOW_ON_RESET: usize = WorkloadMix::DEFAULT_WINDOW;

    /// Distinct states the memo holds before it starts over.
    const MEMO_MAX: usize = 4096;

    /// A placer learning the mix from the last `window` arrivals.
    pub fn new(window: usize) -> Self {
        Self {
            mix: WorkloadMix::new(window),
            cpu_only: BTreeSet::new(),
            cpu_only_candidates: None,
            scratch: Vec::new(),
            seen: HashMap::new(),
            memo_req: None,
            spare: Vec::new(),
            scaled_fresh: false,
            gpu_nodes: BTreeMap::new(),
            holders: BTreeMap::new(),
            scaled: Vec::new(),
        }
    }

    /// Notes an arrival (learns the mix).
    pub fn observe(&mut self, req: &ResourceRequest) {
        self.mix.observe(req);
        self.scaled_fresh = false;
    }

    /// The mix learned so far.
    pub fn mix(&mut self) -> &[(DemandShape, u64)] {
        self.mix.classes()
    }

    /// Forgets the mix and the node set (a rebuild follows).
    pub fn clear(&mut self) {
        self.mix.clear();
        self.cpu_only.clear();
        self.cpu_only_candidates = None;
        self.gpu_nodes.clear();
        self.holders.clear();
        self.scaled_fresh = false;
    }

    /// Keeps the CPU-only node set in step: `free` is the node's free resources, `None` when
    /// it left the index.
    pub fn note_node(&mut self, node: NodeId, free: Option<&NodeResources>) {
        let cpu_only = free.is_some_and(|f| f.gpus.is_empty());
        let changed = if cpu_only {
            self.cpu_only.insert(node)
        } else {
            self.cpu_only.remove(&node)
        };
        if changed {
            self.cpu_only_candidates = None;
        }
        let new = free.filter(|f| !f.gpus.is_empty());
        if self.gpu_nodes.get(&node) == new {
            return; // unchanged (a start report, a CPU-only node): no count moves
        }
        self.scaled_fresh = false;
        let old = self.gpu_nodes.remove(&node);
        for (class, n) in self.holders.iter_mut() {
            let was = old.as_ref().is_some_and(|f| holds(f, class));
            let is = new.is_some_and(|f| holds(f, class));
            match (was, is) {
                (true, false) => *n = n.saturating_sub(1),
                (false, true) => *n += 1,
                _ => {}
            }
        }
        if let Some(f) = new {
            self.gpu_nodes.insert(node, f.clone());
        }
    }

    /// The mix with each class's weight multiplied by its scarcity: the GPU nodes there
    /// are over the GPU nodes that could hold one task of it now. Returns whether it
    /// differs from the previous decision's.
    fn scale_mix(&mut self) -> bool {
        if self.scaled_fresh {
            return false; // neither the mix nor a count moved since
        }
        self.scaled_fresh = true;
        std::mem::swap(&mut self.scaled, &mut self.spare);
        let mix = self.mix.classes();
        let nodes = self.gpu_nodes.len().max(1) as u64;
        if self.holders.len() > 2 * mix.len() + 16 {
            self.holders.retain(|c, _| mix.iter().any(|(m, _)| m == c));
        }
        self.scaled.clear();
        for (c, w) in mix {
            let h = match self.holders.get(c) {
                Some(h) => *h,
                None => {
                    let h = self.gpu_nodes.values().filter(|f| holds(f, c)).count() as u64;
                    self.holders.insert(c.clone(), h);
                    h
                }
            };
            // A class no node can hold now changes every placement's measure alike.
            let scaled = w.saturating_mul(nodes).checked_div(h).unwrap_or(*w);
            self.scaled.push((c.clone(), scaled));
        }
        self.scaled != self.spare
    }

    /// The node for `q`: see the module docs. `cpu_policy` picks among CPU-only nodes for a
    /// task that asks no GPU.
    pub fn place<P: Policy + ?Sized>(
        &mut self,
        ix: &mut PlacementIndex,
        q: &PlacementQuery<'_>,
        cpu_policy: &mut P,
    ) -> Option<NodeId> {
        if q.request.gpu.is_none() && q.candidates.is_none() && !self.cpu_only.is_empty() {
            let only = self
                .cpu_only_candidates
                .get_or_insert_with(|| self.cpu_only.iter().copied().collect());
            if let Some(n) = ix.place(&q.with_candidates(only), cpu_policy) {
                return Some(n);
            }
        }
        let fits = ix.ordered_fits(q, Dir::Asc);
        let rescaled = self.scale_mix();
        let mix = &self.scaled;
        // Nodes in the same state score the same: evaluate each distinct state once (per
        // request and scaled mix, so across decisions while neither changes).
        if rescaled || self.memo_req.as_ref() != Some(q.request) || self.seen.len() > Self::MEMO_MAX
        {
            self.seen.clear();
            self.memo_req = Some(q.request.clone());
        }
        let mut best: Option<(i128, NodeId)> = None;
        for node in fits {
            let Some(free) = ix.free(node) else { continue };
            let sig = signature(free);
            let known = self
                .seen
                .get(&sig)
                .filter(|(state, _)| state == free)
                .map(|(_, d)| *d);
            let d = match known {
                Some(d) => d,
                None => {
                    let d = fragmentation_delta(free, q.request, mix, &mut self.scratch);
                    self.seen.insert(sig, (free.clone(), d));
                    d
                }
            };
            let Some(d) = d else { continue };
            if best.is_none_or(|(b, _)| d < b) {
                best = Some((d, node));
            }
        }
        best.map(|(_, n)| n)
    }
}

#[cfg(test)]
#[path = "frag_tests.rs"]
mod tests;
