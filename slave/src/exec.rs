//! Starting task attempts under their supervisors ([`crate::supervisor`]), their
//! environment, their output files, and ending what is left of them.
//!
//! # Exit-code convention
//! - A process that exits normally reports its own exit status (0–255).
//! - A process killed by signal N reports **−N** (SIGTERM → −15, SIGKILL → −9), as the
//!   protocol's `HeldPhase::Finished` documents. Unlike the shell's 128+N this cannot be
//!   confused with a program that itself exits 143.
//! - A command that cannot be started (empty argv, no such program, not executable, log files
//!   not creatable) reports **127** (the shell's "command not found") with an error log line.

use crate::cgroup::{AttemptCgroup, Cgroups, Limits};
use crate::supervisor::{
    proc_start_time, write_atomically, Spec, CPUS_FILE, FORMAT_VERSION, SPEC_FILE, STATUS_FILE,
    SUPERVISOR_FILE, SUPERVISOR_LOG,
};
use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, TaskId};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use tokio::process::{Child, Command};

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

/// The GPU device ids granted, comma-separated (`"0,1"`; empty for none). A fractional grant
/// names its one device.
pub fn gpu_ids(a: &Assignment) -> String {
    a.gpus
        .iter()
        .map(|(device, _)| device.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A CPU allocation in millicores as users write it (`1.5`).
pub fn cpus_text(cpu_milli: u64) -> String {
    format!("{}", cpu_milli as f64 / 1000.0)
}

/// The environment every task gets on top of the slave's own and the assignment's `env`
/// (docs/CONTRACT.md, "Environment variables"). `cpus_file` is `HETSCHED_CPUS_FILE`, where the slave
/// keeps the current allocation when it changes live.
pub fn task_env(a: &Assignment, cpus_file: Option<&Path>) -> Vec<(String, String)> {
    let gpus = gpu_ids(a);
    let mut env = vec![
        ("HETSCHED_JOB_ID".into(), a.job.0.to_string()),
        ("HETSCHED_TASK_ID".into(), a.task.0.to_string()),
        ("HETSCHED_TASK_INDEX".into(), a.index.to_string()),
        ("HETSCHED_ATTEMPT".into(), a.attempt.to_string()),
        ("HETSCHED_CPUS".into(), cpus_text(a.resources.cpu_milli)),
        ("HETSCHED_GPUS".into(), gpus.clone()),
        // Device numbers are the slave's (NVML) order; make CUDA count the same way.
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
        ("CUDA_VISIBLE_DEVICES".into(), gpus.clone()),
        ("NVIDIA_VISIBLE_DEVICES".into(), gpus),
    ];
    if let Some(f) = cpus_file {
        env.push(("HETSCHED_CPUS_FILE".into(), f.display().to_string()));
    }
    env
}

/// Why a task could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The assignment has no command.
    #[error("empty command")]
    EmptyCommand,
    /// The attempt's directory exists: it was started before (by this agent or an earlier
    /// run of it) and must not start again.
    #[error("attempt already started ({0} exists)")]
    AlreadyStarted(PathBuf),
    /// A file of the attempt could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The supervisor could not be executed.
    #[error("cannot start the supervisor {program:?}: {source}")]
    Spawn {
        /// The supervisor program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The child has no pid (it was already reaped): cannot happen right after spawn.
    #[error("spawned supervisor has no pid")]
    NoPid,
}

/// Starts task attempts under supervisors ([`crate::supervisor`]).
#[derive(Clone, Debug)]
pub struct Launcher {
    /// The supervisor command: program and leading arguments (`[hetsched, supervise]`); the
    /// attempt directory is appended.
    pub supervisor: Vec<OsString>,
    /// Where attempt directories live (`DATA/attempts`).
    pub attempts_dir: PathBuf,
    /// Where task output files live (`DATA/logs`).
    pub log_dir: PathBuf,
    /// The slave's cgroups.
    pub cgroups: Cgroups,
    /// Which emulated-probe files tasks get (S3 probes).
    pub probe_files: ProbeFiles,
}

/// The files through which tasks report to the slave's emulated probes: named in the
/// task's environment only where that probe is the emulated one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeFiles {
    /// GPU tasks get `HETSCHED_GPU_UTIL_FILE` (the node's GPUs are emulated).
    pub gpu_util: bool,
    /// Every task gets `HETSCHED_MEMBW_FILE` (no resctrl on the node).
    pub membw: bool,
}

/// Name of the emulated GPU-utilisation file in an attempt's directory.
pub const GPU_UTIL_FILE: &str = "gpu_util";

/// Name of the emulated memory-bandwidth file in an attempt's directory.
pub const MEMBW_FILE: &str = "membw";

/// A started supervisor.
#[derive(Debug)]
pub struct Launched {
    /// The supervisor process (a child of the agent until the agent restarts).
    pub child: Child,
    /// Its pid.
    pub pid: i32,
    /// Its `/proc` start time (with the pid: its identity).
    pub start_time: u64,
}

impl Launcher {
    /// The directory of (task, attempt).
    pub fn attempt_dir(&self, task: TaskId, attempt: Attempt) -> PathBuf {
        self.attempts_dir.join(attempt_name(task, attempt))
    }

    /// Removes an ended attempt's directory. The files an attempt leaves in the common case
    /// go by name, then the directory; anything else in it (an older supervisor's files, a
    /// probe's) is found by the full walk. (The walk alone took twice the system calls, once
    /// per task.)
    pub fn remove_attempt_dir(&self, task: TaskId, attempt: Attempt) -> std::io::Result<()> {
        let dir = self.attempt_dir(task, attempt);
        for f in [CPUS_FILE, SUPERVISOR_FILE, STATUS_FILE] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        match std::fs::remove_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::fs::remove_dir_all(&dir),
            _ => Ok(()),
        }
    }

    /// Where the slave's long-lived supervisor keeps its socket, journal and log
    /// (`DATA/supervisor`, beside `DATA/attempts`; see [`crate::pool`]).
    pub fn pool_dir(&self) -> PathBuf {
        self.attempts_dir.with_file_name("supervisor")
    }

    /// Starts attempt `a` under a new per-attempt supervisor: [`prepare`](Self::prepare),
    /// then executes the supervisor in a session of its own, detached from the agent. (The
    /// agent starts attempts through the slave's long-lived supervisor instead,
    /// [`crate::pool`]; this way remains for comparison in `benches/spawn.rs`.)
    pub fn launch(&self, a: &Assignment) -> Result<Launched, SpawnError> {
        let (dir, spec) = self.prepare(a)?;
        let spec_path = dir.join(SPEC_FILE);
        let bytes = serde_json::to_vec(&spec).map_err(|e| SpawnError::Io {
            path: spec_path.clone(),
            source: std::io::Error::other(e),
        })?;
        // Not fsynced: the supervisor reads it at once, and after a machine crash the task
        // is gone anyway (the attempt is then reported lost).
        std::fs::write(&spec_path, bytes).map_err(|source| SpawnError::Io {
            path: spec_path.clone(),
            source,
        })?;
        let log_path = dir.join(SUPERVISOR_LOG);
        let log = std::fs::File::create(&log_path).map_err(|source| SpawnError::Io {
            path: log_path.clone(),
            source,
        })?;
        let (program, lead) = self
            .supervisor
            .split_first()
            .ok_or_else(|| SpawnError::Spawn {
                program: String::new(),
                source: std::io::Error::other("no supervisor program configured"),
            })?;
        let child = Command::new(program)
            .args(lead)
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // The supervisor must outlive the agent: that is its purpose.
            .kill_on_drop(false)
            .spawn()
            .map_err(|source| SpawnError::Spawn {
                program: program.to_string_lossy().into_owned(),
                source,
            })?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or(SpawnError::NoPid)?;
        let start_time = proc_start_time(pid).unwrap_or(0);
        Ok(Launched {
            child,
            pid,
            start_time,
        })
    }

    /// Everything a supervisor needs to start attempt `a`: its directory (refusing if it
    /// exists — an attempt never starts twice), its cgroup with the task's limits (where
    /// cgroups are in use) and its `cpus` file. Returns the directory and the spec (which
    /// the pool gets inline, [`crate::pool`], and a per-attempt supervisor as `spec.json`).
    pub fn prepare(&self, a: &Assignment) -> Result<(PathBuf, Spec), SpawnError> {
        if a.command.is_empty() {
            return Err(SpawnError::EmptyCommand);
        }
        let dir = self.attempt_dir(a.task, a.attempt);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpawnError::Io { path, source }
        };
        // The attempts directory exists after the first start: made only when missing
        // (two system calls saved per start).
        let mut made = std::fs::create_dir(&dir);
        if made
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            std::fs::create_dir_all(&self.attempts_dir).map_err(io(&self.attempts_dir))?;
            made = std::fs::create_dir(&dir);
        }
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SpawnError::AlreadyStarted(dir))
            }
            Err(e) => return Err(io(&dir)(e)),
        }
        tracing::debug!(target: "hetsched::trace", task = %a.task, "prepare: attempt directory created");
        let name = attempt_name(a.task, a.attempt);
        let limits = Limits {
            cpu_milli: a.resources.cpu_milli,
            mem_mib: a.resources.mem_mib,
        };
        let cg = match self.cgroups.create(&name, limits) {
            Ok(cg) => Some(cg),
            Err(e) => {
                // The task still runs, unlimited; the operator sees why.
                tracing::warn!(task = %a.task, attempt = a.attempt, error = %e, "cannot create the attempt's cgroup; running it without limits");
                None
            }
        };
        tracing::debug!(target: "hetsched::trace", task = %a.task, "prepare: cgroup ready");
        let cpus_file = dir.join(CPUS_FILE);
        // Not fsynced: the agent's loop waits for this, and the file only matters while the
        // task runs. Written in place: nothing reads it before the task starts (a change
        // later replaces it atomically, `set_cpus`).
        std::fs::write(
            &cpus_file,
            format!("{}\n", cpus_text(a.resources.cpu_milli)).as_bytes(),
        )
        .map_err(io(&cpus_file))?;
        // Written in the log dir on disk, where it is kept ([`crate::logs`]): a stream the task
        // leaves empty is removed when it ends, with its line in the index. Not on tmpfs
        // like the attempt's other files: tmpfs pages are charged to the task's memory
        // cgroup and cannot be written back, so a task's output would count against its
        // `--mem` (a 32 MiB task printing 64 MiB was OOM-killed) and hold host RAM.
        let (keep_out, keep_err) = log_paths(&self.log_dir, a);
        let (stdout, stderr) = (keep_out.clone(), keep_err.clone());
        let mut env = task_env(a, Some(&cpus_file));
        if self.probe_files.gpu_util && !a.gpus.is_empty() {
            env.push((
                "HETSCHED_GPU_UTIL_FILE".into(),
                dir.join(GPU_UTIL_FILE).display().to_string(),
            ));
        }
        if self.probe_files.membw {
            env.push((
                "HETSCHED_MEMBW_FILE".into(),
                dir.join(MEMBW_FILE).display().to_string(),
            ));
        }
        env.extend(a.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spec = Spec {
            version: FORMAT_VERSION,
            argv: a.command.clone(),
            env,
            stdout,
            stderr,
            cgroup_procs: cg.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            oom_counter: cg.as_ref().and_then(|c| c.oom_counter_file()),
            keep: Some(crate::logs::Keep {
                stdout: keep_out,
                stderr: keep_err,
            }),
        };
        Ok((dir, spec))
    }
}

/// Changes a running attempt's CPU allocation live: its cgroup's quota and its
/// `HETSCHED_CPUS_FILE` (for the CPU search and compression, S3).
pub fn set_cpus(
    attempt_dir: &Path,
    cgroup: &AttemptCgroup,
    cpu_milli: u64,
) -> Result<(), SpawnError> {
    cgroup.set_cpu(cpu_milli).map_err(|e| SpawnError::Io {
        path: attempt_dir.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let f = attempt_dir.join(CPUS_FILE);
    write_atomically(&f, format!("{}\n", cpus_text(cpu_milli)).as_bytes()).map_err(|source| {
        SpawnError::Io {
            path: f.clone(),
            source,
        }
    })
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
    fn an_attempt_dir_is_removed_with_its_usual_files_or_anything_else_in_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let l = Launcher {
            supervisor: Vec::new(),
            attempts_dir: tmp.path().join("attempts"),
            log_dir: tmp.path().join("logs"),
            cgroups: Cgroups::none(),
            probe_files: ProbeFiles::default(),
        };
        for (task, extra) in [(1, None), (2, Some("probe.out")), (3, None)] {
            let dir = l.attempt_dir(TaskId(task), 1);
            std::fs::create_dir_all(&dir).expect("mkdir");
            for f in [CPUS_FILE, SUPERVISOR_FILE, STATUS_FILE]
                .into_iter()
                .chain(extra)
            {
                std::fs::write(dir.join(f), "x").expect("write");
            }
            if task == 3 {
                std::fs::remove_dir_all(&dir).expect("gone before");
            }
            l.remove_attempt_dir(TaskId(task), 1).expect("removed");
            assert!(!dir.exists(), "task {task}");
        }
    }

    #[test]
    fn stat_parsing_survives_odd_names() {
        assert_eq!(pgrp_of_stat("42 (a) b) c) S 1 77 77 0"), Some(77));
        assert_eq!(pgrp_of_stat("42 (sleep) S 1 9 9"), Some(9));
        assert_eq!(pgrp_of_stat("garbage"), None);
        assert_eq!(pgrp_of_stat("1 (x) S"), None);
    }

    fn asg(gpus: Vec<(u32, u32)>, cpu_milli: u64) -> Assignment {
        Assignment {
            task: TaskId(17),
            job: hetsched_common::JobId(3),
            index: 2,
            attempt: 4,
            command: vec!["true".into()],
            env: Default::default(),
            resources: hetsched_common::ResourceRequest {
                cpu_milli,
                ..Default::default()
            },
            gpus,
            queued: false,
            engine: None,
        }
    }

    #[test]
    fn environment_names_ids_cpus_and_gpus() {
        let env: std::collections::BTreeMap<String, String> = task_env(
            &asg(vec![(0, 1000), (3, 1000)], 1500),
            Some(Path::new("/x/cpus")),
        )
        .into_iter()
        .collect();
        assert_eq!(env["HETSCHED_TASK_ID"], "17");
        assert_eq!(env["HETSCHED_ATTEMPT"], "4");
        assert_eq!(env["HETSCHED_CPUS"], "1.5");
        assert_eq!(env["HETSCHED_CPUS_FILE"], "/x/cpus");
        for k in [
            "HETSCHED_GPUS",
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
        ] {
            assert_eq!(env[k], "0,3", "{k}");
        }
        // A fractional grant names its one device; no grant names none.
        assert_eq!(gpu_ids(&asg(vec![(1, 500)], 100)), "1");
        assert_eq!(gpu_ids(&asg(vec![], 100)), "");
    }

    #[test]
    fn live_cpu_change_updates_quota_and_cpus_file() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("cpu")).expect("mkdir");
        std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1").expect("write");
        let cgs = Cgroups::detect(root.path(), "1:cpu:/\n", "s");
        let cg = cgs
            .create(
                "task-17-4",
                Limits {
                    cpu_milli: 2000,
                    mem_mib: 0,
                },
            )
            .expect("create");
        let dir = root.path().join("attempt");
        std::fs::create_dir_all(&dir).expect("mkdir");
        set_cpus(&dir, &cg, 1000).expect("set cpus");
        let quota = root
            .path()
            .join("cpu/hetsched-s/task-17-4/cpu.cfs_quota_us");
        assert_eq!(std::fs::read_to_string(quota).expect("quota"), "100000");
        assert_eq!(
            std::fs::read_to_string(dir.join(CPUS_FILE)).expect("cpus file"),
            "1\n"
        );
    }

    #[test]
    fn exit_codes_follow_the_convention() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), -15);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), -9);
    }
}
