#![deny(missing_docs)]

//! S4 — DistBuckets: a multi-dimensional node index for fast placement; see docs/DESIGN.md §S4.
//!
//! Pure: no I/O, no clock; every structure is ordered or seeded, so equal inputs give equal
//! answers. The master keeps one [`PlacementIndex`] beside its replicated state, follows
//! every applied change with [`upsert_node`](PlacementIndex::upsert_node) /
//! [`remove_node`](PlacementIndex::remove_node) (or [`take`](PlacementIndex::take) /
//! [`give_back`](PlacementIndex::give_back)), rebuilds it from a snapshot with
//! [`rebuild`](PlacementIndex::rebuild), and asks [`place`](PlacementIndex::place).
//!
//! ```text
//!  node free resources ──coord.rs──▶ coordinate (cpu, mem, whole GPUs, largest GPU share) / θ
//!  task request        ──coord.rs──▶ coordinate; fit region = every coordinate ≥ it
//!
//!  tree.rs (one per dimension order)      policy.rs
//!  (*,*,*,*)                              LeastFit  first fit, descending
//!   ├─ (32000,*,*,*)                      BestFit   first fit, ascending
//!   │   chunks of ≤ 32 nodes, sorted by   FirstFit  = ascending order
//!   │   (rest of coordinate, class, id):  NextFit   ascending, after a cursor
//!   │   [(65536,2,1000) n3, n9; …] [ … ]
//!   └─ …                                  Random    seeded draws, then NextFit-like
//!             ▲                                      ▲
//!             └──── FitSpace: "first fitting node after P in direction D" ────┘
//!                   implemented by the tree (walks the fit region only, exact
//!                   `NodeResources::fits` at the leaf) and by scan.rs (linear)
//! ```
//!
//! Exactness: with θ = 1 the index returns the node the [`LinearScan`] returns, for every
//! policy but Random, whose draws come from each structure's own node list (the property
//! tests check it); with θ > 1 it returns a node that fits, and, as the
//! scan with the same θ does, the first in *coarse* order — not necessarily the best node
//! (docs/DESIGN.md §S4.6).
//!
//! GPUs: indexed as what one task can get from a node — wholly free devices and the largest
//! free share of one device (`coord.rs`); GPU models and engine kinds are categorical
//! (`class.rs`); the exact device choice stays `allocate_gpus`: the leaf check is
//! `NodeResources::fits`, mirrored without its allocation (`node::fits`, checked against the
//! original in every debug build).

mod class;
mod coord;
mod error;
pub mod frag;
mod frag_measure;
mod node;
mod policy;
mod query;
mod scan;
pub mod trace;
mod tree;
pub mod workload;

#[cfg(test)]
mod tests;

pub use coord::{node_vector, task_vector, Dim, DimOrder, Granularity, Key, DIMS};
pub use error::IndexError;
pub use frag::{DemandShape, FragPlacer, WorkloadMix};
pub use node::Reservation;
pub use policy::{
    AnyPolicy, BestFit, Dir, Draw, FirstFit, FitSpace, LeastFit, NextFit, Policy, PolicyKind, Pos,
    Random, UnknownPolicy,
};
pub use query::{Candidates, PlacementQuery};
pub use scan::LinearScan;

use class::{ClassId, Classes, Eligible};
use node::{best_of, fits, judge, NodeState};
use tree::{FxBuild, Search, Tree};

use hetsched_common::rng::SplitMix64;
use hetsched_common::{GpuAlloc, NodeId, NodeResources, ResourceRequest, TaskId};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Settings of an index.
#[derive(Clone, Copy, Debug)]
pub struct IndexConfig {
    /// Granularity θ per dimension.
    pub theta: Granularity,
    /// Locality constraints with at most this many candidates are answered by looking at
    /// the candidates directly (same semantics, O(candidates)) instead of walking the tree,
    /// which would visit buckets holding none of them.
    pub locality_scan_max: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            theta: Granularity::EXACT,
            locality_scan_max: 32,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    state: NodeState,
    class: ClassId,
    /// Position in `live` (for O(1) removal and uniform draws).
    live_pos: u32,
    /// Changes with every change of `state.free` (see [`next_version`]).
    version: u64,
}

/// A number never handed out before in this process: an entry takes a new one whenever what
/// its node has free changes, so a node's (id, version) names one state in every index, its
/// clones included (a clone keeps the numbers of the states it copied; a change on either side
/// takes a new one). Callers that derive something from a node's state (the `frag` placer's
/// state numbers) keep it while the version holds. Not part of any decision.
fn next_version() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The DistBuckets placement index.
#[derive(Clone, Debug)]
pub struct PlacementIndex {
    config: IndexConfig,
    /// Slot → node; `None` for a recycled slot.
    slots: Vec<Option<Entry>>,
    spare: Vec<u32>,
    by_id: HashMap<NodeId, u32, FxBuild>,
    live: Vec<u32>,
    classes: Classes,
    /// One tree per dimension order in use; the first is canonical.
    trees: Vec<Tree>,
    /// Task → the nodes reserved for it (the second index of docs/DESIGN.md §S4.5: tiny, so
    /// it is evaluated directly).
    reserved: BTreeMap<TaskId, BTreeSet<NodeId>>,
}

impl Default for PlacementIndex {
    fn default() -> Self {
        Self::new(IndexConfig::default())
    }
}

impl PlacementIndex {
    /// An empty index.
    pub fn new(config: IndexConfig) -> Self {
        Self {
            config,
            slots: Vec::new(),
            spare: Vec::new(),
            by_id: HashMap::default(),
            live: Vec::new(),
            classes: Classes::default(),
            trees: vec![Tree::new(DimOrder::CANONICAL)],
            reserved: BTreeMap::new(),
        }
    }

    /// An index holding `nodes` (id, free resources).
    pub fn with_nodes(
        config: IndexConfig,
        nodes: impl IntoIterator<Item = (NodeId, NodeResources)>,
    ) -> Self {
        let mut ix = Self::new(config);
        ix.rebuild(nodes);
        ix
    }

    /// Replaces the whole content with `nodes` (e.g. from a snapshot); reservations are
    /// dropped, dimension orders already in use are kept.
    pub fn rebuild(&mut self, nodes: impl IntoIterator<Item = (NodeId, NodeResources)>) {
        let orders: Vec<DimOrder> = self.trees.iter().map(|t| t.order()).collect();
        *self = Self::new(self.config);
        self.trees = orders.into_iter().map(Tree::new).collect();
        for (id, free) in nodes {
            self.upsert_node(id, &free);
        }
    }

    /// The settings.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Buckets in the canonical tree (a measure of how much θ coarsens the space).
    pub fn bucket_count(&self) -> usize {
        self.trees[0].buckets()
    }

    /// What `node` has free.
    pub fn free(&self, node: NodeId) -> Option<&NodeResources> {
        self.entry(node).map(|e| &e.state.free)
    }

    /// `node`'s free resources and the version of them (see [`next_version`]).
    pub(crate) fn free_versioned(&self, node: NodeId) -> Option<(&NodeResources, u64)> {
        self.entry(node).map(|e| (&e.state.free, e.version))
    }

    /// The reservation `node` holds.
    pub fn reservation(&self, node: NodeId) -> Option<&Reservation> {
        self.entry(node).and_then(|e| e.state.reservation.as_ref())
    }

    /// Adds a node, or replaces what it has free: a few binary searches and a shift of at
    /// most 32 entries per dimension order in use (see `tree.rs`).
    pub fn upsert_node(&mut self, id: NodeId, free: &NodeResources) {
        if let Some(slot) = self.by_id.get(&id).copied() {
            if let Some(e) = self.slots[slot as usize].as_mut() {
                e.state.free.clone_from(free);
            }
            self.refresh(slot, true);
            return;
        }
        let state = NodeState::new(id, free.clone(), &self.config.theta);
        let class = self.classes.classify(free, None);
        let slot = match self.spare.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for t in &mut self.trees {
            t.add(slot, id, &state.key_pub, class);
        }
        self.slots[slot as usize] = Some(Entry {
            state,
            class,
            live_pos: self.live.len() as u32,
            version: next_version(),
        });
        self.live.push(slot);
        self.by_id.insert(id, slot);
    }

    /// Removes a node (and its reservation); returns whether it was there.
    pub fn remove_node(&mut self, id: NodeId) -> bool {
        let Some(slot) = self.by_id.remove(&id) else {
            return false;
        };
        let Some(e) = self.slots[slot as usize].take() else {
            return false;
        };
        for t in &mut self.trees {
            t.remove(slot, id, &e.state.key_pub, e.class);
        }
        if let Some(r) = &e.state.reservation {
            self.forget_reservation(r.task, id);
        }
        let pos = e.live_pos as usize;
        self.live.swap_remove(pos);
        if let Some(moved) = self.live.get(pos).copied() {
            if let Some(m) = self.slots[moved as usize].as_mut() {
                m.live_pos = pos as u32;
            }
        }
        self.spare.push(slot);
        true
    }

    /// Holds `amount` of `node` for `task` ("LeastFit with reservation", docs/DESIGN.md §S4.5):
    /// every other task sees the node minus `amount`, `task` sees it whole. A node holds at
    /// most one reservation; reserving again for the same task replaces the amount.
    pub fn reserve(
        &mut self,
        node: NodeId,
        task: TaskId,
        amount: &ResourceRequest,
    ) -> Result<(), IndexError> {
        let slot = self.slot(node)?;
        let Some(e) = self.slots[slot as usize].as_mut() else {
            return Err(IndexError::UnknownNode(node));
        };
        if let Some(r) = &e.state.reservation {
            if r.task != task {
                return Err(IndexError::AlreadyReserved {
                    node,
                    holder: r.task,
                });
            }
        }
        e.state.reservation = Some(Reservation {
            task,
            amount: amount.clone(),
        });
        self.reserved.entry(task).or_default().insert(node);
        self.refresh(slot, true);
        Ok(())
    }

    /// Drops `node`'s reservation; returns the task it was held for.
    pub fn unreserve(&mut self, node: NodeId) -> Option<TaskId> {
        let slot = self.slot(node).ok()?;
        let r = self.slots[slot as usize]
            .as_mut()?
            .state
            .reservation
            .take()?;
        self.forget_reservation(r.task, node);
        self.refresh(slot, true);
        Some(r.task)
    }

    /// Commits a placement: takes `req` from `node` exactly as the state machine does
    /// (`NodeResources::take`) and moves the node in the index. `None` when it does not fit.
    pub fn take(&mut self, node: NodeId, req: &ResourceRequest) -> Option<GpuAlloc> {
        let slot = self.slot(node).ok()?;
        let alloc = node::take(&mut self.slots[slot as usize].as_mut()?.state.free, req)?;
        self.refresh(slot, false);
        Some(alloc)
    }

    /// Gives back what [`take`](Self::take) took, capped at `capacity`.
    pub fn give_back(
        &mut self,
        node: NodeId,
        req: &ResourceRequest,
        alloc: &GpuAlloc,
        capacity: &NodeResources,
    ) -> bool {
        let Ok(slot) = self.slot(node) else {
            return false;
        };
        let Some(e) = self.slots[slot as usize].as_mut() else {
            return false;
        };
        // `give_back` may add an engine kind the node had lost from its map: reclassify then.
        let kinds = e.state.free.engines.len();
        e.state.free.give_back(req, alloc, capacity);
        let reclassify = e.state.free.engines.len() != kinds;
        self.refresh(slot, reclassify);
        true
    }

    /// Builds the tree for `order` now rather than at its first query (O(|N|)). Each order
    /// in use costs one tree update per node change.
    pub fn add_order(&mut self, order: DimOrder) {
        self.tree_for(order);
    }

    /// The node `policy` picks for `q`, or `None` when no node fits. Does not change what
    /// nodes have free: commit with [`take`](Self::take) (or `upsert_node`).
    pub fn place<P: Policy + ?Sized>(
        &mut self,
        q: &PlacementQuery<'_>,
        policy: &mut P,
    ) -> Option<NodeId> {
        let t = self.tree_for(q.order);
        let elig = self.classes.eligible(q.request);
        let mut space = self.space(t, q, &elig);
        policy.select(&mut space).map(|p| p.node)
    }

    /// Every node that fits `q`, in `dir` order (the iterator of docs/DESIGN.md §S4.3, collected).
    pub fn ordered_fits(&mut self, q: &PlacementQuery<'_>, dir: Dir) -> Vec<NodeId> {
        let t = self.tree_for(q.order);
        let elig = self.classes.eligible(q.request);
        let mut space = self.space(t, q, &elig);
        let mut out = Vec::new();
        let mut last: Option<Pos> = None;
        while let Some(p) = space.first(dir, last.as_ref()) {
            out.push(p.node);
            last = Some(p);
        }
        out
    }

    /// Every node `q` fits, each with its place in the order (`q.order`), in no particular
    /// order: one walk of the tree, where [`ordered_fits`](Self::ordered_fits) searches
    /// again from each place for the next. For a caller that ranks every fitting node by
    /// its own measure and breaks ties by the place (`frag`). Written into `out` (cleared
    /// first), so that a caller deciding again and again reuses one buffer.
    pub fn fit_positions_into(&mut self, q: &PlacementQuery<'_>, out: &mut Vec<Pos>) {
        out.clear();
        let t = self.tree_for(q.order);
        let elig = self.classes.eligible(q.request);
        self.space(t, q, &elig).all_fits(out);
    }

    fn space<'a>(
        &'a mut self,
        t: usize,
        q: &'a PlacementQuery<'a>,
        elig: &'a Eligible,
    ) -> IndexSpace<'a> {
        let task = q
            .order
            .permute(&self.config.theta.coarse(&task_vector(q.request)));
        let direct = q
            .candidates
            .is_some_and(|c| c.len() <= self.config.locality_scan_max);
        IndexSpace {
            tree: &mut self.trees[t],
            slots: &self.slots,
            by_id: &self.by_id,
            live: &self.live,
            owned: q.task.and_then(|task| self.reserved.get(&task)),
            q,
            task,
            elig,
            direct,
        }
    }

    fn tree_for(&mut self, order: DimOrder) -> usize {
        if let Some(i) = self.trees.iter().position(|t| t.order() == order) {
            return i;
        }
        let mut t = Tree::new(order);
        for slot in &self.live {
            if let Some(e) = &self.slots[*slot as usize] {
                t.add(*slot, e.state.id, &e.state.key_pub, e.class);
            }
        }
        self.trees.push(t);
        self.trees.len() - 1
    }

    /// Recomputes a node's views and moves it in every tree if its coordinate or class
    /// changed.
    ///
    /// `reclassify` is false after `take`, which changes amounts but never which devices or
    /// engine kinds a node has, so the class comparison (string compares) can be skipped.
    fn refresh(&mut self, slot: u32, reclassify: bool) {
        let Some(e) = self.slots[slot as usize].as_mut() else {
            return;
        };
        e.version = next_version();
        let (old_key, old_class) = (e.state.key_pub, e.class);
        e.state.refresh(&self.config.theta);
        if reclassify {
            e.class = self.classes.classify(&e.state.free, Some(old_class));
        }
        if e.state.key_pub == old_key && e.class == old_class {
            return;
        }
        let (id, key, class) = (e.state.id, e.state.key_pub, e.class);
        for t in &mut self.trees {
            t.remove(slot, id, &old_key, old_class);
            t.add(slot, id, &key, class);
        }
    }

    fn forget_reservation(&mut self, task: TaskId, node: NodeId) {
        if let Some(set) = self.reserved.get_mut(&task) {
            set.remove(&node);
            if set.is_empty() {
                self.reserved.remove(&task);
            }
        }
    }

    fn slot(&self, node: NodeId) -> Result<u32, IndexError> {
        self.by_id
            .get(&node)
            .copied()
            .ok_or(IndexError::UnknownNode(node))
    }

    fn entry(&self, node: NodeId) -> Option<&Entry> {
        let slot = self.by_id.get(&node)?;
        self.slots[*slot as usize].as_ref()
    }
}

/// The tree's leaf check: the state of node `id` (in `slot`) when `q` fits its public view
/// and may use it. With `owned` (the asking task holds reservations) its own reserved nodes
/// are left out here: they are seen whole, outside the tree.
#[inline]
fn tree_fit<'s>(
    slots: &'s [Option<Entry>],
    q: &PlacementQuery<'_>,
    owned: bool,
    slot: u32,
    id: NodeId,
) -> Option<&'s NodeState> {
    let e = slots[slot as usize].as_ref()?;
    if q.candidates.is_some_and(|c| !c.contains(id)) || (owned && e.state.reserved_for(q.task)) {
        return None;
    }
    fits(e.state.public(), q.request).then_some(&e.state)
}

/// The fit space of one query over the index.
struct IndexSpace<'a> {
    tree: &'a mut Tree,
    slots: &'a [Option<Entry>],
    by_id: &'a HashMap<NodeId, u32, FxBuild>,
    live: &'a [u32],
    /// The nodes reserved for the asking task, seen whole (evaluated directly).
    owned: Option<&'a BTreeSet<NodeId>>,
    q: &'a PlacementQuery<'a>,
    /// The task's coordinate in the tree's order.
    task: [u64; DIMS],
    elig: &'a Eligible,
    /// Answer from the candidate list instead of the tree.
    direct: bool,
}

impl IndexSpace<'_> {
    fn state(&self, node: &NodeId) -> Option<&NodeState> {
        let slot = self.by_id.get(node)?;
        self.slots[*slot as usize].as_ref().map(|e| &e.state)
    }

    /// The place of `st` in the query's order if the query fits it (as `best_of` sees it).
    fn fit_of(&self, st: &NodeState) -> Option<Pos> {
        let q = self.q;
        if q.candidates.is_some_and(|c| !c.contains(st.id)) {
            return None;
        }
        let (view, key) = st.view(q.task);
        fits(view, q.request).then(|| Pos {
            key: q.order.permute(key),
            node: st.id,
        })
    }

    /// Every fitting node with its place, unordered: what `first` would return, called again
    /// and again from each place it returned. The tree is walked once with a leaf check that
    /// records each fit and answers "no", so the walk goes on to the next.
    fn all_fits(&mut self, out: &mut Vec<Pos>) {
        let q = self.q;
        if self.direct {
            let c = q.candidates.map(|c| c.as_slice()).unwrap_or(&[]);
            out.extend(
                c.iter()
                    .filter_map(|id| self.state(id).and_then(|st| self.fit_of(st))),
            );
            return;
        }
        let owned = self.owned.filter(|s| !s.is_empty());
        let slots = self.slots;
        let search = Search {
            task: self.task,
            elig: self.elig,
            dir: Dir::Asc,
            after: None,
        };
        self.tree.first(&search, &mut |slot, id| {
            if let Some(st) = tree_fit(slots, q, owned.is_some(), slot, id) {
                out.push(Pos {
                    key: q.order.permute(&st.key_pub),
                    node: id,
                });
            }
            false
        });
        if let Some(set) = owned {
            out.extend(
                set.iter()
                    .filter_map(|id| self.state(id).and_then(|st| self.fit_of(st))),
            );
        }
    }
}

impl FitSpace for IndexSpace<'_> {
    fn order(&self) -> DimOrder {
        self.q.order
    }

    fn first(&mut self, dir: Dir, after: Option<&Pos>) -> Option<Pos> {
        let q = self.q;
        if self.direct {
            let c = q.candidates.map(|c| c.as_slice()).unwrap_or(&[]);
            return best_of(c.iter().filter_map(|id| self.state(id)), q, dir, after);
        }
        let owned = self.owned.filter(|s| !s.is_empty());
        let slots = self.slots;
        let search = Search {
            task: self.task,
            elig: self.elig,
            dir,
            after,
        };
        let in_tree = self.tree.first(&search, &mut |slot, id| {
            tree_fit(slots, q, owned.is_some(), slot, id).is_some()
        });
        let mine = owned
            .and_then(|set| best_of(set.iter().filter_map(|id| self.state(id)), q, dir, after));
        policy::earlier(in_tree, mine, dir)
    }

    fn draw(&mut self, rng: &mut SplitMix64) -> Draw {
        match self.q.candidates {
            Some(c) if c.is_empty() => Draw::Empty,
            Some(c) => {
                let id = c.as_slice()[rng.below(c.len() as u64) as usize];
                match self.state(&id) {
                    Some(st) => judge(st, self.q),
                    None => Draw::Miss(None),
                }
            }
            None if self.live.is_empty() => Draw::Empty,
            None => {
                let slot = self.live[rng.below(self.live.len() as u64) as usize];
                match &self.slots[slot as usize] {
                    Some(e) => judge(&e.state, self.q),
                    None => Draw::Miss(None),
                }
            }
        }
    }
}
