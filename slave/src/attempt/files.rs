//! The attempt directory (`DATA/attempts/task-<id>-<attempt>/`) and its files' format.
//!
//! Every file is JSON with a `version` field; readers accept older versions (fields added
//! later have defaults) and ignore unknown fields, so a newer agent reads an older
//! supervisor's files and the other way round (`slave/tests/fixtures/` holds a data directory
//! of an older slave that this build must read).
//! - `spec.json` — what to run: the command, its environment, its log files, the cgroup files
//!   to join and the OOM counter to read. The pool gets it inline (`super::pool`); it is
//!   read from the file for a `start` request without one.
//! - `supervisor.json` — written (atomically) by the supervisor once the task runs: its own pid and
//!   `/proc` start time (its identity, safe against pid reuse) and the task's pid (= its
//!   process group).
//! - `status.json` — written by the supervisor when the task has ended (atomically; the pool's
//!   journal makes it durable): exit code, signal, OOM kills, or why it could not start.
//! - `cpus` — the task's current CPU allocation (`HETSCHED_CPUS_FILE`).
//!
//! Attempts started by a per-attempt supervisor (before the pool) left the same files and a
//! `supervisor.log`; they read the same.
//!
//! The existence of the directory marks the attempt as started: the agent never starts an
//! attempt whose directory exists (see [`crate::agent`]).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version of the files this build writes.
pub const FORMAT_VERSION: u32 = 1;

/// File names inside an attempt directory.
pub const SPEC_FILE: &str = "spec.json";
/// See the module docs.
pub const SUPERVISOR_FILE: &str = "supervisor.json";
/// See the module docs.
pub const STATUS_FILE: &str = "status.json";
/// See the module docs.
pub const CPUS_FILE: &str = "cpus";

/// What to run (`spec.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Format version.
    pub version: u32,
    /// argv of the task.
    pub argv: Vec<String>,
    /// Environment added to the supervisor's own (which is the agent's).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// File the task's stdout is appended to.
    pub stdout: PathBuf,
    /// File the task's stderr is appended to.
    pub stderr: PathBuf,
    /// `cgroup.procs` files the task joins before it executes (empty: no cgroup).
    #[serde(default)]
    pub cgroup_procs: Vec<PathBuf>,
    /// File with an `oom_kill N` line counting OOM kills in the task's cgroup.
    #[serde(default)]
    pub oom_counter: Option<PathBuf>,
    /// Where `stdout` and `stderr` are kept once the task ended ([`crate::logs`]); `None`:
    /// they are written where they stay.
    #[serde(default)]
    pub keep: Option<crate::logs::Keep>,
    /// The directory the task starts in; `None`: the supervisor's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
}

impl Spec {
    /// Keeps this attempt's output as [`Spec::keep`] says (into `batch`).
    pub fn keep_output(&self, batch: &mut crate::logs::KeepBatch) {
        if let Some(k) = &self.keep {
            if self.cgroup_procs.is_empty() {
                batch.keep((&self.stdout, &self.stderr), k);
            } else {
                // Its processes were all killed with its cgroups: its empty files may serve
                // another attempt (`crate::log_spares`).
                batch.keep_recyclable((&self.stdout, &self.stderr), k);
            }
        }
    }
}

/// Who supervises (`supervisor.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorRecord {
    /// Format version.
    pub version: u32,
    /// The supervisor's pid.
    pub pid: i32,
    /// The supervisor's start time (`/proc/PID/stat` field 22, clock ticks since boot).
    pub start_time: u64,
    /// The task's pid, which is also its process group id.
    pub task_pid: i32,
}

/// How the attempt ended (`status.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Format version.
    pub version: u32,
    /// Exit code per [`super`]'s convention (−N for signal N, 127 when not started).
    pub exit_code: i32,
    /// Signal that ended it, if any.
    #[serde(default)]
    pub signal: Option<i32>,
    /// OOM kills counted in its cgroup.
    #[serde(default)]
    pub oom_kills: u64,
    /// Why it could not start (then `exit_code` is 127).
    #[serde(default)]
    pub cannot_start: Option<String>,
}

/// Reads a versioned JSON file of the attempt directory; `None` when missing or unreadable.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = crate::small_file::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable attempt file");
            None
        }
    }
}

/// Writes `bytes` to `path` durably and atomically: a temporary file, fsync, rename, fsync of
/// the directory.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically (a temporary file renamed over it) but without fsync:
/// readers never see a partial file, and the content survives the crash of any process — not
/// of the machine, after which the processes it describes are gone anyway.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The record of an attempt that could not start.
pub fn cannot_start(why: String) -> ExitRecord {
    ExitRecord {
        version: FORMAT_VERSION,
        exit_code: super::EXIT_CANNOT_START,
        cannot_start: Some(why),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_and_newer_files_decode() {
        // A version-1 status without the optional fields, and a future one with extra fields.
        let old: ExitRecord = serde_json::from_str(r#"{"version":1,"exit_code":3}"#).expect("old");
        assert_eq!(old.exit_code, 3);
        assert_eq!(old.oom_kills, 0);
        let newer: ExitRecord = serde_json::from_str(
            r#"{"version":2,"exit_code":-9,"signal":9,"oom_kills":1,"cgroup_peak_bytes":5}"#,
        )
        .expect("newer");
        assert_eq!(newer.oom_kills, 1);
    }

    #[test]
    fn durable_write_replaces_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("status.json");
        write_durably(&p, b"one").expect("write");
        write_durably(&p, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        assert!(!dir.path().join("status.json.tmp").exists());
    }
}
