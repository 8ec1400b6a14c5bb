//! Engine units held for a whole task rather than one call (docs/DESIGN.md, S0.2): the unit
//! a program task booked on the masters, and the GPU devices a command task was granted. A
//! held unit is out of the pool, so neither another task's calls nor a peer's forwarded
//! call run on it; it returns to the pool when the holder is dropped.

use super::EngineSet;
use hetsched_common::EngineKind;
use std::sync::Arc;

/// Units of one kind taken out of a node's pool until dropped.
#[derive(Debug)]
pub struct HeldUnits {
    set: Arc<EngineSet>,
    kind: EngineKind,
    count: u32,
}

impl HeldUnits {
    /// Takes up to `want` free units of `kind` now (never waits: a command task's process
    /// starts whatever the pool says; the masters' books keep the grants apart).
    pub fn take(set: &Arc<EngineSet>, kind: EngineKind, want: u32) -> Self {
        let mut count = 0;
        for _ in 0..want {
            match set.try_acquire(kind) {
                Some(u) => {
                    std::mem::forget(u);
                    count += 1;
                }
                None => break,
            }
        }
        Self {
            set: set.clone(),
            kind,
            count,
        }
    }

    /// Takes one unit of `kind`, waiting while it is busy (a peer's forwarded call or an
    /// unbooked call may hold it for a moment); `None` when the node has none.
    pub fn wait_one(set: &Arc<EngineSet>, kind: EngineKind) -> Option<Self> {
        let u = set.acquire(kind)?;
        std::mem::forget(u);
        Some(Self {
            set: set.clone(),
            kind,
            count: 1,
        })
    }

    /// Units held.
    pub fn count(&self) -> u32 {
        self.count
    }
}

impl Drop for HeldUnits {
    fn drop(&mut self) {
        for _ in 0..self.count {
            self.set.give_back(self.kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_units_leave_the_pool_until_dropped() {
        let f = super::super::EnginesFile::parse(
            "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
            "e.toml",
        )
        .expect("parses");
        let set = Arc::new(EngineSet::new(&f, 2, 2, true).expect("builds"));
        let held = HeldUnits::take(&set, EngineKind::Gpu, 3);
        assert_eq!(held.count(), 2, "only what is free");
        assert_eq!(set.free(EngineKind::Gpu), 0);
        assert!(set.try_acquire(EngineKind::Gpu).is_none());
        drop(held);
        assert_eq!(set.free(EngineKind::Gpu), 2);
    }
}
