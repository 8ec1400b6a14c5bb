//! A task attempt on this slave: its directory and files, how it is launched, and what
//! `/proc` and its cgroup say of it. Everything that starts, watches or collects an attempt
//! goes through here.
//!
//! - [`files`] — the attempt directory's files and their format (what a restarted agent, and a
//!   newer or older one, reads back);
//! - [`launch`] — preparing an attempt (directory, cgroup, environment, log files) and the
//!   [`Launch`] seam through which its task is started;
//! - [`pool`] — the slave's long-lived supervisor, the one way command tasks start today
//!   (`server` is the process, `client` the agent's side, `protocol` what they say);
//! - [`task`] — executing a task as its spec says (used by the pool);
//! - [`procfs`] — `/proc` readings: a process's identity, an attempt's leftover processes.
//!
//! # Exit-code convention
//! - A process that exits normally reports its own exit status (0–255).
//! - A process killed by signal N reports **−N** (SIGTERM → −15, SIGKILL → −9), as the
//!   protocol's `HeldPhase::Finished` documents. Unlike the shell's 128+N this cannot be
//!   confused with a program that itself exits 143.
//! - A command that cannot be started (empty argv, no such program, not executable, log files
//!   not creatable) reports **127** (the shell's "command not found") with an error log line.

pub mod files;
pub mod launch;
pub mod pool;
pub mod procfs;
pub mod task;

pub use launch::{
    cpus_text, gpu_ids, note_in_err_log, set_cpus, task_env, Launcher, ProbeFiles, SpawnError,
    GPU_UTIL_FILE, MEMBW_FILE,
};
pub use procfs::{kill_attempt_leftovers, kill_leftover, marked_processes, signal_group};

use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, TaskId};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// Exit code of a task that could not be started.
pub const EXIT_CANNOT_START: i32 = 127;

/// Exit code reported (with reason `lost`) for an attempt whose supervisor vanished without
/// recording an exit: its leftovers were killed with SIGKILL.
pub const EXIT_LOST: i32 = -9;

/// Exit code reported for an exit status, per the module's convention.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => -sig,
        // Neither exited nor signalled (cannot happen for a reaped child): treat as failure.
        (None, None) => EXIT_CANNOT_START,
    }
}

/// Paths of a task attempt's kept output files: `DIR/task-<id>-<attempt>.out|.err`. The one
/// place that says where an attempt's output is kept once it ended (while it runs, it is in
/// its attempt directory: [`crate::logs`]).
pub fn log_paths(log_dir: &Path, a: &Assignment) -> (PathBuf, PathBuf) {
    kept_logs(log_dir, a.task, a.attempt)
}

/// [`log_paths`] of (task, attempt).
pub fn kept_logs(log_dir: &Path, task: TaskId, attempt: Attempt) -> (PathBuf, PathBuf) {
    let stem = attempt_name(task, attempt);
    (
        log_dir.join(format!("{stem}.out")),
        log_dir.join(format!("{stem}.err")),
    )
}

/// Name of an attempt's directory and cgroup: `task-<id>-<attempt>`.
pub fn attempt_name(task: TaskId, attempt: Attempt) -> String {
    format!("task-{}-{attempt}", task.0)
}

/// A started attempt: who supervises it (pid and `/proc` start time, its identity), and a
/// signal fired when its end is announced (or dropped when announcements stop).
#[derive(Debug)]
pub struct Started {
    /// The supervisor's pid and start time.
    pub supervisor: (i32, u64),
    /// Fires (or is dropped) when the supervisor announces the attempt's end.
    pub ended: tokio::sync::oneshot::Receiver<()>,
}

/// The seam between the agent and whatever starts an attempt's task: given the directory and
/// spec [`Launcher::prepare`] made, start the task under a supervisor that outlives the agent
/// and records its end in the attempt directory ([`files`]). The pool ([`pool::client`]) is
/// the one launcher of command tasks today; a container launcher sits beside it behind this
/// trait.
pub trait Launch: Send + Sync {
    /// Starts the attempt in `dir` as `spec` says.
    fn launch(&self, dir: &Path, spec: &files::Spec) -> std::io::Result<Started>;
    /// Where this launcher keeps its own files (named in errors).
    fn home(&self) -> PathBuf;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_convention() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), -15);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), -9);
    }
}
