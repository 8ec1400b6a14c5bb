//! The per-attempt supervisor: a small process, detached from the agent in a session of its
//! own, that starts one task attempt, waits for it, and writes its exit status durably — so
//! the task survives a restart of the agent and its true result is never lost (compare
//! Slurm's slurmstepd and Nomad's executor).
//!
//! It is `hetsched supervise ATTEMPT_DIR` (or the `hetsched-supervise` helper binary): plain
//! std, no async runtime, so starting it costs one fork/exec (BENCHMARKS.md has the figures).
//!
//! # The attempt directory (`DATA/attempts/task-<id>-<attempt>/`)
//! Every file is JSON with a `version` field; readers accept older versions (fields added
//! later have defaults) and ignore unknown fields, so a newer agent reads an older
//! supervisor's files and the other way round.
//! - `spec.json` — written by the agent before it starts the supervisor: the command, its
//!   environment, its log files, the cgroup files to join and the OOM counter to read.
//! - `supervisor.json` — written (atomically) by the supervisor once the task runs: its own pid and
//!   `/proc` start time (its identity, safe against pid reuse) and the task's pid (= its
//!   process group).
//! - `status.json` — written by the supervisor when the task has ended (write, fsync, rename,
//!   fsync the directory): exit code, signal, OOM kills, or why it could not start.
//! - `supervisor.log` — the supervisor's own stderr.
//! - `cpus` — the task's current CPU allocation (`HETSCHED_CPUS_FILE`).
//!
//! The existence of the directory marks the attempt as started: the agent never starts an
//! attempt whose directory exists (see [`crate::agent`]).

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Version of the files this build writes.
pub const FORMAT_VERSION: u32 = 1;

/// File names inside an attempt directory.
pub const SPEC_FILE: &str = "spec.json";
/// See the module docs.
pub const SUPERVISOR_FILE: &str = "supervisor.json";
/// See the module docs.
pub const STATUS_FILE: &str = "status.json";
/// See the module docs.
pub const SUPERVISOR_LOG: &str = "supervisor.log";
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
    /// Exit code per [`crate::exec`]'s convention (−N for signal N, 127 when not started).
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

/// Start time of process `pid` (`/proc/PID/stat` field 22), if it exists.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    let stat = crate::small_file::read_to_string(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    stat_fields(&stat)?.get(19)?.parse().ok()
}

/// Fields of a `/proc/PID/stat` line after the command name (which may contain spaces and
/// parentheses): index 0 is the state (field 3), 19 the start time (field 22).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().collect())
}

/// Whether the process `pid` that started at `start_time` still runs (not a zombie, and not
/// another process that reused the pid).
pub fn is_alive(pid: i32, start_time: u64) -> bool {
    if pid <= 1 {
        return false;
    }
    let Ok(stat) = crate::small_file::read_to_string(Path::new(&format!("/proc/{pid}/stat")))
    else {
        return false;
    };
    let Some(f) = stat_fields(&stat) else {
        return false;
    };
    let state_ok = !matches!(f.first(), Some(&"Z") | Some(&"X") | Some(&"x"));
    state_ok && f.get(19).and_then(|s| s.parse::<u64>().ok()) == Some(start_time)
}

/// The supervisor's entry point: `args` are what follows `supervise` on the command line
/// (`ATTEMPT_DIR` for one attempt, `--pool DIR` for the slave's long-lived supervisor,
/// [`crate::pool`]). Returns the process exit status (0 once a status file is written).
pub fn main(args: &[OsString]) -> i32 {
    if let [flag, dir] = args {
        if flag == "--pool" {
            return crate::pool::main(Path::new(dir));
        }
    }
    let [dir] = args else {
        eprintln!("usage: hetsched supervise ATTEMPT_DIR | --pool DIR (started by the slave, not by hand)");
        return 2;
    };
    // A session of its own: the agent's death, its terminal's signals and its process group
    // do not reach the supervisor or the task.
    let _ = nix::unistd::setsid();
    let dir = PathBuf::from(dir);
    let record = supervise(&dir);
    if let Some(spec) = read_json::<Spec>(&dir.join(SPEC_FILE)) {
        let mut batch = crate::logs::KeepBatch::default();
        spec.keep_output(&mut batch);
        batch.finish();
    }
    match serde_json::to_vec(&record)
        .map_err(std::io::Error::other)
        .and_then(|b| write_durably(&dir.join(STATUS_FILE), &b))
    {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hetsched supervise: cannot write the exit status: {e}");
            1
        }
    }
}

/// The record of an attempt that could not start.
pub fn cannot_start(why: String) -> ExitRecord {
    ExitRecord {
        version: FORMAT_VERSION,
        exit_code: crate::exec::EXIT_CANNOT_START,
        cannot_start: Some(why),
        ..Default::default()
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Appends `hetsched: LINE` to the task's stderr log (best effort).
pub fn note(spec: &Spec, line: &str) {
    if let Ok(mut f) = open_append(&spec.stderr) {
        let _ = writeln!(f, "hetsched: {line}");
    }
}

/// The task's command as `spec` describes it: its own process group, output appended to its
/// log files, and its cgroups joined between fork and exec. A failure is the attempt's
/// `cannot_start` record (also noted in its stderr log where that can be opened).
pub fn task_command(spec: &Spec) -> Result<Command, ExitRecord> {
    let Some((program, args)) = spec.argv.split_first() else {
        note(spec, "empty command");
        return Err(cannot_start("empty command".into()));
    };
    let (out, err) = match (open_append(&spec.stdout), open_append(&spec.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return Err(cannot_start(format!("cannot open log files: {e}")));
        }
    };
    // Opened before the fork, written in the child.
    let procs = open_procs(spec);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if !procs.is_empty() {
        // SAFETY: runs in the child between fork and exec. It only calls write(2) on file
        // descriptors opened before the fork, through `&File` (no allocation, no locks);
        // writing "0" to `cgroup.procs` moves the writing process itself.
        unsafe {
            cmd.pre_exec(move || {
                for mut f in procs.iter() {
                    f.write_all(b"0")?;
                }
                Ok(())
            });
        }
    }
    Ok(cmd)
}

/// Starts the task as [`task_command`] describes it, through [`crate::vspawn`] (no copy of
/// the caller's address space: the pool's way), without the variables `remove` of the
/// caller's environment, its log files taken from `spares` when it can. `Err` is the attempt's `cannot_start` record when its files cannot
/// be opened; the inner result is the task's pid or why it did not execute.
pub fn task_spawn(
    spec: &Spec,
    remove: &[&str],
    spares: &crate::log_spares::Spares,
) -> Result<std::io::Result<i32>, ExitRecord> {
    if spec.argv.is_empty() {
        note(spec, "empty command");
        return Err(cannot_start("empty command".into()));
    }
    // Spares only for attempts in cgroups, whose files are recycled (`Spec::keep_output`).
    let open = |p: &Path| {
        if spec.cgroup_procs.is_empty() {
            open_append(p)
        } else {
            spares.open_append(p)
        }
    };
    let (out, err) = match (open(&spec.stdout), open(&spec.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return Err(cannot_start(format!("cannot open log files: {e}")));
        }
    };
    let procs = open_procs(spec);
    Ok(crate::vspawn::Spawn {
        argv: &spec.argv,
        env: &spec.env,
        remove,
        stdout: &out,
        stderr: &err,
        procs: &procs,
    }
    .spawn())
}

/// The task's `cgroup.procs` files, opened for the child to join them before it executes
/// (no process of the task ever runs outside them).
fn open_procs(spec: &Spec) -> Vec<std::fs::File> {
    let mut procs = Vec::new();
    for p in &spec.cgroup_procs {
        match std::fs::OpenOptions::new().write(true).open(p) {
            Ok(f) => procs.push(f),
            Err(e) => eprintln!("hetsched supervise: cannot join {}: {e}", p.display()),
        }
    }
    procs
}

/// Runs the attempt described in `dir` to its end.
fn supervise(dir: &Path) -> ExitRecord {
    let spec: Spec = match std::fs::read(dir.join(SPEC_FILE))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => return cannot_start(format!("cannot read {}: {e}", SPEC_FILE)),
    };
    let mut cmd = match task_command(&spec) {
        Ok(c) => c,
        Err(rec) => return rec,
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let program = spec.argv.first().map(String::as_str).unwrap_or_default();
            let why = format!("cannot start {program:?}: {e}");
            note(&spec, &why);
            return cannot_start(why);
        }
    };
    let task_pid = i32::try_from(child.id()).unwrap_or(0);
    let me = std::process::id() as i32;
    let rec = SupervisorRecord {
        version: FORMAT_VERSION,
        pid: me,
        start_time: proc_start_time(me).unwrap_or(0),
        task_pid,
    };
    if let Err(e) = serde_json::to_vec(&rec)
        .map_err(std::io::Error::other)
        .and_then(|b| write_atomically(&dir.join(SUPERVISOR_FILE), &b))
    {
        eprintln!("hetsched supervise: cannot write {SUPERVISOR_FILE}: {e}");
    }
    let status = child.wait();
    // Whatever the task left behind (background children, also those that left its process
    // group but not its cgroup) ends with it.
    if task_pid > 1 {
        let _ = killpg(Pid::from_raw(task_pid), Signal::SIGKILL);
    }
    kill_cgroup_members(&spec.cgroup_procs);
    let oom_kills = spec
        .oom_counter
        .as_deref()
        .and_then(|f| crate::small_file::read_to_string(f).ok())
        .map(|s| crate::cgroup::oom_kills_of(&s))
        .unwrap_or(0);
    match status {
        Ok(s) => ExitRecord {
            version: FORMAT_VERSION,
            exit_code: crate::exec::exit_code_of(s),
            signal: s.signal(),
            oom_kills,
            cannot_start: None,
        },
        Err(e) => ExitRecord {
            version: FORMAT_VERSION,
            exit_code: crate::exec::EXIT_CANNOT_START,
            oom_kills,
            cannot_start: Some(format!("cannot wait for the task: {e}")),
            ..Default::default()
        },
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
