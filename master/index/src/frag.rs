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

use super::{Candidates, Dir, PlacementIndex, PlacementQuery, Policy, Pos};
use hetsched_common::{NodeId, NodeResources, ResourceRequest};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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

    pub(super) fn accepts(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    pub(super) fn is_fraction(&self) -> bool {
        self.gpu_count == 1 && self.gpu_milli < hetsched_common::GPU_MILLI_PER_DEVICE
    }
}

use super::frag_measure::GroupChange;
pub use super::frag_measure::{class_fragment, MixByShape};
use states::StateTable;

/// What the placer keeps across decisions: node states by number, what each shape sees of
/// a device state, and a placement's change per (state, request).
#[path = "frag_states.rs"]
mod states;

/// A node's expected fragmentation under `mix`: `Σ weight · F(n, m)`.
pub fn node_fragmentation(free: &NodeResources, mix: &[(DemandShape, u64)]) -> u128 {
    let f: Vec<u32> = free.gpus.iter().map(|d| d.free_milli).collect();
    MixByShape::new(mix).fragmentation(free.cpu_milli, free.mem_mib, &free.gpus, &f)
}

/// How much placing `req` on a node with `free` grows its expected fragmentation, or `None`
/// when it does not fit (see [`MixByShape::delta`], which the placer keeps across decisions).
pub fn fragmentation_delta(
    free: &NodeResources,
    req: &ResourceRequest,
    mix: &[(DemandShape, u64)],
    scratch: &mut Vec<u32>,
) -> Option<i128> {
    MixByShape::new(mix).delta(free, req, scratch)
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
    /// GPU arrivals in the window, and those of them that name GPU models (for `auto`).
    gpu: u64,
    pinned: u64,
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
            gpu: 0,
            pinned: 0,
        }
    }

    /// Notes one arrival.
    pub fn observe(&mut self, req: &ResourceRequest) {
        self.push(DemandShape::of(req));
    }

    /// Notes one arrival of `class` (`None`: a CPU-only request); returns the GPU class
    /// that left the window to make room, if one did (one arrival in, at most one out).
    pub(crate) fn push(&mut self, class: Option<DemandShape>) -> Option<DemandShape> {
        if let Some(c) = &class {
            *self.counts.entry(c.clone()).or_insert(0) += 1;
            self.stale = true;
            self.gpu += 1;
            self.pinned += u64::from(!c.models.is_empty());
        }
        self.recent.push_back(class);
        if self.recent.len() <= self.window {
            return None;
        }
        let old = self.recent.pop_front().flatten()?;
        self.gpu -= 1;
        self.pinned -= u64::from(!old.models.is_empty());
        if let Some(n) = self.counts.get_mut(&old) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&old);
            }
        }
        self.stale = true;
        Some(old)
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

    /// Of the window's GPU arrivals, the thousandths that name GPU models (0 with none).
    pub fn pinned_permille(&self) -> u64 {
        (self.pinned * 1000).checked_div(self.gpu).unwrap_or(0)
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

/// `auto` places GPU tasks by best-fit instead of `frag` once this many thousandths of the
/// recent GPU arrivals (the mix's window) name a GPU model: see
/// [`PolicyKind::Auto`](super::PolicyKind::Auto) for the measurements that chose it.
pub const AUTO_BEST_FIT_FROM_PERMILLE: u64 = 150;

/// The `frag` placer: the mix, the set of CPU-only nodes, and a scratch buffer.
#[derive(Clone, Debug)]
pub struct FragPlacer {
    mix: WorkloadMix,
    cpu_only: BTreeSet<NodeId>,
    cpu_only_candidates: Option<Candidates>,
    scratch: Vec<u32>,
    /// Node states by number, what the shape groups see of each device state, and the memo:
    /// see [`StateTable`].
    states: StateTable,
    /// The memo's current stamp: a state's delta holds for `memo_req` under the current
    /// scaled mix while it carries this stamp (a new stamp empties the memo at once).
    memo_stamp: u64,
    /// The key being looked up (reused).
    key: Vec<u64>,
    /// GPU models by number, as `state_key` met them.
    models: Vec<String>,
    memo_req: Option<ResourceRequest>,
    /// Whether `by_shape` is up to date (no arrival, scarcity count moved or clear since).
    scaled_fresh: bool,
    /// What the nodes with GPUs have free, for the scarcity counts, as their state keys
    /// (`state_key`: CPU, memory, then each device's model number and free thousandths):
    /// compared and kept without a copy of the model names.
    gpu_nodes: BTreeMap<NodeId, Box<[u64]>>,
    /// Every class met (in the window or recently), by number: see [`ClassRow`].
    rows: Vec<ClassRow>,
    /// Each class's number in `rows`.
    row_of: BTreeMap<DemandShape, usize>,
    /// The mix with each weight scaled by its class's scarcity, grouped by GPU shape: what
    /// a decision evaluates (rebuilt when the mix or a scarcity count moves). Its groups
    /// keep their numbers (each row holds its own).
    by_shape: MixByShape,
    /// Per shape group, the devices usable before and after a node change (reused).
    usable_was: Vec<u32>,
    usable_is: Vec<u32>,
    /// The fitting nodes of a decision (reused).
    fits: Vec<Pos>,
    /// Per shape group, what placing the request at hand does to it (reused).
    changes: Vec<(usize, GroupChange)>,
}

/// One class as the placer keeps it. Kept by number, with its count and scarcity beside it,
/// so that the scaled mix an arrival calls for is rebuilt from a list (no search of classes
/// or shapes: that was a sixth of `pipeline-frag`'s time on a trace that barely queues,
/// where every plan follows one arrival), and a node change updates the scarcity counts
/// with one walk of the node's devices per shape.
#[derive(Clone, Debug)]
struct ClassRow {
    class: DemandShape,
    /// Its arrivals in the mix's window (0: it left; the row stays until compacted).
    count: u64,
    /// How many GPU nodes could hold one task of it now, while `count > 0` (kept in step by
    /// `note_node` for the classes in the window only; recounted when one comes back).
    holders: u64,
    /// Its GPU shape's group in `by_shape`.
    group: usize,
}

/// Whether a node whose state key is `key` (`state_key`; `models` by number) could hold one
/// task of `class` now: [`holds`] on the key.
fn holds_key(key: &[u64], class: &DemandShape, models: &[String]) -> bool {
    let [cpu, mem, devices @ ..] = key else {
        return false;
    };
    if *cpu < class.cpu_milli || *mem < class.mem_mib {
        return false;
    }
    let need = class.gpu_milli.max(1);
    let usable = devices
        .iter()
        .filter(|k| {
            let (model, free) = key_device(**k, models);
            free >= need && class.accepts(model)
        })
        .count() as u32;
    usable >= class.gpu_count.max(1)
}

/// A device of a state key: its model (by `models`' numbers) and free thousandths.
fn key_device(k: u64, models: &[String]) -> (&str, u32) {
    let model = models.get((k >> 32) as usize).map_or("", String::as_str);
    (model, k as u32)
}

/// Whether a node with `free` could hold one task of `class` now.
#[cfg(test)]
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

impl Default for FragPlacer {
    fn default() -> Self {
        Self::new(WorkloadMix::DEFAULT_WINDOW)
    }
}

impl FragPlacer {
    /// Submissions relearned after a rebuild (new leadership, snapshot restore).
    pub const WINDOW_ON_RESET: usize = WorkloadMix::DEFAULT_WINDOW;

    /// Distinct node states numbered before the numbering starts over.
    const STATES_MAX: usize = 16384;

    /// A placer learning the mix from the last `window` arrivals.
    pub fn new(window: usize) -> Self {
        Self {
            mix: WorkloadMix::new(window),
            cpu_only: BTreeSet::new(),
            cpu_only_candidates: None,
            scratch: Vec::new(),
            key: Vec::new(),
            states: StateTable::default(),
            memo_stamp: 1,
            models: Vec::new(),
            memo_req: None,
            scaled_fresh: false,
            gpu_nodes: BTreeMap::new(),
            rows: Vec::new(),
            row_of: BTreeMap::new(),
            by_shape: MixByShape::default(),
            usable_was: Vec::new(),
            usable_is: Vec::new(),
            changes: Vec::new(),
            fits: Vec::new(),
        }
    }

    /// Notes an arrival (learns the mix).
    pub fn observe(&mut self, req: &ResourceRequest) {
        let class = DemandShape::of(req);
        if let Some(c) = &class {
            let r = self.row(c);
            let row = &mut self.rows[r];
            if row.count == 0 {
                // New or back in the window: counted now, kept in step from here.
                let (gpu_nodes, models) = (&self.gpu_nodes, &self.models);
                row.holders = gpu_nodes
                    .values()
                    .filter(|k| holds_key(k, &row.class, models))
                    .count() as u64;
            }
            row.count += 1;
        }
        if let Some(old) = self.mix.push(class) {
            if let Some(r) = self.row_of.get(&old) {
                let row = &mut self.rows[*r];
                row.count = row.count.saturating_sub(1);
            }
        }
        self.scaled_fresh = false;
    }

    /// The number of `class`'s row, made (empty) when new.
    fn row(&mut self, class: &DemandShape) -> usize {
        if let Some(r) = self.row_of.get(class) {
            return *r;
        }
        let group = self.by_shape.group_for(class);
        self.rows.push(ClassRow {
            class: class.clone(),
            count: 0,
            holders: 0,
            group,
        });
        self.row_of.insert(class.clone(), self.rows.len() - 1);
        self.rows.len() - 1
    }

    /// Drops the rows of classes that left the window once they outnumber the live ones
    /// (a returning class is recounted), renumbering rows and shape groups.
    fn compact(&mut self) {
        let live = self.rows.iter().filter(|r| r.count > 0).count();
        if self.rows.len() <= 2 * live + 16 {
            return;
        }
        self.rows.retain(|r| r.count > 0);
        self.row_of.clear();
        self.by_shape = MixByShape::default();
        self.states.groups_renumbered();
        for (i, r) in self.rows.iter_mut().enumerate() {
            r.group = self.by_shape.group_for(&r.class);
            self.row_of.insert(r.class.clone(), i);
        }
    }

    /// Of the recent GPU arrivals, the thousandths that name GPU models.
    pub fn pinned_permille(&self) -> u64 {
        self.mix.pinned_permille()
    }

    /// Under `auto` ([`PolicyKind::Auto`](super::PolicyKind::Auto)): whether GPU tasks go
    /// by best-fit now, i.e. whether at least [`AUTO_BEST_FIT_FROM_PERMILLE`] of the recent
    /// GPU arrivals name a model.
    pub fn auto_picks_best_fit(&self) -> bool {
        self.pinned_permille() >= AUTO_BEST_FIT_FROM_PERMILLE
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
        self.rows.clear();
        self.row_of.clear();
        self.by_shape = MixByShape::default();
        self.states = StateTable::default();
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
        if let Some(f) = new {
            self.state_key(f);
        }
        let unchanged = match (self.gpu_nodes.get(&node), new) {
            (None, None) => true,
            (Some(kept), Some(_)) => **kept == self.key[..],
            _ => false,
        };
        if unchanged {
            return; // a start report, a CPU-only node: no count moves
        }
        let old = self.gpu_nodes.remove(&node);
        let new: Option<Box<[u64]>> = new.map(|_| self.key.as_slice().into());
        // The scaled mix moves only with the number of GPU nodes or a class's holders.
        let mut moved = old.is_some() != new.is_some();
        // `holds` for every class, from what each GPU shape sees of the devices.
        let (mut was_usable, mut is_usable) = (
            std::mem::take(&mut self.usable_was),
            std::mem::take(&mut self.usable_is),
        );
        self.usable_per_group(old.as_deref(), &mut was_usable);
        self.usable_per_group(new.as_deref(), &mut is_usable);
        let holds_row = |key: Option<&[u64]>, usable: &[u32], r: &ClassRow| {
            key.is_some_and(|k| {
                k.first().is_some_and(|cpu| *cpu >= r.class.cpu_milli)
                    && k.get(1).is_some_and(|mem| *mem >= r.class.mem_mib)
                    && usable.get(r.group).copied().unwrap_or(0) >= r.class.gpu_count.max(1)
            })
        };
        for r in self.rows.iter_mut().filter(|r| r.count > 0) {
            let was = holds_row(old.as_deref(), &was_usable, r);
            let is = holds_row(new.as_deref(), &is_usable, r);
            match (was, is) {
                (true, false) => r.holders = r.holders.saturating_sub(1),
                (false, true) => r.holders += 1,
                _ => continue,
            }
            moved = true;
        }
        (self.usable_was, self.usable_is) = (was_usable, is_usable);
        if moved {
            self.scaled_fresh = false;
        }
        if let Some(k) = new {
            self.gpu_nodes.insert(node, k);
        }
    }

    /// Into `out`, per shape group (by number): how many devices of a node whose state key
    /// is `key` (`state_key`) a task of the shape could use (none without a key). Read from
    /// what the groups see of its device state (kept in [`StateTable`] for the deltas too).
    fn usable_per_group(&mut self, key: Option<&[u64]>, out: &mut Vec<u32>) {
        out.clear();
        let Some(devices) = key.and_then(|k| k.get(2..)) else {
            return;
        };
        let device = self.states.device(devices);
        let models = &self.models;
        if let Some(sees) = self.states.sees.get_mut(device) {
            // Shapes new since it was kept.
            self.by_shape
                .see_each(|| devices.iter().map(|k| key_device(*k, models)), sees);
            out.extend(sees.iter().map(|s| s.usable()));
        }
    }

    /// The mix with each class's weight multiplied by its scarcity: the GPU nodes there
    /// are over the GPU nodes that could hold one task of it now. Returns whether it was
    /// rebuilt since the previous decision (it may then be equal: the memo only starts over).
    fn scale_mix(&mut self) -> bool {
        if self.scaled_fresh {
            return false; // neither the mix nor a count moved since
        }
        self.scaled_fresh = true;
        self.compact();
        let nodes = self.gpu_nodes.len().max(1) as u64;
        self.by_shape.clear_weights();
        for r in self.rows.iter().filter(|r| r.count > 0) {
            let w = r.count * r.class.demand_milli();
            // A class no node can hold now changes every placement's measure alike.
            let scaled = w.saturating_mul(nodes).checked_div(r.holders).unwrap_or(w);
            self.by_shape
                .add_class(r.group, r.class.cpu_milli, r.class.mem_mib, scaled);
        }
        true
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
        let mut fits = std::mem::take(&mut self.fits);
        ix.fit_positions_into(q, &mut fits);
        let rescaled = self.scale_mix();
        if self.states.device_of.len() > Self::STATES_MAX
            || self.states.sees.len() > Self::STATES_MAX
            || self.states.requests.len() > Self::STATES_MAX
        {
            self.states = StateTable::default();
        }
        let request = self.states.request(q.request);
        // Nodes in the same state score the same: evaluate each distinct state once (per
        // request and scaled mix, so across decisions while neither changes).
        if rescaled || self.memo_req.as_ref() != Some(q.request) {
            self.memo_stamp += 1;
            self.memo_req = Some(q.request.clone());
        }
        // The least growth wins; among equals the first node in the index's ascending
        // (best-fit) order.
        let mut best: Option<(i128, Pos)> = None;
        for &pos in &fits {
            let Some((free, version)) = ix.free_versioned(pos.node) else {
                continue;
            };
            let state = match self.states.of_node.get(&pos.node) {
                Some(&(v, state)) if v == version => state as usize,
                _ => {
                    self.state_key(free);
                    let state = self.states.state(&self.key);
                    self.states
                        .of_node
                        .insert(pos.node, (version, state as u32));
                    state
                }
            };
            let d = match self.states.memo.get(state) {
                Some(&(stamp, d)) if stamp == self.memo_stamp => d,
                _ => {
                    let d = self.state_delta(state, request, free, q.request);
                    if let Some(m) = self.states.memo.get_mut(state) {
                        *m = (self.memo_stamp, d);
                    }
                    d
                }
            };
            let Some(d) = d else { continue };
            let better = best.is_none_or(|(b, at)| {
                d < b || (d == b && pos.cmp_in(&at, Dir::Asc) == std::cmp::Ordering::Less)
            });
            if better {
                best = Some((d, pos));
            }
        }
        self.fits = fits;
        best.map(|(_, p)| p.node)
    }

    /// Writes into `self.key` what a node's fragmentation delta depends on: its free CPU
    /// and memory, and each device's free thousandths with its model's number (models are
    /// numbered as the placer meets them). Equal keys are equal states: exact, and with no
    /// copy of the model names. A decision keys only a node whose state changed since it was
    /// keyed (see [`StateTable`]); `note_node` keys every GPU node it is told of, to compare
    /// with the key it keeps for the scarcity counts.
    fn state_key(&mut self, free: &NodeResources) {
        self.key.clear();
        self.key.extend([free.cpu_milli, free.mem_mib]);
        let mut last: Option<usize> = None;
        for d in &free.gpus {
            let m = match last.filter(|m| self.models[*m] == d.model) {
                Some(m) => m,
                None => match self.models.iter().position(|m| *m == d.model) {
                    Some(m) => m,
                    None => {
                        self.models.push(d.model.clone());
                        self.models.len() - 1
                    }
                },
            };
            last = Some(m);
            self.key.push(((m as u64) << 32) | d.free_milli as u64);
        }
    }
}

#[cfg(test)]
#[path = "frag_tests.rs"]
mod tests;
