//! Categorical attributes (docs/DESIGN.md §S4.3 constraints): the GPU models a node carries and
//! the engine kinds it has. They are not ordered, so they are not coordinates; instead
//! nodes with equal attributes form a *class*, a leaf groups its nodes by class, and each
//! bucket keeps a bitmask of the classes below it, so a search for `V100M32` never walks a
//! subtree holding only T4 nodes, nor the T4 nodes of a leaf it shares with V100s.

use hetsched_common::{EngineKind, NodeResources, ResourceRequest};
use std::collections::BTreeMap;

/// Class number (dense, in order of first appearance).
pub(crate) type ClassId = u32;

/// The categorical attributes of a node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClassKey {
    models: Vec<String>,
    engines: Vec<EngineKind>,
}

impl ClassKey {
    fn of(free: &NodeResources) -> Self {
        let mut models: Vec<String> = free.gpus.iter().map(|d| d.model.clone()).collect();
        models.sort();
        models.dedup();
        Self {
            models,
            engines: free.engines.keys().copied().collect(),
        }
    }

    /// Whether `free` has exactly these attributes (checked without allocating: this runs on
    /// every update).
    fn matches(&self, free: &NodeResources) -> bool {
        free.gpus
            .iter()
            .all(|d| self.models.binary_search(&d.model).is_ok())
            && self
                .models
                .iter()
                .all(|m| free.gpus.iter().any(|d| &d.model == m))
            && free.engines.keys().eq(self.engines.iter())
    }

    /// Whether a node of this class can possibly serve `req` (a necessary condition only:
    /// counts are checked exactly at the leaf).
    fn admits(&self, req: &ResourceRequest) -> bool {
        let gpu_ok = req.gpu.is_none()
            || req.gpu.models.is_empty()
            || self.models.iter().any(|m| req.gpu.accepts_model(m));
        gpu_ok
            && req
                .engines
                .iter()
                .all(|(k, n)| *n == 0 || self.engines.binary_search(k).is_ok())
    }
}

/// The bit of a class in a bucket's class mask; classes past 63 share the last bit, which
/// only makes pruning coarser, never wrong.
#[inline]
pub(crate) fn bit(class: ClassId) -> u64 {
    1u64 << class.min(63)
}

/// The classes seen so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Classes {
    keys: Vec<ClassKey>,
    ids: BTreeMap<ClassKey, ClassId>,
}

impl Classes {
    /// The class of `free`, reusing `current` when it still matches.
    pub fn classify(&mut self, free: &NodeResources, current: Option<ClassId>) -> ClassId {
        if let Some(c) = current {
            if self.keys[c as usize].matches(free) {
                return c;
            }
        }
        let key = ClassKey::of(free);
        if let Some(id) = self.ids.get(&key) {
            return *id;
        }
        let id = self.keys.len() as ClassId;
        self.keys.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    /// Which classes may serve `req`.
    pub fn eligible(&self, req: &ResourceRequest) -> Eligible {
        let unconstrained = (req.gpu.is_none() || req.gpu.models.is_empty())
            && req.engines.values().all(|n| *n == 0);
        if unconstrained {
            return Eligible {
                all: true,
                mask: u64::MAX,
                ok: Vec::new(),
            };
        }
        let ok: Vec<bool> = self.keys.iter().map(|k| k.admits(req)).collect();
        let mask = ok
            .iter()
            .enumerate()
            .filter(|(_, ok)| **ok)
            .fold(0, |m, (i, _)| m | bit(i as ClassId));
        Eligible {
            all: false,
            mask,
            ok,
        }
    }
}

/// The classes a query may use.
#[derive(Clone, Debug)]
pub(crate) struct Eligible {
    all: bool,
    /// Bits of the eligible classes (for pruning buckets).
    pub mask: u64,
    ok: Vec<bool>,
}

impl Eligible {
    /// Whether nodes of `class` may serve the query.
    #[inline]
    pub fn allows(&self, class: ClassId) -> bool {
        self.all || self.ok.get(class as usize).copied().unwrap_or(false)
    }
}
