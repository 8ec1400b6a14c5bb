//! Reusing attempt cgroups: an ended attempt's cgroup is renamed to a spare
//! (`spare-<n>`) instead of removed, and the next attempt with the same limits takes it by
//! renaming it to its own name — with its limits already written.
//!
//! Why: creating a cgroup, writing its CPU quota and memory limits and removing it cost about
//! 0.4 ms of the agent's CPU per attempt on cgroup v1 (a quota write alone ~150 µs: the kernel
//! walks the CPU controller's hierarchy, `tg_set_bandwidth`), plus the kernel's deferred work
//! of taking a memory cgroup offline; two renames cost ~20 µs (BENCHMARKS.md, "Real tasks
//! per second"). Only cgroup v1 renames a cgroup (within its parent); on v2 ended cgroups
//! are removed as before.
//!
//! What a reused cgroup must not carry over, checked before it becomes a spare (else it is
//! removed as before):
//! - processes: none may be left in it;
//! - an OOM kill: the counter (`oom_kill` in `memory.oom_control`/`memory.events`) is
//!   cumulative and the next attempt's OOM verdict reads it, so only a cgroup whose count is
//!   0 is kept;
//! - memory still charged to it (page cache, tmpfs files the task left): at most
//!   [`MAX_LEFT_BYTES`] and 1/16 of its limit, so the next attempt gets nearly all of its
//!   memory (the charge of a `true` run is ~170 KiB; a cgroup is retired after a few).
//!
//! Only cgroups this agent created (their limits known, unchanged since: a live CPU change
//! forgets the key) are kept; spares left by an earlier run of the agent are removed at
//! start ([`crate::cgroup::Cgroups::clean_stale`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Name prefix of spare cgroups.
pub const SPARE_PREFIX: &str = "spare-";
/// Most memory still charged to a cgroup that is kept as a spare.
pub const MAX_LEFT_BYTES: u64 = 1 << 20;
/// Most spares kept per parent directory and limits (more are removed).
const MAX_SPARES_PER_KEY: usize = 64;

#[derive(Debug, Default)]
struct Inner {
    /// Limits key of each attempt directory created with known limits.
    keys: HashMap<PathBuf, String>,
    /// Spare directories by (parent, limits key).
    free: HashMap<(PathBuf, String), Vec<PathBuf>>,
}

/// The spare cgroups of one slave, shared by every handle of its cgroups.
#[derive(Clone, Debug, Default)]
pub struct Spares {
    inner: Arc<Mutex<Inner>>,
    next: Arc<AtomicU64>,
}

// Handles compare by their directories; which spares they share does not matter.
impl PartialEq for Spares {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Spares {}

impl Spares {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `dir` from a spare with limits `key`, if there is one; true when it did (its
    /// limits are written already).
    pub fn take(&self, dir: &Path, key: &str) -> bool {
        let Some(parent) = dir.parent() else {
            return false;
        };
        loop {
            let spare = {
                let mut g = self.lock();
                g.free
                    .get_mut(&(parent.to_path_buf(), key.to_string()))
                    .and_then(Vec::pop)
            };
            let Some(spare) = spare else {
                return false;
            };
            match std::fs::rename(&spare, dir) {
                Ok(()) => {
                    self.lock().keys.insert(dir.to_path_buf(), key.to_string());
                    return true;
                }
                Err(e) => {
                    tracing::debug!(spare = %spare.display(), error = %e, "cannot reuse a spare cgroup");
                    let _ = std::fs::remove_dir(&spare);
                }
            }
        }
    }

    /// Records that `dir` was created with limits `key`.
    pub fn created(&self, dir: &Path, key: &str) {
        self.lock().keys.insert(dir.to_path_buf(), key.to_string());
    }

    /// Forgets the limits of `dir` (they changed live): it is removed when it ends.
    pub fn forget(&self, dir: &Path) {
        self.lock().keys.remove(dir);
    }

    /// Keeps the ended attempt cgroup `dir` as a spare when its limits are known and
    /// `reusable` says nothing carries over; true when it did (else the caller removes it).
    pub fn retire(&self, dir: &Path, reusable: impl FnOnce(&Path) -> bool) -> bool {
        let Some(key) = self.lock().keys.remove(dir) else {
            return false;
        };
        let Some(parent) = dir.parent() else {
            return false;
        };
        let slot = (parent.to_path_buf(), key);
        let full = self
            .lock()
            .free
            .get(&slot)
            .is_some_and(|v| v.len() >= MAX_SPARES_PER_KEY);
        if full || !reusable(dir) {
            return false;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let spare = parent.join(format!("{SPARE_PREFIX}{}-{n}", std::process::id()));
        match std::fs::rename(dir, &spare) {
            Ok(()) => {
                self.lock().free.entry(slot).or_default().push(spare);
                true
            }
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot keep the cgroup as a spare");
                false
            }
        }
    }

    /// How many spares are kept (tests).
    pub fn count(&self) -> usize {
        self.lock().free.values().map(Vec::len).sum()
    }
}

/// Whether a cgroup with at most `left` bytes charged and memory limit `limit` (None: none)
/// may be reused.
pub fn memory_left_ok(left: u64, limit: Option<u64>) -> bool {
    left <= MAX_LEFT_BYTES && limit.is_none_or(|l| left <= l / 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_is_taken_only_for_the_same_limits_and_only_when_reusable() {
        let tmp = tempfile::tempdir().expect("tmp");
        let s = Spares::default();
        let a = tmp.path().join("task-1-1");
        std::fs::create_dir(&a).expect("mkdir");
        std::fs::write(a.join("cpu.cfs_quota_us"), "100000").expect("write");
        s.created(&a, "c1000");
        assert!(s.retire(&a, |_| true));
        assert!(!a.exists());
        assert_eq!(s.count(), 1);
        let b = tmp.path().join("task-2-1");
        assert!(!s.take(&b, "c2000"), "other limits");
        assert!(s.take(&b, "c1000"));
        assert_eq!(
            std::fs::read_to_string(b.join("cpu.cfs_quota_us")).expect("read"),
            "100000",
            "the limits come with it"
        );
        assert_eq!(s.count(), 0);
        // Not reusable, or limits changed live: not kept.
        assert!(!s.retire(&b, |_| false));
        let c = tmp.path().join("task-3-1");
        std::fs::create_dir(&c).expect("mkdir");
        s.created(&c, "c1000");
        s.forget(&c);
        assert!(!s.retire(&c, |_| true));
        assert!(memory_left_ok(170 << 10, Some(16 << 20)));
        assert!(!memory_left_ok(2 << 20, Some(64 << 20)));
        assert!(!memory_left_ok(600 << 10, Some(8 << 20)));
        assert!(memory_left_ok(600 << 10, None));
    }
}
