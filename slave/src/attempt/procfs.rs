//! What `/proc` says of a task attempt: a process's identity (pid and start time, safe
//! against pid reuse), whether a stored process group is still the task's, and the leftover
//! processes of an attempt whose supervisor is gone — found by the attempt's own marks only,
//! so that nothing of another slave on the machine is ever killed.

use super::files::CPUS_FILE;
use crate::cgroup::AttemptCgroup;
use hetsched_common::procstat::{stat_field, ProcStat};
use hetsched_common::{Attempt, TaskId};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};

/// `/proc/PID/stat` of `pid`, read without a size probe (a start and an end each read a few).
fn proc_stat(pid: i32) -> Option<ProcStat> {
    let line = crate::small_file::read_to_string(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    ProcStat::parse(&line)
}

/// Start time of process `pid` (`/proc/PID/stat` field 22), if it exists.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    proc_stat(pid).map(|s| s.start_time)
}

/// Whether the process `pid` that started at `start_time` still runs (not a zombie, and not
/// another process that reused the pid).
pub fn is_alive(pid: i32, start_time: u64) -> bool {
    if pid <= 1 {
        return false;
    }
    proc_stat(pid).is_some_and(|s| !s.has_ended() && s.start_time == start_time)
}

/// Pids of live processes that carry `HETSCHED_TASK_ID=<task>`, `HETSCHED_ATTEMPT=<attempt>`
/// and this slave's `HETSCHED_CPUS_FILE` for the attempt (`attempt_dir`/cpus) in their
/// environment (from `/proc`). The file path makes the mark this slave's own: another slave
/// or cluster on the machine has tasks with the same ids, and they are not ours to kill.
pub fn marked_processes(task: TaskId, attempt: Attempt, attempt_dir: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let id = format!("HETSCHED_TASK_ID={}", task.0);
    let att = format!("HETSCHED_ATTEMPT={attempt}");
    let mine = format!(
        "HETSCHED_CPUS_FILE={}",
        attempt_dir.join(CPUS_FILE).display()
    );
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    let mut vars = env.split(|b| *b == 0);
                    let (mut has_id, mut has_att, mut has_mine) = (false, false, false);
                    for kv in &mut vars {
                        has_id |= kv == id.as_bytes();
                        has_att |= kv == att.as_bytes();
                        has_mine |= kv == mine.as_bytes();
                    }
                    has_id && has_att && has_mine
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Kills whatever is left of an attempt whose supervisor is gone: its cgroup's processes,
/// else its process group (checked to still carry its `HETSCHED_TASK_ID`), and in any case
/// every process marked with its task id and attempt. Returns how many processes were found.
pub fn kill_attempt_leftovers(
    task: TaskId,
    attempt: Attempt,
    attempt_dir: &Path,
    cgroup: &AttemptCgroup,
    task_pgid: Option<i32>,
) -> usize {
    let mut found = cgroup.pids().len();
    cgroup.kill_all();
    if let Some(pgid) = task_pgid {
        if kill_leftover(pgid, task.0) {
            found += 1;
        }
    }
    for pid in marked_processes(task, attempt, attempt_dir) {
        found += 1;
        match nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pid, error = %e, "cannot kill a leftover task process"),
        }
    }
    found
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

/// The process group (field 5) of a `/proc/PID/stat` line.
fn pgrp_of_stat(stat: &str) -> Option<i32> {
    stat_field(stat, 5)?.parse().ok()
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

/// SIGKILLs every process listed in these `cgroup.procs` files, a few rounds (a process may
/// fork while being killed).
pub fn kill_cgroup_members(procs_files: &[PathBuf]) {
    for _ in 0..20 {
        let pids: Vec<i32> = procs_files
            .iter()
            .filter_map(|f| crate::small_file::read_to_string(f).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .filter(|p| *p > 1)
            .collect();
        if pids.is_empty() {
            return;
        }
        for p in pids {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_identity_is_alive_and_pid_reuse_is_detected() {
        let me = std::process::id() as i32;
        let start = proc_start_time(me).expect("own start time");
        assert!(is_alive(me, start));
        assert!(!is_alive(me, start + 1), "same pid, other start: reused");
        assert!(!is_alive(0, 0));
    }

    #[test]
    fn stat_parsing_survives_odd_names() {
        assert_eq!(pgrp_of_stat("42 (a) b) c) S 1 77 77 0"), Some(77));
        assert_eq!(pgrp_of_stat("42 (sleep) S 1 9 9"), Some(9));
        assert_eq!(pgrp_of_stat("garbage"), None);
        assert_eq!(pgrp_of_stat("1 (x) S"), None);
    }
}
