//! The bucket tree of SEEDS.md §S4.2 for one dimension order.
//!
//! Level `l` (0-based) fixes the `l`-th coordinate of the order: the root is `(*,*,*,*)`, its
//! children `(x0,*,*,*)`, and so on down to the leaves, which fix every coordinate and hold
//! their nodes as (id, slot, class), ids ascending. Buckets live in an arena; children are
//! kept as a sorted vector of coordinates, so a search finds the start of the task's fit
//! region by binary search and then walks only coordinates inside it.
//!
//! Each bucket also keeps an upper bound of the coordinates (`hi`) and of the node classes
//! (`mask`, the categorical attributes of `class.rs`) below it. Adding a node raises them;
//! removing one leaves them as they are (still upper bounds, so pruning stays correct) and
//! a search that comes back empty from a bucket recomputes that bucket's bounds from its
//! children — the looseness is paid for once, by the search that ran into it, instead of
//! by every removal.
//!
//! Costs: adding a node is a hash lookup of its leaf plus a walk of the `DIMS` parents;
//! removing one is the walk. Creating or emptying a bucket also touches its parent's sorted
//! child vector (binary search and shift, bounded by the number of distinct coordinates on
//! that level, not by the number of nodes), and a leaf's nodes are a sorted vector (an
//! insertion shifts the leaf's other nodes: few when θ = 1, where a leaf holds the nodes of
//! exactly equal availability).

use super::class::{bit, ClassId, Eligible};
use super::coord::{DimOrder, Key, DIMS};
use super::policy::{Dir, Pos};
use hetsched_common::NodeId;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NONE: u32 = u32::MAX;

/// Sort key of a leaf entry: class ascending, then id descending.
#[inline]
fn leaf_order(e: &(NodeId, u32, ClassId)) -> (ClassId, Reverse<NodeId>) {
    (e.2, Reverse(e.0))
}
const ROOT: u32 = 0;

/// A small deterministic hasher for integer keys (the std hasher is randomly seeded and
/// slower; the maps that use this one are only looked up, never iterated).
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Integer arrays hash as their raw bytes: take them eight at a time.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        for b in chunks.remainder() {
            self.write_u64(*b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

/// One bucket. `repr(C)` with the fields a search reads of every child it considers
/// (count, mask, hi) first and a 64-byte alignment, so that check touches one cache line.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// Nodes below.
    count: u32,
    parent: u32,
    /// Upper bound of the class bits below.
    mask: u64,
    /// Upper bound of the coordinates below, per level (exact for a leaf).
    hi: Key,
    /// This bucket's coordinate on its parent's level.
    coord: u64,
    /// 0 for the root, `DIMS` for leaves.
    depth: u8,
    /// Inner buckets: children's coordinates, ascending, and their arena indices.
    coords: Vec<u64>,
    kids: Vec<u32>,
    /// Leaves: (node id, slot, class), grouped by class ascending and, within a class, by
    /// id *descending*. Every policy takes the lowest id first, so it sits at the end of its
    /// run and leaves by a pop rather than by shifting the whole leaf (the fresh nodes of
    /// one shape share a leaf, thousands of them). Grouping by class lets a search skip the
    /// ineligible classes of a leaf in one step. A sorted vector rather than a B-tree: with
    /// θ = 1 most leaves hold a handful of nodes, and the vector keeps its capacity when the
    /// bucket is recycled, so moving a node costs no allocation.
    nodes: Vec<(NodeId, u32, ClassId)>,
}

/// One search: the task's coordinate in this tree's order, the classes it may use, where to
/// resume, and which direction to walk.
pub(crate) struct Search<'a> {
    pub task: Key,
    pub elig: &'a Eligible,
    pub dir: Dir,
    pub after: Option<&'a Pos>,
}

/// The bucket tree for one dimension order.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    order: DimOrder,
    b: Vec<Bucket>,
    spare: Vec<u32>,
    /// Slot → its leaf (NONE when absent).
    leaf_of: Vec<u32>,
    /// Coordinate → leaf, for O(1) insertion into an existing leaf.
    leaves: HashMap<Key, u32, FxBuild>,
}

impl Tree {
    pub fn new(order: DimOrder) -> Self {
        Self {
            order,
            b: vec![Bucket {
                parent: NONE,
                ..Bucket::default()
            }],
            spare: Vec::new(),
            leaf_of: Vec::new(),
            leaves: HashMap::default(),
        }
    }

    pub fn order(&self) -> DimOrder {
        self.order
    }

    /// Number of live buckets (for tests and reports).
    pub fn buckets(&self) -> usize {
        self.b.len() - self.spare.len()
    }

    /// Adds a node at canonical coordinate `canonical`.
    pub fn add(&mut self, slot: u32, id: NodeId, canonical: &Key, class: ClassId) {
        let key = self.order.permute(canonical);
        let leaf = match self.leaves.get(&key) {
            Some(l) => *l,
            None => self.make_path(&key),
        };
        let nodes = &mut self.b[leaf as usize].nodes;
        let at = nodes.partition_point(|e| leaf_order(e) < (class, Reverse(id)));
        nodes.insert(at, (id, slot, class));
        let s = slot as usize;
        if self.leaf_of.len() <= s {
            self.leaf_of.resize(s + 1, NONE);
        }
        self.leaf_of[s] = leaf;
        let cbit = bit(class);
        let mut x = leaf;
        while x != NONE {
            let bk = &mut self.b[x as usize];
            bk.count += 1;
            for (h, k) in bk.hi.iter_mut().zip(key.iter()) {
                *h = (*h).max(*k);
            }
            bk.mask |= cbit;
            x = bk.parent;
        }
    }

    /// Removes a node (of class `class`); returns whether it was there.
    pub fn remove(&mut self, slot: u32, id: NodeId, class: ClassId) -> bool {
        let leaf = match self.leaf_of.get(slot as usize) {
            Some(l) if *l != NONE => *l,
            _ => return false,
        };
        self.leaf_of[slot as usize] = NONE;
        let nodes = &mut self.b[leaf as usize].nodes;
        if let Ok(at) = nodes.binary_search_by_key(&(class, Reverse(id)), leaf_order) {
            nodes.remove(at);
        }
        let mut x = leaf;
        while x != NONE {
            let parent = self.b[x as usize].parent;
            let bk = &mut self.b[x as usize];
            bk.count -= 1;
            if bk.count == 0 && x != ROOT {
                self.unlink(x);
            }
            x = parent;
        }
        true
    }

    /// Creates the missing buckets on the path to the leaf at `key`.
    fn make_path(&mut self, key: &Key) -> u32 {
        let mut x = ROOT;
        for (level, c) in key.iter().enumerate() {
            let bk = &self.b[x as usize];
            x = match bk.coords.binary_search(c) {
                Ok(i) => bk.kids[i],
                Err(i) => {
                    let child = self.alloc(x, *c, level as u8 + 1);
                    let bk = &mut self.b[x as usize];
                    bk.coords.insert(i, *c);
                    bk.kids.insert(i, child);
                    child
                }
            };
        }
        // A leaf's coordinate bound is exact: every node in it has this coordinate.
        self.b[x as usize].hi = *key;
        self.leaves.insert(*key, x);
        x
    }

    fn alloc(&mut self, parent: u32, coord: u64, depth: u8) -> u32 {
        let fresh = Bucket {
            parent,
            depth,
            coord,
            ..Bucket::default()
        };
        match self.spare.pop() {
            Some(i) => {
                let bk = &mut self.b[i as usize];
                bk.parent = parent;
                bk.depth = depth;
                bk.coord = coord;
                bk.count = 0;
                bk.hi = [0; DIMS];
                bk.mask = 0;
                // Vectors keep their capacity for the next use.
                bk.coords.clear();
                bk.kids.clear();
                i
            }
            None => {
                self.b.push(fresh);
                (self.b.len() - 1) as u32
            }
        }
    }

    /// Detaches an emptied bucket from its parent and recycles it.
    fn unlink(&mut self, x: u32) {
        let (parent, coord) = (self.b[x as usize].parent, self.b[x as usize].coord);
        if self.b[x as usize].depth as usize == DIMS {
            let key = self.b[x as usize].hi;
            self.leaves.remove(&key);
        }
        let p = &mut self.b[parent as usize];
        if let Ok(i) = p.coords.binary_search(&coord) {
            p.coords.remove(i);
            p.kids.remove(i);
        }
        self.b[x as usize].parent = NONE;
        self.spare.push(x);
    }

    /// The first fitting node in the search's direction, strictly after `s.after`.
    /// `fits(slot, id)` is the exact leaf check (and the locality filter).
    pub fn first<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<Pos> {
        let tight = s.after.is_some();
        self.dfs(ROOT, 0, tight, s, fits)
            .map(|(node, level_key)| Pos {
                key: level_key,
                node,
            })
    }

    /// Whether bucket `x` (at depth `depth`, i.e. fixing levels `< depth`) may hold a fit.
    #[inline]
    fn viable(&self, x: u32, depth: usize, s: &Search<'_>) -> bool {
        let bk = &self.b[x as usize];
        bk.count > 0 && bk.mask & s.elig.mask != 0 && (depth..DIMS).all(|l| bk.hi[l] >= s.task[l])
    }

    /// Depth-first walk of bucket `x`, whose children sit on level `depth`. `tight` means
    /// every level above matched `s.after` exactly, so this level starts at the resume point.
    fn dfs<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        x: u32,
        depth: usize,
        tight: bool,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<(NodeId, Key)> {
        if depth == DIMS {
            return self.leaf_level(x, tight, s, fits);
        }
        let lo = s.task[depth];
        let resume = s.after.map(|a| a.key[depth]);
        let n = self.b[x as usize].coords.len();
        let found = match s.dir {
            Dir::Asc => {
                let start = match (tight, resume) {
                    (true, Some(r)) => lo.max(r),
                    _ => lo,
                };
                let mut i = self.b[x as usize].coords.partition_point(|c| *c < start);
                let mut found = None;
                while i < n {
                    let (c, kid) = (self.b[x as usize].coords[i], self.b[x as usize].kids[i]);
                    i += 1;
                    if !self.viable(kid, depth + 1, s) {
                        continue;
                    }
                    let kid_tight = tight && Some(c) == resume;
                    if let Some(hit) = self.dfs(kid, depth + 1, kid_tight, s, fits) {
                        found = Some(hit);
                        break;
                    }
                }
                found
            }
            Dir::Desc => {
                let top = match (tight, resume) {
                    (true, Some(r)) => r,
                    _ => u64::MAX,
                };
                let mut i = self.b[x as usize].coords.partition_point(|c| *c <= top);
                let mut found = None;
                while i > 0 {
                    i -= 1;
                    let (c, kid) = (self.b[x as usize].coords[i], self.b[x as usize].kids[i]);
                    if c < lo {
                        break;
                    }
                    if !self.viable(kid, depth + 1, s) {
                        continue;
                    }
                    let kid_tight = tight && Some(c) == resume;
                    if let Some(hit) = self.dfs(kid, depth + 1, kid_tight, s, fits) {
                        found = Some(hit);
                        break;
                    }
                }
                found
            }
        };
        if found.is_none() && x != ROOT {
            self.tighten(x, depth);
        }
        found
    }

    /// A leaf: its nodes share the coordinate, so the answer is its lowest fitting node id
    /// of an eligible class (after the resume id when tight).
    fn leaf_level<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        x: u32,
        tight: bool,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<(NodeId, Key)> {
        let bk = &self.b[x as usize];
        let resume = match (tight, s.after) {
            (true, Some(a)) => Some(a.node),
            _ => None,
        };
        let nodes = &bk.nodes;
        let mut best: Option<NodeId> = None;
        let mut i = 0;
        while i < nodes.len() {
            let class = nodes[i].2;
            let end = i + nodes[i..].partition_point(|e| e.2 == class);
            if s.elig.allows(class) {
                // Ids descend within the run: those after the resume point come first.
                let run = &nodes[i..end];
                let stop = resume.map_or(run.len(), |r| run.partition_point(|e| e.0 > r));
                for (id, slot, _) in run[..stop].iter().rev() {
                    if best.is_some_and(|b| *id >= b) {
                        break;
                    }
                    if fits(*slot, *id) {
                        best = Some(*id);
                        break;
                    }
                }
            }
            i = end;
        }
        let hit = best.map(|id| (id, bk.hi));
        if hit.is_none() && !tight {
            self.tighten(x, DIMS);
        }
        hit
    }

    /// Recomputes bucket `x`'s bounds from its children (they are upper bounds themselves,
    /// so the result is one too, and at least as tight).
    fn tighten(&mut self, x: u32, depth: usize) {
        let bk = &self.b[x as usize];
        let mut hi = bk.hi;
        let mut mask = 0u64;
        if depth < DIMS {
            for h in hi.iter_mut().skip(depth) {
                *h = 0;
            }
            if let Some(last) = bk.coords.last() {
                hi[depth] = *last;
            }
            for kid in &bk.kids {
                let k = &self.b[*kid as usize];
                for (h, kh) in hi.iter_mut().zip(k.hi.iter()).skip(depth + 1) {
                    *h = (*h).max(*kh);
                }
                mask |= k.mask;
            }
        } else {
            for (_, _, c) in &bk.nodes {
                mask |= bit(*c);
            }
        }
        let bk = &mut self.b[x as usize];
        bk.hi = hi;
        bk.mask = mask;
    }
}
