//! Selection policies (docs/DESIGN.md §S4.3), each a small type over one abstraction: the
//! [`FitSpace`] of a query — the nodes that fit it, ordered by (coordinate, node id). The
//! bucket tree and the reference linear scan both implement `FitSpace`, so a policy means the
//! same thing on both by construction; the tests then check that the two spaces agree.
//!
//! Order: ascending is coordinate ascending (lexicographic in the query's dimension order),
//! then node id ascending; descending is coordinate descending, then node id *ascending* —
//! ties always go to the lowest node id, so results are reproducible.

use super::coord::{DimOrder, Key};
use hetsched_common::rng::SplitMix64;
use hetsched_common::NodeId;
use std::cmp::Ordering;

/// Direction of a walk over the fit space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Least available first (BestFit, FirstFit, NextFit).
    Asc,
    /// Most available first (LeastFit).
    Desc,
}

/// A place in the fit space: a node and its coordinate in the query's dimension order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    /// Coordinate (after θ, in the query's dimension order).
    pub key: Key,
    /// The node.
    pub node: NodeId,
}

impl Pos {
    /// Order of two places when walking in `dir`.
    #[inline]
    pub fn cmp_in(&self, other: &Pos, dir: Dir) -> Ordering {
        let by_key = match dir {
            Dir::Asc => self.key.cmp(&other.key),
            Dir::Desc => other.key.cmp(&self.key),
        };
        by_key.then(self.node.cmp(&other.node))
    }

    /// Whether `self` comes strictly after `bound` in `dir`.
    #[inline]
    pub fn is_after(&self, bound: &Pos, dir: Dir) -> bool {
        self.cmp_in(bound, dir) == Ordering::Greater
    }
}

/// The earlier of two optional places in `dir`.
pub(crate) fn earlier(a: Option<Pos>, b: Option<Pos>, dir: Dir) -> Option<Pos> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.cmp_in(&x, dir) == Ordering::Less {
            y
        } else {
            x
        }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// One uniformly drawn node of a query's universe (its candidates, else every node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draw {
    /// The universe is empty.
    Empty,
    /// The drawn node fits.
    Hit(Pos),
    /// The drawn node does not fit; its place when it is known.
    Miss(Option<Pos>),
}

/// The nodes that fit one query, in (coordinate, node id) order.
pub trait FitSpace {
    /// The dimension order of this query's coordinates.
    fn order(&self) -> DimOrder;
    /// The first fitting node in `dir`, strictly after `after` when given.
    fn first(&mut self, dir: Dir, after: Option<&Pos>) -> Option<Pos>;
    /// Draws one node of the universe uniformly.
    fn draw(&mut self, rng: &mut SplitMix64) -> Draw;
}

/// A selection policy: picks one place of a fit space.
pub trait Policy {
    /// The chosen node, or `None` when nothing fits.
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos>;
}

/// The most available fitting node (load balancing).
#[derive(Clone, Copy, Debug, Default)]
pub struct LeastFit;

impl Policy for LeastFit {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        space.first(Dir::Desc, None)
    }
}

/// The least available fitting node (packing).
#[derive(Clone, Copy, Debug, Default)]
pub struct BestFit;

impl Policy for BestFit {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        space.first(Dir::Asc, None)
    }
}

/// The first fitting node in the index's iteration order, (coordinate, node id) ascending.
/// Over this index that is the same node as [`BestFit`]: the iteration order *is* ascending
/// availability. It stays a type of its own because the spec names it and because
/// [`NextFit`] is FirstFit with a cursor.
#[derive(Clone, Copy, Debug, Default)]
pub struct FirstFit;

impl Policy for FirstFit {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        space.first(Dir::Asc, None)
    }
}

/// FirstFit resuming after the place it chose last time, wrapping around at the end.
///
/// The cursor is kept in canonical dimension order so that queries with different
/// dimension orders can share one NextFit; it is a *place* (coordinate and id), not a node,
/// so the chosen node moving after its allocation does not move the cursor.
#[derive(Clone, Debug, Default)]
pub struct NextFit {
    cursor: Option<(Key, NodeId)>,
}

impl Policy for NextFit {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        let order = space.order();
        let after = self.cursor.map(|(k, node)| Pos {
            key: order.permute(&k),
            node,
        });
        let hit = match after {
            Some(a) => space
                .first(Dir::Asc, Some(&a))
                .or_else(|| space.first(Dir::Asc, None)),
            None => space.first(Dir::Asc, None),
        };
        if let Some(p) = hit {
            self.cursor = Some((order.unpermute(&p.key), p.node));
        }
        hit
    }
}

/// A random fitting node, seeded. Draws up to `TRIES` nodes uniformly from the universe
/// and takes the first that fits (uniform among fits when they are not rare); otherwise
/// takes the first fit after the last drawn place, wrapping around — so it finds a node
/// whenever one fits, at the cost of one ordered search.
#[derive(Clone, Debug)]
pub struct Random {
    rng: SplitMix64,
}

impl Random {
    /// Draws per selection before falling back to an ordered search.
    pub const TRIES: usize = 4;

    /// A random policy seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: SplitMix64::new(seed),
        }
    }
}

impl Policy for Random {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        let mut pivot = None;
        for _ in 0..Self::TRIES {
            match space.draw(&mut self.rng) {
                Draw::Empty => return None,
                Draw::Hit(p) => return Some(p),
                Draw::Miss(p) => pivot = p.or(pivot),
            }
        }
        match pivot {
            Some(p) => space
                .first(Dir::Asc, Some(&p))
                .or_else(|| space.first(Dir::Asc, None)),
            None => space.first(Dir::Asc, None),
        }
    }
}

/// The policies by name, as the CLI spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// `least-fit`
    LeastFit,
    /// `best-fit`
    BestFit,
    /// `first-fit`
    FirstFit,
    /// `next-fit`
    NextFit,
    /// `random`
    Random,
    /// `frag`: fragmentation-aware GPU placement (`frag.rs`). Not a fit-space policy: it
    /// ranks the whole fit set by the node state, so the index's users route it to
    /// [`FragPlacer`](super::FragPlacer); [`build`](Self::build) gives its tie order,
    /// best-fit.
    Frag,
    /// `auto`: `frag` while few of the recent GPU arrivals name a GPU model, `best-fit`
    /// for GPU tasks once [`AUTO_BEST_FIT_FROM_PERMILLE`](super::frag::AUTO_BEST_FIT_FROM_PERMILLE)
    /// of them do (the share is read from `frag`'s workload mix, so the master applies the
    /// rule on its own as the workload changes). Tasks that ask no GPU are placed as under
    /// `frag`. Chosen by measurement (BENCHMARKS.md#sim-gpuspec): where pods name models,
    /// `frag`'s fragment measure ends with less of the GPUs allocated than `best-fit`
    /// (docs/guide/scheduling.md).
    Auto,
}

impl PolicyKind {
    /// Every policy.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::LeastFit,
        PolicyKind::BestFit,
        PolicyKind::FirstFit,
        PolicyKind::NextFit,
        PolicyKind::Random,
    ];

    /// Every placement the CLI accepts: the fit-space policies, then `frag` and `auto`.
    pub const PLACEMENTS: [PolicyKind; 7] = [
        PolicyKind::LeastFit,
        PolicyKind::BestFit,
        PolicyKind::FirstFit,
        PolicyKind::NextFit,
        PolicyKind::Random,
        PolicyKind::Frag,
        PolicyKind::Auto,
    ];

    /// Whether this policy uses the `frag` placer (`frag` itself, or `auto`).
    pub fn uses_frag(self) -> bool {
        matches!(self, PolicyKind::Frag | PolicyKind::Auto)
    }

    /// A fresh policy of this kind (`seed` is used by `random` only; `frag` gives best-fit,
    /// its tie order, and so does `auto`, its fallback).
    pub fn build(self, seed: u64) -> AnyPolicy {
        match self {
            PolicyKind::LeastFit => AnyPolicy::LeastFit(LeastFit),
            PolicyKind::BestFit => AnyPolicy::BestFit(BestFit),
            PolicyKind::FirstFit => AnyPolicy::FirstFit(FirstFit),
            PolicyKind::NextFit => AnyPolicy::NextFit(NextFit::default()),
            PolicyKind::Random => AnyPolicy::Random(Random::new(seed)),
            PolicyKind::Frag | PolicyKind::Auto => AnyPolicy::BestFit(BestFit),
        }
    }

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::LeastFit => "least-fit",
            PolicyKind::BestFit => "best-fit",
            PolicyKind::FirstFit => "first-fit",
            PolicyKind::NextFit => "next-fit",
            PolicyKind::Random => "random",
            PolicyKind::Frag => "frag",
            PolicyKind::Auto => "auto",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown policy {0:?}: expected least-fit, best-fit, first-fit, next-fit, random, frag or auto"
)]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for PolicyKind {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, UnknownPolicy> {
        PolicyKind::PLACEMENTS
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// Any policy, chosen at run time.
#[derive(Clone, Debug)]
pub enum AnyPolicy {
    /// See [`LeastFit`].
    LeastFit(LeastFit),
    /// See [`BestFit`].
    BestFit(BestFit),
    /// See [`FirstFit`].
    FirstFit(FirstFit),
    /// See [`NextFit`].
    NextFit(NextFit),
    /// See [`Random`].
    Random(Random),
}

impl Policy for AnyPolicy {
    fn select<S: FitSpace + ?Sized>(&mut self, space: &mut S) -> Option<Pos> {
        match self {
            AnyPolicy::LeastFit(p) => p.select(space),
            AnyPolicy::BestFit(p) => p.select(space),
            AnyPolicy::FirstFit(p) => p.select(space),
            AnyPolicy::NextFit(p) => p.select(space),
            AnyPolicy::Random(p) => p.select(space),
        }
    }
}
