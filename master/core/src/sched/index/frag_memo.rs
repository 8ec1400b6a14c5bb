//! A memo of `frag`'s per-class fragments, kept across decisions.
//!
//! `frag` ranks every fitting node by `Σ weight · F(n, m)` over the workload mix, before and
//! after the placement ([`frag`](super::frag)). The weights change with nearly every arrival
//! (the mix slides, the scarcity counts move), but `F(n, m)` — the fragment of one node state
//! for one class — depends on nothing but the state (free CPU, memory, each device's free
//! thousandths and model) and the class. Most nodes do not change between two decisions,
//! and many are in the same state (identical machines, wholly free), so the same fragments
//! were computed over and over: profiling `drf-frag` on a trace that barely queues put a
//! third of the simulator's time in that one function.
//!
//! The memo keeps, per node state, the fragment of each class seen (classes get a dense id
//! on first sight); a decision binds the memo to its mix once ([`FragMemo::bind`]) and reads
//! each state's row through a [`Row`]. A miss computes the fragment with the very function
//! the uncached measure uses, so a decision reads the same numbers either way: the memo only
//! changes the cost. It is bounded: past [`FragMemo::MAX_STATES`] states or
//! [`FragMemo::MAX_CLASSES`] classes it forgets everything and starts again.

use super::frag::DemandShape;
use hetsched_common::GpuDevice;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// What a fragment depends on besides the class: free CPU, memory, and each device's free
/// thousandths with its model (as an id into [`FragMemo::models`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct StateKey {
    cpu_milli: u64,
    mem_mib: u64,
    devices: Vec<(u32, u32)>,
}

/// A small multiply-rotate hasher (the memo's keys are plain integers; SipHash's
/// resistance to chosen keys buys nothing here and costs most of a lookup).
#[derive(Default)]
struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Marks a fragment not computed yet. A fragment equal to it is simply never stored (and
/// computed again when asked), so the marker cannot change a result.
const UNKNOWN: u64 = u64::MAX;

/// The memo: class ids, model ids, and per node state the fragments known so far.
#[derive(Clone, Debug, Default)]
pub struct FragMemo {
    /// Each class seen, with its dense id.
    classes: BTreeMap<DemandShape, u32>,
    /// The classes of the mix last bound, in its order, and their ids.
    bound: Vec<(DemandShape, u32)>,
    /// GPU model names seen, by id.
    models: Vec<String>,
    /// Each node state seen: its row in `rows`.
    states: HashMap<StateKey, u32, BuildHasherDefault<FastHasher>>,
    /// Per state: the fragment of each class id ([`UNKNOWN`] where not computed).
    rows: Vec<Vec<u64>>,
    /// The key being looked up (kept to reuse its buffer).
    key: StateKey,
}

impl FragMemo {
    /// Node states remembered before the memo starts again.
    pub const MAX_STATES: usize = 8192;
    /// Classes given an id before the memo starts again.
    pub const MAX_CLASSES: usize = 1024;

    /// Binds the memo to `mix` for the decisions that follow: the `i`-th entry of `mix` is
    /// the class a [`Row::fragment`] call with index `i` stands for.
    pub fn bind(&mut self, mix: &[(DemandShape, u64)]) {
        if self.classes.len() + mix.len() > Self::MAX_CLASSES {
            self.forget();
        }
        self.bound.truncate(mix.len());
        for (i, (class, _)) in mix.iter().enumerate() {
            if self.bound.get(i).is_some_and(|(c, _)| c == class) {
                continue;
            }
            let next = self.classes.len() as u32;
            let id = *self.classes.entry(class.clone()).or_insert(next);
            match self.bound.get_mut(i) {
                Some(slot) => *slot = (class.clone(), id),
                None => self.bound.push((class.clone(), id)),
            }
        }
    }

    /// Forgets every state and class (ids are given again from 0).
    pub fn forget(&mut self) {
        self.classes.clear();
        self.bound.clear();
        self.states.clear();
        self.rows.clear();
    }

    /// Node states remembered.
    pub fn states(&self) -> usize {
        self.rows.len()
    }

    /// The row of the state with `cpu_milli`, `mem_mib` and `free` thousandths on
    /// `devices` (whose models count; their `free_milli` does not: `free` may be a
    /// hypothetical state).
    pub fn row(
        &mut self,
        cpu_milli: u64,
        mem_mib: u64,
        devices: &[GpuDevice],
        free: &[u32],
    ) -> Row<'_> {
        self.key.cpu_milli = cpu_milli;
        self.key.mem_mib = mem_mib;
        self.key.devices.clear();
        for (d, f) in devices.iter().zip(free) {
            let model = match self.models.iter().position(|m| *m == d.model) {
                Some(i) => i,
                None => {
                    self.models.push(d.model.clone());
                    self.models.len() - 1
                }
            };
            self.key.devices.push((*f, model as u32));
        }
        let at = match self.states.get(&self.key) {
            Some(at) => *at as usize,
            None => {
                if self.rows.len() >= Self::MAX_STATES {
                    self.states.clear();
                    self.rows.clear();
                }
                self.states.insert(self.key.clone(), self.rows.len() as u32);
                self.rows.push(Vec::new());
                self.rows.len() - 1
            }
        };
        let width = self.classes.len();
        let fragments = &mut self.rows[at];
        if fragments.len() < width {
            fragments.resize(width, UNKNOWN);
        }
        Row {
            fragments,
            bound: &self.bound,
        }
    }
}

/// One node state's fragments, read through the mix the memo is bound to.
pub struct Row<'a> {
    fragments: &'a mut Vec<u64>,
    bound: &'a [(DemandShape, u32)],
}

impl Row<'_> {
    /// The fragment of the `i`-th class of the bound mix: remembered, or `compute`d and
    /// remembered. `compute` must be the fragment of that class in this row's state.
    pub fn fragment(&mut self, i: usize, compute: impl FnOnce() -> u64) -> u64 {
        let Some((_, id)) = self.bound.get(i) else {
            return compute();
        };
        let Some(slot) = self.fragments.get_mut(*id as usize) else {
            return compute();
        };
        if *slot == UNKNOWN {
            *slot = compute();
        }
        *slot
    }
}

#[cfg(test)]
#[path = "frag_memo_tests.rs"]
mod tests;
