//! What the `frag` placer keeps across decisions (see [`StateTable`]), and the scoring of
//! one node state that reads it ([`FragPlacer::state_delta`]). Everything kept is exact: a
//! placer that keeps nothing chooses the same nodes (`memo_across_decisions_changes_no_choice`).

use super::super::frag_measure::{GroupChange, GroupSees};
use super::super::tree::FxBuild;
use super::FragPlacer;
use hetsched_common::{NodeId, NodeResources, ResourceRequest};
use std::collections::HashMap;

/// Node states by number. A decision scores every fitting node, and most nodes are in a state
/// met before (the index's version of a node says whether it changed since): a node whose
/// version holds is looked up by id, not keyed and hashed again. Each state number has its
/// device state's number (the key's part after CPU and memory) and its memoised delta; each
/// device state what the shape groups see of it (it depends on the devices alone, so it holds
/// across decisions and mixes: a delta then walks only the devices the task takes).
#[derive(Clone, Debug, Default)]
pub(super) struct StateTable {
    /// Node → (index version, state number) of the state last keyed for it.
    pub(super) of_node: HashMap<NodeId, (u64, u32), FxBuild>,
    /// State key → number.
    ids: HashMap<Box<[u64]>, u32, FxBuild>,
    /// Per state: its device state's number.
    pub(super) device_of: Vec<u32>,
    /// Per state: (memo stamp, delta) of its last scoring.
    pub(super) memo: Vec<(u64, Option<i128>)>,
    /// Device state (the key's devices) → number.
    device_ids: HashMap<Box<[u64]>, u32, FxBuild>,
    /// Per device state: what each shape group sees of it (by group number).
    pub(super) sees: Vec<Vec<GroupSees>>,
    /// Requests by number, for [`KeptChanges`]' keys.
    pub(super) requests: HashMap<ResourceRequest, u32, FxBuild>,
    /// What placing each request does to each state, before any weight.
    deltas: KeptChanges,
}

/// What placing a request on a node state does to each shape group's term, before any
/// weight ([`GroupChange`]), kept per (state, request). A trace that barely queues meets a
/// new scaled mix at nearly every decision, so the memo of whole deltas never carries over;
/// but the same request meets the same node states again and again (on the Alibaba trace,
/// every 8th node from the 4th at ×100: 99,524 deltas over 31,642 distinct pairs), and only
/// the weights changed. Weighing kept changes skips the allocation of devices to the task
/// and the walk of the devices it takes, per group. A shape group added since (a new GPU
/// shape in the mix) makes a pair's changes stale; a compaction (groups renumbered) drops
/// them all.
#[derive(Clone, Debug, Default)]
struct KeptChanges {
    /// (state, request) → (start in `changes`, how many, shape groups then), or
    /// [`KeptChanges::NO_FIT`].
    at: HashMap<(u32, u32), (u32, u32, u32), FxBuild>,
    changes: Vec<PackedChange>,
}

/// A [`GroupChange`] of group `group`, in 16 bytes (thousandths of a node's devices fit in
/// `u32` but for nodes of over 4 million devices' worth, which are not kept).
#[derive(Clone, Copy, Debug)]
struct PackedChange {
    group: u32,
    usable_was: u32,
    usable_is: u32,
    took: u32,
}

impl PackedChange {
    fn pack(group: usize, c: &GroupChange) -> Option<Self> {
        Some(Self {
            group: u32::try_from(group).ok()?,
            usable_was: u32::try_from(c.usable_was).ok()?,
            usable_is: u32::try_from(c.usable_is).ok()?,
            took: u32::try_from(c.took).ok()?,
        })
    }

    fn unpack(&self) -> (usize, GroupChange) {
        let c = GroupChange {
            usable_was: self.usable_was.into(),
            usable_is: self.usable_is.into(),
            took: self.took.into(),
        };
        (self.group as usize, c)
    }
}

impl KeptChanges {
    /// Changes kept before they start over (16 bytes each).
    const MAX: usize = 1 << 20;
    /// Pairs kept before they start over (about 32 bytes each with the map's own).
    const MAX_PAIRS: usize = 1 << 18;
    /// The request does not fit the state.
    const NO_FIT: (u32, u32, u32) = (u32::MAX, 0, 0);

    fn clear(&mut self) {
        self.at.clear();
        self.changes.clear();
    }
}

/// What [`FragPlacer::keep_changes`] did.
pub(super) enum Kept {
    /// The changes are kept here in `KeptChanges::changes`.
    At(usize, usize),
    /// The request does not fit the state.
    NoFit,
    /// A change past `u32`: not kept, the delta is computed directly.
    TooLarge,
}

impl StateTable {
    /// The number of the state `key` (a `state_key`), made when new.
    pub(super) fn state(&mut self, key: &[u64]) -> usize {
        if let Some(id) = self.ids.get(key) {
            return *id as usize;
        }
        let device = self.device(&key[2..]) as u32;
        let id = self.device_of.len();
        self.device_of.push(device);
        self.memo.push((0, None));
        self.ids.insert(key.into(), id as u32);
        id
    }

    /// The shape groups were numbered again (a compaction): what each group sees of a device
    /// state is seen again, and the kept changes, indexed by group number, start over.
    pub(super) fn groups_renumbered(&mut self) {
        for sees in &mut self.sees {
            sees.clear();
        }
        self.deltas.clear();
    }

    /// The number of request `req`, made when new.
    pub(super) fn request(&mut self, req: &ResourceRequest) -> u32 {
        if let Some(id) = self.requests.get(req) {
            return *id;
        }
        let id = self.requests.len() as u32;
        self.requests.insert(req.clone(), id);
        id
    }

    /// The number of the device state `devices` (a `state_key`'s devices), made when new.
    pub(super) fn device(&mut self, devices: &[u64]) -> usize {
        if let Some(id) = self.device_ids.get(devices) {
            return *id as usize;
        }
        self.sees.push(Vec::new());
        self.device_ids
            .insert(devices.into(), (self.sees.len() - 1) as u32);
        self.sees.len() - 1
    }
}

impl FragPlacer {
    /// How much placing `req` (request number `request`) on a node in state `state`, with
    /// `free`, grows its expected fragmentation under the scaled mix; `None` when it does not
    /// fit. Weighs the pair's kept changes when there are (see [`KeptChanges`]), else makes
    /// and keeps them; equal, exactly, to [`MixByShape::delta_seen`].
    pub(super) fn state_delta(
        &mut self,
        state: usize,
        request: u32,
        free: &NodeResources,
        req: &ResourceRequest,
    ) -> Option<i128> {
        let key = (state as u32, request);
        let groups = self.by_shape.groups();
        let (start, n) = match self.states.deltas.at.get(&key) {
            Some(&KeptChanges::NO_FIT) => return None,
            Some(&(start, n, g)) if g as usize == groups => (start as usize, n as usize),
            _ => match self.keep_changes(key, free, req) {
                Kept::At(start, n) => (start, n),
                Kept::NoFit => return None,
                Kept::TooLarge => {
                    let device = self.states.device_of.get(state).copied();
                    let sees = device.and_then(|d| self.states.sees.get(d as usize))?;
                    return self.by_shape.delta_seen(free, req, sees, &mut self.scratch);
                }
            },
        };
        let kept = self.states.deltas.changes.get(start..start + n)?;
        let before = (free.cpu_milli, free.mem_mib);
        let after = (before.0 - req.cpu_milli, before.1 - req.mem_mib);
        Some(
            self.by_shape
                .delta_of(kept.iter().map(PackedChange::unpack), before, after),
        )
    }

    /// Makes and keeps the changes of (state, request) `key` (see [`KeptChanges`]).
    fn keep_changes(
        &mut self,
        key: (u32, u32),
        free: &NodeResources,
        req: &ResourceRequest,
    ) -> Kept {
        let device = self.states.device_of.get(key.0 as usize).copied();
        let Some(sees) = device.and_then(|d| self.states.sees.get_mut(d as usize)) else {
            return Kept::NoFit; // not reached: every state number has its device state
        };
        self.by_shape.see(&free.gpus, sees); // shapes new since it was kept
        let kept = &mut self.states.deltas;
        if kept.at.len() >= KeptChanges::MAX_PAIRS {
            kept.clear();
        }
        if !self
            .by_shape
            .changes_seen(free, req, sees, &mut self.scratch, &mut self.changes)
        {
            kept.at.insert(key, KeptChanges::NO_FIT);
            return Kept::NoFit;
        }
        if kept.changes.len() + self.changes.len() > KeptChanges::MAX {
            kept.clear();
        }
        let start = kept.changes.len();
        for (g, c) in &self.changes {
            let Some(p) = PackedChange::pack(*g, c) else {
                kept.changes.truncate(start);
                return Kept::TooLarge;
            };
            kept.changes.push(p);
        }
        let (n, groups) = (self.changes.len(), self.by_shape.groups());
        kept.at.insert(key, (start as u32, n as u32, groups as u32));
        Kept::At(start, n)
    }
}
