//! What an attempt's cgroup says it used (the accounting issue's readings): CPU seconds and
//! peak memory, read before the cgroup is retired, and the v1 counters set back to zero when
//! a spare cgroup is reused, so that a reading is one attempt's alone.

use crate::cgroup::{write_file, AttemptCgroup, CgroupMode};
use std::path::{Path, PathBuf};

impl AttemptCgroup {
    /// A reused (spare) v1 cgroup's counters set back to zero, so that what it measures is
    /// this attempt's alone: `cpuacct.usage` and `memory.max_usage_in_bytes` (the kernel
    /// accepts `0` for both; the peak restarts from what is charged now, which a spare keeps
    /// small). `reused` says which of its directories came from a spare.
    pub(crate) fn reset_counters(&self, reused: impl Fn(&Path) -> bool) {
        let acct = self.acct.as_ref().or(self.cpu.as_ref());
        let files = [
            acct.map(|d| d.join("cpuacct.usage")),
            self.mem
                .as_ref()
                .map(|d| d.join("memory.max_usage_in_bytes")),
        ];
        for f in files.into_iter().flatten() {
            let dir_reused = f.parent().is_some_and(&reused);
            if dir_reused && f.exists() {
                if let Err(e) = write_file(&f, "0") {
                    tracing::warn!(error = %e, "cannot reset a reused cgroup's counter; its usage reading includes the previous attempt's");
                }
            }
        }
    }

    /// What the attempt used, read before its cgroup is retired: CPU seconds (v2 `cpu.stat`
    /// `usage_usec`; v1 `cpuacct.usage`, ns) and peak memory in bytes (v2 `memory.peak`,
    /// v1 `memory.max_usage_in_bytes`). `None` for what cannot be read (no cgroup, an older
    /// kernel without `memory.peak`).
    pub fn usage(&self) -> CgroupUsage {
        let read = |p: PathBuf| crate::small_file::read_to_string(&p).ok();
        let number = |p: PathBuf| read(p).and_then(|s| s.trim().parse::<u64>().ok());
        match self.mode() {
            CgroupMode::None => CgroupUsage::default(),
            CgroupMode::V2 => CgroupUsage {
                cpu_s: self
                    .cpu
                    .as_ref()
                    .and_then(|d| read(d.join("cpu.stat")))
                    .and_then(|s| cpu_stat_usage_usec(&s))
                    .map(|us| us as f64 / 1e6),
                peak_bytes: self
                    .mem
                    .as_ref()
                    .and_then(|d| number(d.join("memory.peak"))),
            },
            CgroupMode::V1 => CgroupUsage {
                cpu_s: self
                    .acct
                    .as_ref()
                    .or(self.cpu.as_ref())
                    .and_then(|d| number(d.join("cpuacct.usage")))
                    .map(|ns| ns as f64 / 1e9),
                peak_bytes: self
                    .mem
                    .as_ref()
                    .and_then(|d| number(d.join("memory.max_usage_in_bytes"))),
            },
        }
    }
}

/// An attempt's cgroup readings ([`AttemptCgroup::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgroupUsage {
    /// CPU time, user + system, seconds.
    pub cpu_s: Option<f64>,
    /// Peak memory charged, bytes.
    pub peak_bytes: Option<u64>,
}

/// The `usage_usec N` value in the text of a v2 `cpu.stat`.
pub fn cpu_stat_usage_usec(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("usage_usec")).then(|| w.next()?.parse().ok())?
    })
}
