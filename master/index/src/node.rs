//! One node as both the index and the reference scan see it: what is free, the reservation it
//! may hold (docs/DESIGN.md §S4.5), and the two views derived from them — the *public* view
//! (free minus the reservation, what every other task sees) and the *full* view (what the
//! reservation's owner sees) — with their coordinates cached, so a search never recomputes
//! them.

use super::coord::{node_vector, Granularity, Key};
use super::policy::{Dir, Draw, Pos};
use super::query::PlacementQuery;
use hetsched_common::{allocate_gpus, GpuAlloc, NodeId, NodeResources, ResourceRequest, TaskId};

/// A reservation: `amount` of a node held for `task`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The task the amount is held for.
    pub task: TaskId,
    /// What is held.
    pub amount: ResourceRequest,
}

/// A node's state and its cached coordinates (canonical order, after θ).
#[derive(Clone, Debug)]
pub(crate) struct NodeState {
    pub id: NodeId,
    pub free: NodeResources,
    pub reservation: Option<Reservation>,
    /// `free` minus the reservation; `None` when there is no reservation (then it is `free`).
    public: Option<NodeResources>,
    /// Coordinate of the public view.
    pub key_pub: Key,
    /// Coordinate of the full view.
    pub key_full: Key,
}

impl NodeState {
    pub fn new(id: NodeId, free: NodeResources, theta: &Granularity) -> Self {
        let key = theta.coarse(&node_vector(&free));
        Self {
            id,
            free,
            reservation: None,
            public: None,
            key_pub: key,
            key_full: key,
        }
    }

    /// Recomputes the views and keys after `free` or `reservation` changed.
    pub fn refresh(&mut self, theta: &Granularity) {
        self.key_full = theta.coarse(&node_vector(&self.free));
        match &self.reservation {
            None => {
                self.public = None;
                self.key_pub = self.key_full;
            }
            Some(r) => {
                let p = minus(&self.free, &r.amount);
                self.key_pub = theta.coarse(&node_vector(&p));
                self.public = Some(p);
            }
        }
    }

    /// The view a task sees: the owner of the reservation sees the node whole.
    #[inline]
    pub fn view(&self, task: Option<TaskId>) -> (&NodeResources, &Key) {
        match (&self.public, &self.reservation) {
            (Some(p), Some(r)) if Some(r.task) != task => (p, &self.key_pub),
            _ => (&self.free, &self.key_full),
        }
    }

    /// The public view (what the bucket trees index).
    #[inline]
    pub fn public(&self) -> &NodeResources {
        self.public.as_ref().unwrap_or(&self.free)
    }

    /// Whether this node is reserved for `task`.
    #[inline]
    pub fn reserved_for(&self, task: Option<TaskId>) -> bool {
        matches!((&self.reservation, task), (Some(r), Some(t)) if r.task == t)
    }
}

/// `free.fits(req)` without allocating. `NodeResources::fits` asks `allocate_gpus` for the
/// device list and drops it; this runs at every leaf check, so it answers the same question
/// by counting. Debug builds (and so every test) check it against `NodeResources::fits`.
#[inline]
pub(crate) fn fits(free: &NodeResources, req: &ResourceRequest) -> bool {
    let ok = free.cpu_milli >= req.cpu_milli
        && free.mem_mib >= req.mem_mib
        && req
            .engines
            .iter()
            .all(|(k, n)| free.engines.get(k).copied().unwrap_or(0) >= *n)
        && gpus_fit(free, &req.gpu);
    debug_assert_eq!(
        ok,
        free.fits(req),
        "fits mirror disagrees: {free:?} {req:?}"
    );
    ok
}

/// `free.take(req)` (`NodeResources::take`) checking the fit with [`fits`] instead of a
/// first `allocate_gpus` whose device list it would drop: one allocation per GPU commit
/// instead of two. Debug builds check it against the original.
pub(crate) fn take(free: &mut NodeResources, req: &ResourceRequest) -> Option<GpuAlloc> {
    #[cfg(debug_assertions)]
    let expected = {
        let mut copy = free.clone();
        let alloc = copy.take(req);
        (copy, alloc)
    };
    let alloc = if fits(free, req) {
        allocate_gpus(&free.gpus, &req.gpu)
    } else {
        None
    };
    if let Some(alloc) = &alloc {
        free.cpu_milli -= req.cpu_milli;
        free.mem_mib -= req.mem_mib;
        for (k, n) in &req.engines {
            if let Some(have) = free.engines.get_mut(k) {
                *have -= n;
            }
        }
        for (dev, milli) in alloc {
            if let Some(d) = free.gpus.get_mut(*dev as usize) {
                d.free_milli -= milli;
            }
        }
    }
    #[cfg(debug_assertions)]
    debug_assert_eq!(
        (&*free, &alloc),
        (&expected.0, &expected.1),
        "take mirror disagrees"
    );
    alloc
}

/// Mirrors `allocate_gpus(..).is_some()`: a fraction needs one usable device, anything else
/// `count` usable devices.
#[inline]
fn gpus_fit(free: &NodeResources, g: &hetsched_common::GpuRequest) -> bool {
    if g.is_none() {
        return true;
    }
    let usable =
        |d: &&hetsched_common::GpuDevice| d.free_milli >= g.milli && g.accepts_model(&d.model);
    if g.count == 1 && g.milli < hetsched_common::GPU_MILLI_PER_DEVICE {
        free.gpus.iter().any(|d| usable(&d))
    } else {
        free.gpus.iter().filter(usable).count() >= g.count as usize
    }
}

/// `free` minus a reservation. CPU, memory and engines saturate at zero; GPUs lose the devices
/// `allocate_gpus` would give the reservation, or all of their free share when the reservation
/// no longer fits (then it is unknowable which devices it would hold, so none are offered).
pub(crate) fn minus(free: &NodeResources, r: &ResourceRequest) -> NodeResources {
    let mut p = free.clone();
    p.cpu_milli = p.cpu_milli.saturating_sub(r.cpu_milli);
    p.mem_mib = p.mem_mib.saturating_sub(r.mem_mib);
    for (k, n) in &r.engines {
        if let Some(have) = p.engines.get_mut(k) {
            *have = have.saturating_sub(*n);
        }
    }
    match allocate_gpus(&p.gpus, &r.gpu) {
        Some(alloc) => {
            for (dev, milli) in alloc {
                if let Some(d) = p.gpus.get_mut(dev as usize) {
                    d.free_milli -= milli;
                }
            }
        }
        None => p.gpus.iter_mut().for_each(|d| d.free_milli = 0),
    }
    p
}

/// The first fitting place among `states` in `dir`, strictly after `after` — the reference
/// semantics, used by the linear scan and by the index for small candidate sets and for the
/// nodes a task has reserved. Cheap comparisons run before the exact `fits`.
pub(crate) fn best_of<'a>(
    states: impl Iterator<Item = &'a NodeState>,
    q: &PlacementQuery<'_>,
    dir: Dir,
    after: Option<&Pos>,
) -> Option<Pos> {
    let mut best: Option<Pos> = None;
    for st in states {
        if let Some(c) = q.candidates {
            if !c.contains(st.id) {
                continue;
            }
        }
        let (view, key) = st.view(q.task);
        let pos = Pos {
            key: q.order.permute(key),
            node: st.id,
        };
        if after.is_some_and(|a| !pos.is_after(a, dir)) {
            continue;
        }
        if best.is_some_and(|b| pos.cmp_in(&b, dir) != std::cmp::Ordering::Less) {
            continue;
        }
        if fits(view, q.request) {
            best = Some(pos);
        }
    }
    best
}

/// Whether one drawn node fits, and its place.
pub(crate) fn judge(st: &NodeState, q: &PlacementQuery<'_>) -> Draw {
    let (view, key) = st.view(q.task);
    let pos = Pos {
        key: q.order.permute(key),
        node: st.id,
    };
    let in_universe = q.candidates.is_none_or(|c| c.contains(st.id));
    if in_universe && fits(view, q.request) {
        Draw::Hit(pos)
    } else {
        Draw::Miss(Some(pos))
    }
}
