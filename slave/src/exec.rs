//! Running a task as a child process in its own process group, and ending it.
//!
//! # Exit-code convention
//! - A process that exits normally reports its own exit status (0–255).
//! - A process killed by signal N reports **−N** (SIGTERM → −15, SIGKILL → −9), as the
//!   protocol's `HeldPhase::Finished` documents. Unlike the shell's 128+N this cannot be
//!   confused with a program that itself exits 143.
//! - A command that cannot be started (empty argv, no such program, not executable, log files
//!   not creatable) reports **127** (the shell's "command not found") with an error log line.

use hetsched_common::protocol::Assignment;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::process::{Child, Command};

/// Exit code of a task that could not be started.
pub const EXIT_CANNOT_START: i32 = 127;

/// Exit code reported for an exit status, per the module's convention.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => -sig,
        // Neither exited nor signalled (cannot happen for a reaped child): treat as failure.
        (None, None) => EXIT_CANNOT_START,
    }
}

/// Paths of a task attempt's output files: `DIR/task-<id>-<attempt>.out|.err`.
pub fn log_paths(log_dir: &Path, a: &Assignment) -> (PathBuf, PathBuf) {
    let stem = format!("task-{}-{}", a.task.0, a.attempt);
    (
        log_dir.join(format!("{stem}.out")),
        log_dir.join(format!("{stem}.err")),
    )
}

/// The environment every task gets on top of the slave's own and the assignment's `env`.
pub fn task_env(a: &Assignment) -> Vec<(String, String)> {
    vec![
        ("HETSCHED_JOB_ID".into(), a.job.0.to_string()),
        ("HETSCHED_TASK_ID".into(), a.task.0.to_string()),
        ("HETSCHED_TASK_INDEX".into(), a.index.to_string()),
        ("HETSCHED_ATTEMPT".into(), a.attempt.to_string()),
    ]
}

/// Why a task could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The assignment has no command.
    #[error("empty command")]
    EmptyCommand,
    /// A log file could not be opened.
    #[error("cannot open log file {path}: {source}")]
    Log {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The program could not be executed.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// argv\[0\].
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The child has no pid (it was already reaped): cannot happen right after spawn.
    #[error("spawned child has no pid")]
    NoPid,
}

/// Starts the task: its own process group (so the whole tree can be signalled), stdin from
/// /dev/null, stdout/stderr appended to its log files (appended, so a rerun after a slave
/// restart keeps the first run's output). Returns the child and its process group id.
pub fn spawn(a: &Assignment, log_dir: &Path) -> Result<(Child, i32), SpawnError> {
    let (program, args) = a.command.split_first().ok_or(SpawnError::EmptyCommand)?;
    let (out, err) = log_paths(log_dir, a);
    let open = |path: PathBuf| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| SpawnError::Log { path, source })
    };
    let (out, err) = (open(out)?, open(err)?);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(task_env(a))
        .envs(&a.env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        // A task outlives a slave crash on purpose: the restarted slave finds it by its
        // stored pgid and kills it before running the attempt again.
        .kill_on_drop(false);
    let child = cmd.spawn().map_err(|source| SpawnError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id().ok_or(SpawnError::NoPid)?;
    // pids fit in i32 on every Unix; a larger value would be a kernel bug.
    let pgid = i32::try_from(pid).map_err(|_| SpawnError::NoPid)?;
    Ok((child, pgid))
}

/// Appends a line to the task's `.err` log (best effort), so that a user reading the task's
/// output sees why it never started.
pub fn note_in_err_log(log_dir: &Path, a: &Assignment, line: &str) {
    use std::io::Write;
    let (_, err) = log_paths(log_dir, a);
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&err)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = r {
        tracing::debug!(path = %err.display(), error = %e, "cannot write task log");
    }
}

/// Sends `sig` to process group `pgid`; a group that is already gone is not an error.
pub fn signal_group(pgid: i32, sig: Signal) {
    if pgid <= 1 {
        // Never signal "every process" (-1) or our own group (0).
        return;
    }
    match killpg(Pid::from_raw(pgid), sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, signal = ?sig, error = %e, "cannot signal process group"),
    }
}

/// Ends a running child's process group: SIGTERM, up to `grace` for the leader to exit, then
/// SIGKILL to whatever is left of the group. Returns the leader's exit status.
pub async fn terminate(
    child: &mut Child,
    pgid: i32,
    grace: Duration,
) -> std::io::Result<ExitStatus> {
    signal_group(pgid, Signal::SIGTERM);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(r) => r?,
        Err(_) => {
            signal_group(pgid, Signal::SIGKILL);
            child.wait().await?
        }
    };
    // Members that outlived the leader (ignoring SIGTERM) must not keep running.
    signal_group(pgid, Signal::SIGKILL);
    Ok(status)
}

/// True when some live process in group `pgid` carries `HETSCHED_TASK_ID=<task>` in its
/// environment — the check that a stored pgid still belongs to that task and not to an
/// unrelated group that reused the number. Reads `/proc`; false where it cannot.
pub fn group_runs_task(pgid: i32, task: u64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    let marker = format!("HETSCHED_TASK_ID={task}");
    dir.flatten().any(|e| {
        let path = e.path();
        let in_group = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|s| pgrp_of_stat(&s))
            == Some(pgid);
        in_group
            && std::fs::read(path.join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()))
                .unwrap_or(false)
    })
}

/// The process group field of a `/proc/PID/stat` line. The command name in parentheses may
/// contain spaces and parentheses, so fields are counted after the last ')'.
fn pgrp_of_stat(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ')': state, ppid, pgrp.
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Kills the leftover process group of a task that was running when the slave stopped, if it
/// is still there and still that task's.
pub fn kill_leftover(pgid: i32, task: u64) -> bool {
    if pgid > 1 && group_runs_task(pgid, task) {
        signal_group(pgid, Signal::SIGKILL);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_odd_names() {
        assert_eq!(pgrp_of_stat("42 (a) b) c) S 1 77 77 0"), Some(77));
        assert_eq!(pgrp_of_stat("42 (sleep) S 1 9 9"), Some(9));
        assert_eq!(pgrp_of_stat("garbage"), None);
        assert_eq!(pgrp_of_stat("1 (x) S"), None);
    }

    #[test]
    fn exit_codes_follow_the_convention() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), -15);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), -9);
    }
}
