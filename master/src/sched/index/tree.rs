//! The bucket tree of SEEDS.md §S4.2 for one dimension order, with its last levels folded
//! into sorted vectors.
//!
//! The root's children fix the order's first coordinate (`(x0,*,*,*)`): a sorted vector of
//! coordinates and their buckets. Each such bucket holds its *groups* — one per distinct
//! remaining coordinate `(x1,x2,x3)` — as one sorted vector, and each group points to its
//! leaf, the nodes of exactly that coordinate as (id, slot, class). The levels below the
//! first are not separate buckets: with θ = 1 a node's exact free vector is rarely shared,
//! so every commit and release used to create and empty a chain of two or three buckets
//! (hash lookups, child vectors, parent walks); now a move is two binary searches and a
//! shift in a short vector, and a search walks a bucket's groups as one contiguous array,
//! starting at its binary-searched fit region on the second dimension.
//!
//! A first-level bucket keeps an upper bound of the coordinates (`hi`) and of the node
//! classes (`mask`, the categorical attributes of `class.rs`) below it. Adding a node raises
//! them; removing one marks them loose (still upper bounds, so pruning stays correct) and a
//! search that comes back empty from a loose bucket recomputes them from its groups. A
//! group's class mask is exact (a leaf is sorted by class, so whether a removed node was the
//! last of its class is a look at its neighbours).
//!
//! Costs: adding a node is a binary search of the first coordinate, one of the group, and
//! an insertion into the leaf; removing one is the leaf removal. Creating or emptying a
//! group shifts its bucket's group vector (bounded by the distinct coordinates sharing the
//! first one, not by the number of nodes); creating or emptying a first-level bucket shifts
//! the root's. A leaf's nodes are a sorted vector (an insertion shifts the leaf's other
//! nodes: few when θ = 1, where a leaf holds the nodes of exactly equal availability).

use super::class::{bit, ClassId, Eligible};
use super::coord::{DimOrder, Key, DIMS};
use super::policy::{Dir, Pos};
use hetsched_common::NodeId;
use std::cmp::Reverse;
use std::hash::{BuildHasherDefault, Hasher};

const NONE: u32 = u32::MAX;

/// Levels below the first, folded into a bucket's groups.
const REST: usize = DIMS - 1;

/// A coordinate without its first level.
type Rest = [u64; REST];

#[inline]
fn rest_of(key: &Key) -> Rest {
    [key[1], key[2], key[3]]
}

#[inline]
fn full_key(first: u64, rest: &Rest) -> Key {
    [first, rest[0], rest[1], rest[2]]
}

/// Sort key of a leaf entry: class ascending, then id descending.
#[inline]
fn leaf_order(e: &(NodeId, u32, ClassId)) -> (ClassId, Reverse<NodeId>) {
    (e.2, Reverse(e.0))
}

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

/// Most groups one chunk of a bucket holds: a chunk is split in two when it grows past this,
/// so creating or emptying a group shifts at most this many. (Policies concentrate the
/// nodes on few first coordinates — LeastFit levels the CPU — so one bucket may hold
/// hundreds of groups.)
const CHUNK: usize = 32;

/// A first-level bucket: every node whose first coordinate is `coord`. The fields a search
/// reads to decide whether to enter it (mask, hi) come first.
#[derive(Clone, Debug, Default)]
struct Bucket {
    /// Upper bound of the class bits below.
    mask: u64,
    /// Upper bound of the remaining coordinates below.
    hi: Rest,
    /// Nodes below.
    count: u32,
    /// Whether `mask` / `hi` may be looser than the chunks' (a node left since the last
    /// recomputation).
    loose: bool,
    /// This bucket's first coordinate.
    coord: u64,
    /// The groups — one per distinct remaining coordinate — ascending, in chunks.
    chunks: Vec<Chunk>,
}

/// A run of at most [`CHUNK`] consecutive groups of a bucket, with bounds for pruning.
#[derive(Clone, Debug, Default)]
struct Chunk {
    /// Upper bound of the class bits of the groups.
    mask: u64,
    /// Upper bound of the groups' coordinates.
    hi: Rest,
    /// Whether `mask` / `hi` may be loose (a group left or lost a class).
    loose: bool,
    /// The first group's coordinate (exact: chunks are found by it).
    first: Rest,
    /// Ascending, never empty.
    groups: Vec<Group>,
}

impl Chunk {
    fn tighten(&mut self) {
        let mut hi = [0; REST];
        let mut mask = 0u64;
        for g in &self.groups {
            for (h, r) in hi.iter_mut().zip(g.rest.iter()) {
                *h = (*h).max(*r);
            }
            mask |= g.mask;
        }
        self.hi = hi;
        self.mask = mask;
        self.loose = false;
    }

    /// Whether the chunk may hold a group of an eligible class at or above the task on the
    /// levels below the second (the second is bounded by the walk itself).
    #[inline]
    fn viable(&self, t: &Key, emask: u64) -> bool {
        self.mask & emask != 0 && self.hi[0] >= t[1] && self.hi[1] >= t[2] && self.hi[2] >= t[3]
    }
}

/// The nodes of one exact coordinate, as its bucket sees them.
#[derive(Clone, Copy, Debug)]
struct Group {
    rest: Rest,
    /// The class bits of the leaf's nodes (exact).
    mask: u64,
    /// Index of the leaf.
    leaf: u32,
}

/// The nodes of one exact coordinate.
#[derive(Clone, Debug, Default)]
struct Leaf {
    /// The first-level bucket holding this leaf's group.
    bucket: u32,
    rest: Rest,
    /// (node id, slot, class), grouped by class ascending and, within a class, by id
    /// *descending*. Every policy takes the lowest id first, so it sits at the end of its
    /// run and leaves by a pop rather than by shifting the whole leaf (the fresh nodes of
    /// one shape share a leaf, thousands of them). Grouping by class lets a search skip the
    /// ineligible classes of a leaf in one step. A sorted vector rather than a B-tree: with
    /// θ = 1 most leaves hold a handful of nodes, and the vector keeps its capacity when the
    /// leaf is recycled, so moving a node costs no allocation.
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

/// Where a search resumes inside one first-level bucket: the rest of the resume place's
/// coordinate and its node.
type Resume = (Rest, NodeId);

/// The bucket tree for one dimension order.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    order: DimOrder,
    /// The root's children: first coordinates ascending, and their buckets.
    coords: Vec<u64>,
    kids: Vec<u32>,
    b: Vec<Bucket>,
    spare_b: Vec<u32>,
    l: Vec<Leaf>,
    spare_l: Vec<u32>,
    /// Group vectors of dropped chunks, kept for their capacity.
    spare_v: Vec<Vec<Group>>,
    /// Slot → its leaf (NONE when absent).
    leaf_of: Vec<u32>,
}

/// Index of the chunk that holds, or would hold, a group at `rest` (the last whose first
/// group is not after it; the first chunk when there is none).
#[inline]
fn chunk_of(chunks: &[Chunk], rest: &Rest) -> usize {
    chunks
        .partition_point(|c| c.first <= *rest)
        .saturating_sub(1)
}

impl Tree {
    pub fn new(order: DimOrder) -> Self {
        Self {
            order,
            coords: Vec::new(),
            kids: Vec::new(),
            b: Vec::new(),
            spare_b: Vec::new(),
            l: Vec::new(),
            spare_l: Vec::new(),
            spare_v: Vec::new(),
            leaf_of: Vec::new(),
        }
    }

    pub fn order(&self) -> DimOrder {
        self.order
    }

    /// Number of live buckets: the root, the first-level buckets and the groups (for tests
    /// and reports).
    pub fn buckets(&self) -> usize {
        1 + (self.b.len() - self.spare_b.len()) + (self.l.len() - self.spare_l.len())
    }

    /// Adds a node at canonical coordinate `canonical`.
    pub fn add(&mut self, slot: u32, id: NodeId, canonical: &Key, class: ClassId) {
        let key = self.order.permute(canonical);
        let rest = rest_of(&key);
        let x = match self.coords.binary_search(&key[0]) {
            Ok(i) => self.kids[i],
            Err(i) => {
                let x = self.alloc_bucket(key[0]);
                self.coords.insert(i, key[0]);
                self.kids.insert(i, x);
                x
            }
        };
        let cbit = bit(class);
        let leaf = self.group_for(x, &rest, cbit);
        let bk = &mut self.b[x as usize];
        bk.count += 1;
        bk.mask |= cbit;
        for (h, k) in bk.hi.iter_mut().zip(rest.iter()) {
            *h = (*h).max(*k);
        }
        let nodes = &mut self.l[leaf as usize].nodes;
        let at = nodes.partition_point(|e| leaf_order(e) < (class, Reverse(id)));
        nodes.insert(at, (id, slot, class));
        let s = slot as usize;
        if self.leaf_of.len() <= s {
            self.leaf_of.resize(s + 1, NONE);
        }
        self.leaf_of[s] = leaf;
    }

    /// The leaf of the group at `rest` in bucket `x`, created if missing, with `cbit` added
    /// to the group's and its chunk's bounds.
    fn group_for(&mut self, x: u32, rest: &Rest, cbit: u64) -> u32 {
        let chunks = &self.b[x as usize].chunks;
        let ci = chunk_of(chunks, rest);
        let found = chunks
            .get(ci)
            .map(|c| c.groups.binary_search_by(|g| g.rest.cmp(rest)));
        let (ci, gi) = match found {
            Some(Ok(gi)) => (ci, gi),
            _ => {
                let leaf = self.alloc_leaf(x, *rest);
                let g = Group {
                    rest: *rest,
                    mask: 0,
                    leaf,
                };
                self.insert_group(x, ci, found.map(|f| f.unwrap_err()), g)
            }
        };
        let c = &mut self.b[x as usize].chunks[ci];
        c.mask |= cbit;
        for (h, k) in c.hi.iter_mut().zip(rest.iter()) {
            *h = (*h).max(*k);
        }
        let g = &mut c.groups[gi];
        g.mask |= cbit;
        g.leaf
    }

    /// Inserts group `g` at `gi` of chunk `ci` (a new chunk when the bucket has none),
    /// splitting the chunk when it grows past [`CHUNK`]; returns where `g` ended up.
    fn insert_group(&mut self, x: u32, ci: usize, gi: Option<usize>, g: Group) -> (usize, usize) {
        let mut fresh = self.spare_v.pop().unwrap_or_default();
        let chunks = &mut self.b[x as usize].chunks;
        let Some(gi) = gi else {
            fresh.push(g);
            chunks.push(Chunk {
                mask: 0,
                hi: g.rest,
                loose: false,
                first: g.rest,
                groups: fresh,
            });
            return (0, 0);
        };
        let c = &mut chunks[ci];
        c.groups.insert(gi, g);
        c.first = c.groups[0].rest;
        if c.groups.len() <= CHUNK {
            self.spare_v.push(fresh);
            return (ci, gi);
        }
        let half = c.groups.len() / 2;
        fresh.extend_from_slice(&c.groups[half..]);
        c.groups.truncate(half);
        c.tighten();
        let mut right = Chunk {
            first: fresh[0].rest,
            groups: fresh,
            ..Chunk::default()
        };
        right.tighten();
        chunks.insert(ci + 1, right);
        if gi < half {
            (ci, gi)
        } else {
            (ci + 1, gi - half)
        }
    }

    /// Removes a node (of class `class`); returns whether it was there.
    pub fn remove(&mut self, slot: u32, id: NodeId, class: ClassId) -> bool {
        let leaf = match self.leaf_of.get(slot as usize) {
            Some(l) if *l != NONE => *l,
            _ => return false,
        };
        self.leaf_of[slot as usize] = NONE;
        let lf = &mut self.l[leaf as usize];
        let nodes = &mut lf.nodes;
        let mut class_gone = false;
        if let Ok(at) = nodes.binary_search_by_key(&(class, Reverse(id)), leaf_order) {
            nodes.remove(at);
            // Runs are grouped by class: the class is still here iff a neighbour has it.
            let before = at > 0 && nodes[at - 1].2 == class;
            let after = at < nodes.len() && nodes[at].2 == class;
            class_gone = !(before || after);
        }
        let (x, rest, empty) = (lf.bucket, lf.rest, nodes.is_empty());
        let mask_now = if class_gone && !empty {
            // Classes past 63 share a bit: recompute rather than clear it.
            nodes.iter().fold(0, |m, e| m | bit(e.2))
        } else {
            0
        };
        let bk = &mut self.b[x as usize];
        bk.count -= 1;
        bk.loose = true;
        if empty || class_gone {
            let ci = chunk_of(&bk.chunks, &rest);
            if let Some(c) = bk.chunks.get_mut(ci) {
                if let Ok(gi) = c.groups.binary_search_by(|g| g.rest.cmp(&rest)) {
                    c.loose = true;
                    if !empty {
                        c.groups[gi].mask = mask_now;
                    } else {
                        c.groups.remove(gi);
                        match c.groups.first() {
                            Some(g) => c.first = g.rest,
                            None => {
                                let v = std::mem::take(&mut c.groups);
                                bk.chunks.remove(ci);
                                self.spare_v.push(v);
                            }
                        }
                    }
                }
            }
            if empty {
                self.spare_l.push(leaf);
            }
        }
        if bk.count == 0 {
            let coord = bk.coord;
            if let Ok(i) = self.coords.binary_search(&coord) {
                self.coords.remove(i);
                self.kids.remove(i);
            }
            self.spare_b.push(x);
        }
        true
    }

    fn alloc_bucket(&mut self, coord: u64) -> u32 {
        match self.spare_b.pop() {
            Some(i) => {
                let bk = &mut self.b[i as usize];
                bk.count = 0;
                bk.loose = false;
                bk.mask = 0;
                bk.hi = [0; REST];
                bk.coord = coord;
                // An emptied bucket has no chunks left; the vector keeps its capacity.
                bk.chunks.clear();
                i
            }
            None => {
                self.b.push(Bucket {
                    coord,
                    ..Bucket::default()
                });
                (self.b.len() - 1) as u32
            }
        }
    }

    fn alloc_leaf(&mut self, bucket: u32, rest: Rest) -> u32 {
        match self.spare_l.pop() {
            Some(i) => {
                let lf = &mut self.l[i as usize];
                lf.bucket = bucket;
                lf.rest = rest;
                lf.nodes.clear();
                i
            }
            None => {
                self.l.push(Leaf {
                    bucket,
                    rest,
                    nodes: Vec::new(),
                });
                (self.l.len() - 1) as u32
            }
        }
    }

    /// Whether first-level bucket `x` may hold a fit.
    #[inline]
    fn viable(&self, x: u32, s: &Search<'_>) -> bool {
        let bk = &self.b[x as usize];
        bk.mask & s.elig.mask != 0
            && bk.hi[0] >= s.task[1]
            && bk.hi[1] >= s.task[2]
            && bk.hi[2] >= s.task[3]
    }

    /// The first fitting node in the search's direction, strictly after `s.after`.
    /// `fits(slot, id)` is the exact leaf check (and the locality filter).
    pub fn first<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<Pos> {
        let lo = s.task[0];
        let resume = s.after.map(|a| (a.key[0], (rest_of(&a.key), a.node)));
        let n = self.coords.len();
        match s.dir {
            Dir::Asc => {
                let start = resume.map_or(lo, |r| lo.max(r.0));
                let mut i = self.coords.partition_point(|c| *c < start);
                while i < n {
                    let (c, kid) = (self.coords[i], self.kids[i]);
                    i += 1;
                    if !self.viable(kid, s) {
                        continue;
                    }
                    let tight = resume.filter(|r| r.0 == c).map(|r| r.1);
                    if let Some(hit) = self.in_bucket(kid, tight, s, fits) {
                        return Some(hit);
                    }
                }
            }
            Dir::Desc => {
                let top = resume.map_or(u64::MAX, |r| r.0);
                let mut i = self.coords.partition_point(|c| *c <= top);
                while i > 0 {
                    i -= 1;
                    let (c, kid) = (self.coords[i], self.kids[i]);
                    if c < lo {
                        break;
                    }
                    if !self.viable(kid, s) {
                        continue;
                    }
                    let tight = resume.filter(|r| r.0 == c).map(|r| r.1);
                    if let Some(hit) = self.in_bucket(kid, tight, s, fits) {
                        return Some(hit);
                    }
                }
            }
        }
        None
    }

    /// The first fit among bucket `x`'s groups; `tight` is the resume point when the bucket
    /// is the resume place's own.
    fn in_bucket<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        x: u32,
        tight: Option<Resume>,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<Pos> {
        let t = &s.task;
        let emask = s.elig.mask;
        // Chunks whose bounds were found loose on the way (tightened below).
        let mut stale: [usize; 4] = [usize::MAX; 4];
        let mut n_stale = 0;
        let mut hit = None;
        {
            let bk = &self.b[x as usize];
            let chunks = &bk.chunks[..];
            let check = |g: &Group, fits: &mut F| -> Option<NodeId> {
                if g.rest[1] < t[2] || g.rest[2] < t[3] || g.mask & emask == 0 {
                    return None;
                }
                let resume = tight.filter(|r| r.0 == g.rest).map(|r| r.1);
                self.leaf_check(g.leaf, resume, s, fits)
            };
            match s.dir {
                Dir::Asc => {
                    // Groups before `low` are below the task on the second level, or not
                    // after the resume place.
                    let mut low: Rest = [t[1], 0, 0];
                    if let Some((r, _)) = tight {
                        low = low.max(r);
                    }
                    'chunks: for (ci, c) in chunks.iter().enumerate().skip(chunk_of(chunks, &low)) {
                        if !c.viable(t, emask) {
                            continue;
                        }
                        let from = c.groups.partition_point(|g| g.rest < low);
                        for g in &c.groups[from..] {
                            if let Some(id) = check(g, fits) {
                                hit = Some((id, g.rest));
                                break 'chunks;
                            }
                        }
                        if c.loose && n_stale < stale.len() {
                            stale[n_stale] = ci;
                            n_stale += 1;
                        }
                    }
                }
                Dir::Desc => {
                    let (end, cut) = match tight {
                        Some((r, _)) => {
                            let ce = chunks.partition_point(|c| c.first <= r);
                            let cut = chunks
                                .get(ce.wrapping_sub(1))
                                .map_or(0, |c| c.groups.partition_point(|g| g.rest <= r));
                            (ce, Some(cut))
                        }
                        None => (chunks.len(), None),
                    };
                    'chunks_d: for (ci, c) in chunks[..end].iter().enumerate().rev() {
                        if c.hi[0] < t[1] {
                            // Every group here and before is below the task's second level.
                            break;
                        }
                        if !c.viable(t, emask) {
                            continue;
                        }
                        let upto = match cut {
                            Some(k) if ci + 1 == end => k,
                            _ => c.groups.len(),
                        };
                        for g in c.groups[..upto].iter().rev() {
                            if g.rest[0] < t[1] {
                                break 'chunks_d;
                            }
                            if let Some(id) = check(g, fits) {
                                hit = Some((id, g.rest));
                                break 'chunks_d;
                            }
                        }
                        if c.loose && n_stale < stale.len() {
                            stale[n_stale] = ci;
                            n_stale += 1;
                        }
                    }
                }
            }
        }
        let bk = &mut self.b[x as usize];
        for ci in &stale[..n_stale] {
            bk.chunks[*ci].tighten();
        }
        match hit {
            Some((node, rest)) => Some(Pos {
                key: full_key(bk.coord, &rest),
                node,
            }),
            None => {
                if bk.loose {
                    let mut hi = [0; REST];
                    let mut mask = 0u64;
                    for c in &bk.chunks {
                        for (h, r) in hi.iter_mut().zip(c.hi.iter()) {
                            *h = (*h).max(*r);
                        }
                        mask |= c.mask;
                    }
                    bk.hi = hi;
                    bk.mask = mask;
                    bk.loose = false;
                }
                None
            }
        }
    }

    /// A leaf: its nodes share the coordinate, so the answer is its lowest fitting node id
    /// of an eligible class (after `resume` when given).
    #[inline]
    fn leaf_check<F: FnMut(u32, NodeId) -> bool>(
        &self,
        leaf: u32,
        resume: Option<NodeId>,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<NodeId> {
        let nodes = &self.l[leaf as usize].nodes[..];
        if let [(id, slot, class)] = nodes {
            // The common case at θ = 1: one node.
            let ok = resume.is_none_or(|r| *id > r) && s.elig.allows(*class) && fits(*slot, *id);
            return ok.then_some(*id);
        }
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
        best
    }
}
