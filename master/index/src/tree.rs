//! The bucket tree of docs/DESIGN.md §S4.2 for one dimension order, with the levels below the
//! first folded into sorted, chunked vectors.
//!
//! The root's children fix the order's first coordinate (`(x0,*,*,*)`): a sorted vector of
//! coordinates and their buckets. A bucket holds its nodes as entries (rest of the
//! coordinate `(x1,x2,x3)`, class, id, slot), sorted by (coordinate, class, id), in chunks
//! of at most [`CHUNK`] entries. The nodes of one exact coordinate — a leaf of the
//! original design — are a run of consecutive entries (usually one at θ = 1; thousands for
//! the untouched nodes of one shape), possibly spanning chunks.
//!
//! Why: with θ = 1 a node's exact free vector is rarely shared, so every commit and release
//! used to create and empty a chain of two or three buckets (hash lookup of the leaf, child
//! vectors, parent walks, a leaf vector behind one more pointer). Now a move is a binary
//! search of the root, one of the bucket's chunks and one inside a chunk, and a shift of
//! at most [`CHUNK`] entries; no allocation (emptied chunks keep their vectors for reuse).
//! Chunks bound the shift because policies concentrate nodes on few first coordinates
//! (LeastFit levels the CPU: at 10k nodes, ~64 buckets of ~150 nodes).
//!
//! Pruning: each first-level bucket and each chunk keeps an upper bound of the
//! coordinates (`hi`) and of the node classes (`mask`, the categorical attributes of
//! `class.rs`) below it. Adding a node raises them; removing one marks them loose (still
//! upper bounds, so pruning stays correct) and a search that comes back empty from a loose
//! bucket recomputes the bounds of the chunks it looked into and of the bucket — the
//! looseness is paid for once, by the search that ran into it, instead of by every removal.
//!
//! A search walks the root's coordinates from the fit region's edge, skips buckets and
//! chunks by their bounds, and inside a bucket starts at the binary-searched edge of the
//! fit region on the second level. A run (one exact coordinate) is answered as a whole: its
//! lowest fitting id of an eligible class (ineligible classes skipped by binary search).

use super::class::{bit, ClassId, Eligible};
use super::coord::{DimOrder, Key, DIMS};
use super::policy::{Dir, Pos};
use hetsched_common::NodeId;
use std::hash::{BuildHasherDefault, Hasher};

/// Levels below the first, folded into a bucket's entries.
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

/// Most entries one chunk of a bucket holds: a chunk is split in two when it grows past
/// this, so adding or removing a node shifts at most this many. (Policies concentrate the
/// nodes on few first coordinates — LeastFit levels the CPU — and the fresh nodes of one
/// shape share a coordinate, so one bucket may hold thousands of nodes.)
const CHUNK: usize = 32;

/// One node in its bucket: the rest of its coordinate, its id, slot and class.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    rest: Rest,
    id: NodeId,
    slot: u32,
    class: ClassId,
}

/// The order of a bucket's entries: coordinate, then class (so that a search skips an
/// ineligible class of nodes sharing a coordinate in one step), then id.
type SortKey = (u64, u64, u64, ClassId, NodeId);

#[inline]
fn sort_key(e: &Entry) -> SortKey {
    (e.rest[0], e.rest[1], e.rest[2], e.class, e.id)
}

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
    /// The nodes, in [`SortKey`] order, in chunks.
    chunks: Vec<Chunk>,
}

impl Bucket {
    /// A search let in by loose bounds found nothing: tighten the chunks it looked into
    /// (`scanned`, a bit per chunk, the first 64), and the bucket from its chunks.
    fn tighten_scanned(&mut self, scanned: u64) {
        let mut hi = [0; REST];
        let mut mask = 0u64;
        for (ci, c) in self.chunks.iter_mut().enumerate() {
            if c.loose && ci < 64 && scanned & (1 << ci) != 0 {
                c.tighten();
            }
            for (h, r) in hi.iter_mut().zip(c.hi.iter()) {
                *h = (*h).max(*r);
            }
            mask |= c.mask;
        }
        self.hi = hi;
        self.mask = mask;
        self.loose = false;
    }
}

/// A run of at most [`CHUNK`] consecutive entries of a bucket, with bounds for pruning.
#[derive(Clone, Debug, Default)]
struct Chunk {
    /// Upper bound of the class bits of the entries.
    mask: u64,
    /// Upper bound of the entries' coordinates.
    hi: Rest,
    /// Whether `mask` / `hi` may be loose (an entry left).
    loose: bool,
    /// A copy of the first entry (chunks are found by it).
    first: Entry,
    /// In [`SortKey`] order, never empty.
    entries: Vec<Entry>,
}

impl Chunk {
    fn tighten(&mut self) {
        let mut hi = [0; REST];
        let mut mask = 0u64;
        for e in &self.entries {
            for (h, r) in hi.iter_mut().zip(e.rest.iter()) {
                *h = (*h).max(*r);
            }
            mask |= bit(e.class);
        }
        self.hi = hi;
        self.mask = mask;
        self.loose = false;
    }

    /// Whether the chunk may hold a node of an eligible class at or above the task on the
    /// levels below the first.
    #[inline]
    fn viable(&self, t: &Key, emask: u64) -> bool {
        self.mask & emask != 0 && self.hi[0] >= t[1] && self.hi[1] >= t[2] && self.hi[2] >= t[3]
    }
}

/// A place in a bucket: (chunk, entry) indices; `(chunks.len(), 0)` is the end.
type At = (usize, usize);

/// The first place in `chunks` whose entry is not `before` (`before` must hold for a
/// prefix of the entries).
#[inline]
fn seek(chunks: &[Chunk], before: impl Fn(&Entry) -> bool) -> At {
    let ci = chunks.partition_point(|c| before(&c.first));
    if ci > 0 {
        let c = &chunks[ci - 1];
        let gi = c.entries.partition_point(&before);
        if gi < c.entries.len() {
            return (ci - 1, gi);
        }
    }
    (ci, 0)
}

/// The entry at `at`, moving `at` past the end of a chunk first.
#[inline]
fn entry_at<'c>(chunks: &'c [Chunk], at: &mut At) -> Option<&'c Entry> {
    loop {
        let c = chunks.get(at.0)?;
        if let Some(e) = c.entries.get(at.1) {
            return Some(e);
        }
        *at = (at.0 + 1, 0);
    }
}

/// The entry just before `at`, moving `at` onto it.
#[inline]
fn step_back<'c>(chunks: &'c [Chunk], at: &mut At) -> Option<&'c Entry> {
    while at.1 == 0 {
        if at.0 == 0 {
            return None;
        }
        at.0 -= 1;
        at.1 = chunks[at.0].entries.len();
    }
    at.1 -= 1;
    Some(&chunks[at.0].entries[at.1])
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
    /// Entry vectors of dropped chunks, kept for their capacity.
    spare_v: Vec<Vec<Entry>>,
}

impl Tree {
    pub fn new(order: DimOrder) -> Self {
        Self {
            order,
            coords: Vec::new(),
            kids: Vec::new(),
            b: Vec::new(),
            spare_b: Vec::new(),
            spare_v: Vec::new(),
        }
    }

    pub fn order(&self) -> DimOrder {
        self.order
    }

    /// Number of live buckets: the root, the first-level buckets and one per distinct
    /// coordinate (O(|N|): for tests and reports).
    pub fn buckets(&self) -> usize {
        let coordinates: usize = self
            .kids
            .iter()
            .map(|x| {
                let mut last = None;
                let mut n = 0;
                for c in &self.b[*x as usize].chunks {
                    for e in &c.entries {
                        if last != Some(e.rest) {
                            n += 1;
                            last = Some(e.rest);
                        }
                    }
                }
                n
            })
            .sum();
        1 + self.kids.len() + coordinates
    }

    /// Adds a node at canonical coordinate `canonical`.
    pub fn add(&mut self, slot: u32, id: NodeId, canonical: &Key, class: ClassId) {
        let key = self.order.permute(canonical);
        let e = Entry {
            rest: rest_of(&key),
            id,
            slot,
            class,
        };
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
        let bk = &mut self.b[x as usize];
        bk.count += 1;
        bk.mask |= cbit;
        for (h, k) in bk.hi.iter_mut().zip(e.rest.iter()) {
            *h = (*h).max(*k);
        }
        if bk.chunks.is_empty() {
            let mut v = self.spare_v.pop().unwrap_or_default();
            v.push(e);
            bk.chunks.push(Chunk {
                mask: cbit,
                hi: e.rest,
                loose: false,
                first: e,
                entries: v,
            });
            return;
        }
        let k = sort_key(&e);
        let ci = bk
            .chunks
            .partition_point(|c| sort_key(&c.first) <= k)
            .saturating_sub(1);
        let c = &mut bk.chunks[ci];
        let at = c.entries.partition_point(|x| sort_key(x) < k);
        c.entries.insert(at, e);
        if at == 0 {
            c.first = e;
        }
        c.mask |= cbit;
        for (h, r) in c.hi.iter_mut().zip(e.rest.iter()) {
            *h = (*h).max(*r);
        }
        if c.entries.len() > CHUNK {
            let mut right = self.spare_v.pop().unwrap_or_default();
            let half = c.entries.len() / 2;
            right.extend_from_slice(&c.entries[half..]);
            c.entries.truncate(half);
            c.tighten();
            let mut r = Chunk {
                first: right[0],
                entries: right,
                ..Chunk::default()
            };
            r.tighten();
            bk.chunks.insert(ci + 1, r);
        }
    }

    /// Removes a node (of class `class`, added at canonical coordinate `canonical`);
    /// returns whether it was there.
    pub fn remove(&mut self, slot: u32, id: NodeId, canonical: &Key, class: ClassId) -> bool {
        let key = self.order.permute(canonical);
        let Ok(i) = self.coords.binary_search(&key[0]) else {
            return false;
        };
        let x = self.kids[i];
        let k = (key[1], key[2], key[3], class, id);
        let bk = &mut self.b[x as usize];
        let (ci, gi) = seek(&bk.chunks, |e| sort_key(e) < k);
        let Some(c) = bk.chunks.get_mut(ci) else {
            return false;
        };
        if c.entries
            .get(gi)
            .is_none_or(|e| sort_key(e) != k || e.slot != slot)
        {
            return false;
        }
        c.entries.remove(gi);
        c.loose = true;
        if c.entries.is_empty() {
            let v = std::mem::take(&mut c.entries);
            bk.chunks.remove(ci);
            self.spare_v.push(v);
        } else if gi == 0 {
            c.first = c.entries[0];
        }
        bk.count -= 1;
        bk.loose = true;
        if bk.count == 0 {
            self.coords.remove(i);
            self.kids.remove(i);
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

    /// The first fit among bucket `x`'s nodes; `tight` is the resume point when the bucket
    /// is the resume place's own.
    fn in_bucket<F: FnMut(u32, NodeId) -> bool>(
        &mut self,
        x: u32,
        tight: Option<Resume>,
        s: &Search<'_>,
        fits: &mut F,
    ) -> Option<Pos> {
        let chunks = &self.b[x as usize].chunks[..];
        let (hit, scanned) = match s.dir {
            Dir::Asc => scan_ascending(chunks, tight, s, fits),
            Dir::Desc => scan_descending(chunks, tight, s, fits),
        };
        let bk = &mut self.b[x as usize];
        match hit {
            Some((node, rest)) => Some(Pos {
                key: full_key(bk.coord, &rest),
                node,
            }),
            None => {
                if bk.loose && scanned != 0 {
                    bk.tighten_scanned(scanned);
                }
                None
            }
        }
    }
}

/// Whether `rest` is in the fit region of `s`'s task (the first level is the walk's bound).
#[inline]
fn in_region(s: &Search<'_>, rest: &Rest) -> bool {
    rest[1] >= s.task[2] && rest[2] >= s.task[3]
}

/// `in_bucket`'s walk upwards: the first fitting node of the chunks at or after the resume
/// place, and the chunks it looked at (the first 64, as a bit set).
#[inline]
fn scan_ascending<F: FnMut(u32, NodeId) -> bool>(
    chunks: &[Chunk],
    tight: Option<Resume>,
    s: &Search<'_>,
    fits: &mut F,
) -> (Option<(NodeId, Rest)>, u64) {
    let t = &s.task;
    let emask = s.elig.mask;
    let mut scanned = 0u64;
    // Entries before `low` are below the task on the second level, or not after the
    // resume place.
    let mut low: Rest = [t[1], 0, 0];
    if let Some((r, _)) = tight {
        low = low.max(r);
    }
    let mut at = seek(chunks, |e| e.rest < low);
    while let Some(e) = entry_at(chunks, &mut at) {
        if at.1 == 0 && !chunks[at.0].viable(t, emask) {
            at = (at.0 + 1, 0);
            continue;
        }
        scanned |= 1u64.checked_shl(at.0 as u32).unwrap_or(0);
        let rest = e.rest;
        if !in_region(s, &rest) {
            // Outside the fit region: so is the rest of its run, entry by entry.
            at.1 += 1;
            continue;
        }
        let resume = tight.filter(|r| r.0 == rest).map(|r| r.1);
        let (best, end) = run_best(chunks, at, s, resume, fits);
        if let Some(id) = best {
            return (Some((id, rest)), scanned);
        }
        at = end;
    }
    (None, scanned)
}

/// `in_bucket`'s walk downwards: as [`scan_ascending`], from the resume place or the end.
#[inline]
fn scan_descending<F: FnMut(u32, NodeId) -> bool>(
    chunks: &[Chunk],
    tight: Option<Resume>,
    s: &Search<'_>,
    fits: &mut F,
) -> (Option<(NodeId, Rest)>, u64) {
    let t = &s.task;
    let emask = s.elig.mask;
    let mut scanned = 0u64;
    let mut at = match tight {
        Some((r, _)) => seek(chunks, |e| e.rest <= r),
        None => (chunks.len(), 0),
    };
    loop {
        if at.1 == 0 {
            // Entering the chunk before from its end.
            let Some(c) = at.0.checked_sub(1).map(|ci| &chunks[ci]) else {
                break;
            };
            if c.hi[0] < t[1] {
                // Every entry here and before is below the task's second level.
                break;
            }
            if !c.viable(t, emask) {
                at = (at.0 - 1, 0);
                continue;
            }
        }
        let Some(e) = step_back(chunks, &mut at) else {
            break;
        };
        if e.rest[0] < t[1] {
            break;
        }
        scanned |= 1u64.checked_shl(at.0 as u32).unwrap_or(0);
        let rest = e.rest;
        if !in_region(s, &rest) {
            continue;
        }
        let start = run_start(chunks, at);
        let resume = tight.filter(|r| r.0 == rest).map(|r| r.1);
        if let (Some(id), _) = run_best(chunks, start, s, resume, fits) {
            return (Some((id, rest)), scanned);
        }
        at = start;
    }
    (None, scanned)
}

/// The first place of the run of entries sharing the coordinate of the entry at `at`.
#[inline]
fn run_start(chunks: &[Chunk], at: At) -> At {
    let rest = chunks[at.0].entries[at.1].rest;
    let mut prev = at;
    match step_back(chunks, &mut prev) {
        Some(e) if e.rest == rest => seek(chunks, |e| e.rest < rest),
        _ => at,
    }
}

/// The run of nodes sharing one coordinate, starting at `at`: its lowest fitting node id of
/// an eligible class (after `resume` when given), and the place after the run.
fn run_best<F: FnMut(u32, NodeId) -> bool>(
    chunks: &[Chunk],
    mut at: At,
    s: &Search<'_>,
    resume: Option<NodeId>,
    fits: &mut F,
) -> (Option<NodeId>, At) {
    let Some(first) = entry_at(chunks, &mut at) else {
        return (None, at);
    };
    let rest = first.rest;
    let mut next = (at.0, at.1 + 1);
    if entry_at(chunks, &mut next).is_none_or(|e| e.rest != rest) {
        // The common case at θ = 1: a run of one node.
        let ok = s.elig.allows(first.class)
            && resume.is_none_or(|r| first.id > r)
            && fits(first.slot, first.id);
        return (ok.then_some(first.id), next);
    }
    let mut best: Option<NodeId> = None;
    while let Some(e) = entry_at(chunks, &mut at) {
        if e.rest != rest {
            break;
        }
        let class = e.class;
        let mut done = !s.elig.allows(class);
        if !done {
            if let Some(r) = resume {
                if e.id <= r {
                    at = seek(chunks, |x| {
                        sort_key(x) <= (rest[0], rest[1], rest[2], class, r)
                    });
                }
            }
        }
        // Ids ascend within the class: the first that fits is the class's best.
        while !done {
            match entry_at(chunks, &mut at) {
                Some(e) if e.rest == rest && e.class == class => {
                    if best.is_some_and(|b| e.id >= b) {
                        done = true;
                    } else if fits(e.slot, e.id) {
                        best = Some(e.id);
                        done = true;
                    } else {
                        at.1 += 1;
                    }
                }
                _ => break,
            }
        }
        // Past the rest of this class.
        let mut next = at;
        match entry_at(chunks, &mut next) {
            Some(e) if e.rest == rest && e.class == class => {
                let mut one = (next.0, next.1 + 1);
                at = match entry_at(chunks, &mut one) {
                    Some(e2) if e2.rest == rest && e2.class == class => {
                        seek(chunks, |x| (x.rest, x.class) <= (rest, class))
                    }
                    _ => one,
                };
            }
            _ => at = next,
        }
    }
    (best, at)
}
