//! Resource limits of task attempts through Linux control groups, v2 or v1, detected at start.
//!
//! Layout: one cgroup per slave, `hetsched-<slave>`, under the cgroup the slave process itself
//! is in (read from `/proc/self/cgroup`), and one per attempt below it, `task-<id>-<attempt>`:
//!
//! ```text
//! v2: <root>/<own>/hetsched-<slave>/task-17-1/{cgroup.procs, cpu.max, memory.max, memory.events}
//! v1: <root>/cpu/<own cpu>/hetsched-<slave>/task-17-1/{cgroup.procs, cpu.cfs_quota_us, ...}
//!     <root>/memory/<own memory>/hetsched-<slave>/task-17-1/{cgroup.procs, memory.limit_in_bytes, ...}
//! ```
//!
//! CPU limit = the task's cores as a CFS quota (`cpus × period`); memory limit = its memory,
//! with swap closed (v1 `memory.memsw.limit_in_bytes`, else `memory.swappiness = 0`; v2
//! `memory.swap.max = 0`) so a task over its limit is killed by the OOM killer rather than
//! swapped; the OOM kill is read back from `memory.oom_control` (v1) or `memory.events` (v2).
//! Where no hierarchy is writable the mode is [`CgroupMode::None`] and tasks run unlimited.
//!
//! Everything takes the cgroupfs root as a parameter, so the writes are tested against fake
//! trees in temporary directories; the v1 path is also tested for real where tests run as root.

use crate::cgroup_spares::{memory_left_ok, Spares, SPARE_PREFIX};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// CFS period used for every quota, µs.
pub const CFS_PERIOD_US: u64 = 100_000;
/// Smallest CFS quota the kernel takes, µs.
const CFS_QUOTA_MIN_US: u64 = 1_000;

/// Which cgroup interface limits tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    /// No writable hierarchy: tasks run without limits.
    None,
    /// cgroup v1 (one hierarchy per controller).
    V1,
    /// cgroup v2 (the unified hierarchy).
    V2,
}

impl CgroupMode {
    /// `"none"`, `"v1"` or `"v2"`, as `nodes --json` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupMode::None => "none",
            CgroupMode::V1 => "v1",
            CgroupMode::V2 => "v2",
        }
    }
}

/// Errors of cgroup handling.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A cgroup file or directory could not be written.
    #[error("cgroup {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err(path))
}

/// Limits of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Cores in millicores (0 = no CPU limit).
    pub cpu_milli: u64,
    /// Memory in MiB (0 = no memory limit).
    pub mem_mib: u64,
}

/// The CFS quota (µs per [`CFS_PERIOD_US`]) of `cpu_milli`; `None` = unlimited.
pub fn cfs_quota_us(cpu_milli: u64) -> Option<u64> {
    (cpu_milli > 0).then(|| (cpu_milli * CFS_PERIOD_US / 1000).max(CFS_QUOTA_MIN_US))
}

/// The slave's cgroups: its mode and its own directory per controller.
#[derive(Clone, Debug)]
pub struct Cgroups {
    mode: CgroupMode,
    /// v2: the one slave directory. v1: the `cpu` then the `memory` slave directory (either
    /// may be missing where that controller is not mounted or not writable).
    cpu_dir: Option<PathBuf>,
    mem_dir: Option<PathBuf>,
    /// v1: the `cpuacct` slave directory where that controller is a hierarchy of its own
    /// (the accounting issue's CPU seconds); `None` in v2 (`cpu.stat` serves) and where
    /// `cpuacct` is mounted with `cpu` (the cpu directory has `cpuacct.usage`).
    acct_dir: Option<PathBuf>,
    /// Ended attempts' cgroups kept for reuse ([`crate::cgroup_spares`]).
    spares: Spares,
    /// The cgroupfs root it was detected under (`None` in mode `None`).
    root: Option<PathBuf>,
}

/// The cgroup path of `controller` (v1) or of the unified hierarchy (`controller` = "") in
/// the text of `/proc/self/cgroup`.
pub fn own_path(proc_self_cgroup: &str, controller: &str) -> Option<String> {
    proc_self_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        hit.then(|| path.to_string())
    })
}

fn join_own(base: &Path, own: &str) -> PathBuf {
    base.join(own.trim_start_matches('/'))
}

impl Cgroups {
    /// No cgroups: tasks run unlimited.
    pub fn none() -> Self {
        Self {
            mode: CgroupMode::None,
            cpu_dir: None,
            mem_dir: None,
            acct_dir: None,
            spares: Spares::default(),
            root: None,
        }
    }

    /// Detects the hierarchy under `root` (normally `/sys/fs/cgroup`) and creates the slave's
    /// own directory `hetsched-<slave>` under the slave process's cgroup (`proc_self_cgroup`
    /// is the text of `/proc/self/cgroup`). On cgroup v2, where that cgroup cannot delegate
    /// the cpu and memory controllers (it holds other processes), the directory is made at
    /// the top of the hierarchy instead. Falls back to [`CgroupMode::None`], with a
    /// warning, where nothing is writable.
    pub fn detect(root: &Path, proc_self_cgroup: &str, slave: &str) -> Self {
        let name = format!("hetsched-{slave}");
        if root.join("cgroup.controllers").exists() {
            let own = own_path(proc_self_cgroup, "").unwrap_or_else(|| "/".into());
            let setup = Self::setup_v2(root, &own, &name).or_else(|under_own| {
                if own.trim_matches('/').is_empty() {
                    return Err(under_own);
                }
                // The slave's cgroup could not give its children the cpu and memory
                // controllers: it is shared with other processes (a login shell's scope,
                // `hetsched up` and its masters), and a cgroup holding processes cannot
                // enable controllers for children. The top of the hierarchy is exempt from
                // that rule, so a slave running as root keeps its tasks' limits there.
                let _ = std::fs::remove_dir(join_own(root, &own).join(&name));
                Self::setup_v2(root, "/", &name).map_err(|at_top| CgroupError::Io {
                    path: root.join(&name),
                    source: std::io::Error::other(format!(
                        "under the slave's own cgroup: {under_own}; at the top: {at_top}"
                    )),
                })
            });
            match setup {
                Ok(dir) => {
                    tracing::info!(dir = %dir.display(), "cgroup v2: tasks' cgroups under this directory");
                    return Self {
                        mode: CgroupMode::V2,
                        cpu_dir: Some(dir.clone()),
                        mem_dir: Some(dir),
                        acct_dir: None,
                        spares: Spares::default(),
                        root: Some(root.to_path_buf()),
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cgroup v2 hierarchy not usable; tasks run without limits");
                    return Self::none();
                }
            }
        }
        let v1 = |controller: &str, probe: &str| -> Option<PathBuf> {
            let base = root.join(controller);
            if !base.join(probe).exists() {
                return None;
            }
            let own = own_path(proc_self_cgroup, controller).unwrap_or_else(|| "/".into());
            let dir = join_own(&base, &own).join(&name);
            match std::fs::create_dir_all(&dir) {
                Ok(()) => Some(dir),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cgroup v1 {controller} hierarchy not writable");
                    None
                }
            }
        };
        let cpu_dir = v1("cpu", "cpu.cfs_quota_us");
        let mem_dir = v1("memory", "memory.limit_in_bytes");
        // cpuacct apart from cpu (mounted on its own, as on this project's CI machines):
        // the task joins it too, for its CPU seconds.
        let co_mounted = std::fs::canonicalize(root.join("cpuacct")).ok()
            == std::fs::canonicalize(root.join("cpu")).ok();
        let acct_dir = (!co_mounted)
            .then(|| v1("cpuacct", "cpuacct.usage"))
            .flatten();
        if cpu_dir.is_none() && mem_dir.is_none() {
            tracing::warn!(root = %root.display(), "no writable cgroup hierarchy; tasks run without limits");
            return Self::none();
        }
        Self {
            mode: CgroupMode::V1,
            cpu_dir,
            mem_dir,
            acct_dir,
            spares: Spares::default(),
            root: Some(root.to_path_buf()),
        }
    }

    fn setup_v2(root: &Path, own: &str, name: &str) -> Result<PathBuf, CgroupError> {
        let own_dir = join_own(root, own);
        let dir = own_dir.join(name);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        // Controllers must be enabled on the way down. The slave's own cgroup may hold
        // processes (then the kernel refuses, unless it is the root); what counts is that the
        // slave directory ends up with both controllers.
        let enable = "+cpu +memory";
        let own_control = own_dir.join("cgroup.subtree_control");
        if write_file(&own_control, enable).is_err() && !own.trim_matches('/').is_empty() {
            // "No internal processes": a delegated cgroup (systemd `Delegate=yes`) that holds
            // the slave itself cannot enable controllers for children. Move the slave into a
            // leaf of its own, as systemd asks delegated services to, and try again.
            let leaf = own_dir.join("hetsched-agent");
            std::fs::create_dir_all(&leaf).map_err(io_err(&leaf))?;
            write_file(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
            let _ = write_file(&own_control, enable);
        }
        let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        let has = |c: &str| available.split_whitespace().any(|w| w == c);
        if !(has("cpu") && has("memory")) {
            return Err(CgroupError::Io {
                path: dir.join("cgroup.controllers"),
                source: std::io::Error::other(format!(
                    "controllers cpu and memory not delegated (have {:?})",
                    available.trim()
                )),
            });
        }
        write_file(&dir.join("cgroup.subtree_control"), enable)?;
        Ok(dir)
    }

    /// The mode in use.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }

    /// The name of the slave's own directories (`hetsched-<slave>`; `None` without cgroups).
    pub fn own_name(&self) -> Option<String> {
        let d = self.own_dirs().next()?;
        Some(d.file_name()?.to_string_lossy().into_owned())
    }

    /// The cgroupfs root the hierarchies were found under (`None` without cgroups).
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// The (not necessarily existing) cgroup of attempt `name`.
    pub fn attempt(&self, name: &str) -> AttemptCgroup {
        AttemptCgroup {
            mode: self.mode,
            cpu: self.cpu_dir.as_ref().map(|d| d.join(name)),
            mem: self.mem_dir.as_ref().map(|d| d.join(name)),
            acct: self.acct_dir.as_ref().map(|d| d.join(name)),
            spares: self.spares.clone(),
        }
    }

    /// The spares' key of directory `d` of `cg` with `limits`: what is written to it.
    fn key_of(&self, cg: &AttemptCgroup, d: &Path, limits: Limits) -> String {
        let cpu = cg.cpu.as_deref() == Some(d);
        let mem = cg.mem.as_deref() == Some(d);
        if !cpu && !mem {
            // The cpuacct directory: nothing is written to it.
            return "a".into();
        }
        match (cpu, mem) {
            (true, true) => format!("c{}m{}", limits.cpu_milli, limits.mem_mib),
            (true, false) => format!("c{}", limits.cpu_milli),
            _ => format!("m{}", limits.mem_mib),
        }
    }

    /// Creates the cgroup of attempt `name` with `limits`. In mode `None` it is empty (no
    /// directories, nothing limited).
    pub fn create(&self, name: &str, limits: Limits) -> Result<AttemptCgroup, CgroupError> {
        let cg = self.attempt(name);
        // A spare with the same limits is taken as it is; only new directories are written.
        let mut fresh = Vec::new();
        for d in cg.dirs() {
            let key = self.key_of(&cg, d, limits);
            if !self.spares.take(d, &key) {
                std::fs::create_dir_all(d).map_err(io_err(d))?;
                fresh.push((d.clone(), key));
            }
        }
        let is_fresh = |d: &Option<PathBuf>| {
            d.as_ref()
                .is_some_and(|d| fresh.iter().any(|(f, _)| f == d))
        };
        let (cpu_fresh, mem_fresh) = (is_fresh(&cg.cpu), is_fresh(&cg.mem));
        match self.mode {
            CgroupMode::None => {}
            CgroupMode::V2 => {
                if cpu_fresh {
                    cg.write_cpu(limits.cpu_milli)?;
                }
                if let (Some(dir), true) = (cg.mem.as_ref(), mem_fresh && limits.mem_mib > 0) {
                    let bytes = limits.mem_mib * 1024 * 1024;
                    write_file(&dir.join("memory.max"), &bytes.to_string())?;
                    if self
                        .mem_dir
                        .as_ref()
                        .is_some_and(|d| d.join("memory.swap.max").exists())
                    {
                        write_file(&dir.join("memory.swap.max"), "0")?;
                    }
                }
            }
            CgroupMode::V1 => {
                if cpu_fresh {
                    cg.write_cpu(limits.cpu_milli)?;
                }
                if let (Some(dir), true) = (cg.mem.as_ref(), mem_fresh && limits.mem_mib > 0) {
                    let bytes = (limits.mem_mib * 1024 * 1024).to_string();
                    write_file(&dir.join("memory.limit_in_bytes"), &bytes)?;
                    let memsw = self
                        .mem_dir
                        .as_ref()
                        .is_some_and(|d| d.join("memory.memsw.limit_in_bytes").exists());
                    if memsw {
                        write_file(&dir.join("memory.memsw.limit_in_bytes"), &bytes)?;
                    } else {
                        write_file(&dir.join("memory.swappiness"), "0")?;
                    }
                }
            }
        }
        if self.mode == CgroupMode::V1 {
            cg.reset_counters(|d| !fresh.iter().any(|(f, _)| f == d));
        }
        for (d, key) in fresh {
            self.spares.created(&d, &key);
        }
        Ok(cg)
    }

    /// The slave's own directories (one per hierarchy in use).
    fn own_dirs(&self) -> impl Iterator<Item = &PathBuf> {
        self.cpu_dir
            .iter()
            .chain(self.mem_dir.iter())
            .chain(self.acct_dir.iter())
    }

    /// Removes the slave's own (empty) cgroup directories, e.g. when a test or benchmark
    /// is done with them; best effort.
    pub fn remove_own(&self) {
        for d in self.own_dirs() {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Names of the attempt cgroups that exist under the slave's directories.
    pub fn attempt_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for d in self.own_dirs() {
            if let Ok(rd) = std::fs::read_dir(d) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("task-") && e.path().is_dir() {
                        names.insert(name);
                    }
                }
            }
        }
        names
    }

    /// Removes every attempt cgroup not in `keep` (stale ones from a previous run), killing
    /// whatever still runs in it first, and the spares of a previous run. Returns the names
    /// of the attempt cgroups removed.
    pub fn clean_stale(&self, keep: &BTreeSet<String>) -> Vec<String> {
        for d in self.own_dirs() {
            let Ok(rd) = std::fs::read_dir(d) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(SPARE_PREFIX) {
                    remove_cgroup_dir(&e.path());
                }
            }
        }
        let mut removed = Vec::new();
        for name in self.attempt_names() {
            if keep.contains(&name) {
                continue;
            }
            let cg = self.attempt(&name);
            cg.kill_all();
            cg.remove();
            removed.push(name);
        }
        removed
    }
}

/// The cgroup of one attempt (one directory in v2, one per controller in v1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptCgroup {
    mode: CgroupMode,
    /// Directory of the cpu controller (v2: the attempt's one directory).
    pub(crate) cpu: Option<PathBuf>,
    /// Directory of the memory controller (v2: the same as `cpu`).
    pub(crate) mem: Option<PathBuf>,
    /// v1: directory of the `cpuacct` controller where it is a hierarchy of its own.
    pub(crate) acct: Option<PathBuf>,
    /// The slave's spare cgroups.
    spares: Spares,
}

impl AttemptCgroup {
    /// The mode.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }

    /// Its distinct directories (one in v2, up to two in v1).
    fn dirs(&self) -> Vec<&PathBuf> {
        let mut v: Vec<&PathBuf> = Vec::new();
        for d in self
            .cpu
            .iter()
            .chain(self.mem.iter())
            .chain(self.acct.iter())
        {
            if !v.contains(&d) {
                v.push(d);
            }
        }
        v
    }

    /// The `cgroup.procs` files a process writes `0` to in order to join (one per hierarchy).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The file whose `oom_kill N` line counts OOM kills in this cgroup.
    pub fn oom_counter_file(&self) -> Option<PathBuf> {
        let d = self.mem.as_ref()?;
        Some(match self.mode {
            CgroupMode::V2 => d.join("memory.events"),
            _ => d.join("memory.oom_control"),
        })
    }

    /// Changes the CPU limit live; 0 removes it. (The cgroup is then not reused.)
    pub fn set_cpu(&self, cpu_milli: u64) -> Result<(), CgroupError> {
        if let Some(dir) = &self.cpu {
            self.spares.forget(dir);
        }
        self.write_cpu(cpu_milli)
    }

    /// Writes the CPU limit; 0 removes it.
    fn write_cpu(&self, cpu_milli: u64) -> Result<(), CgroupError> {
        let Some(dir) = &self.cpu else {
            return Ok(());
        };
        let quota = cfs_quota_us(cpu_milli);
        match self.mode {
            CgroupMode::V2 => {
                let v = match quota {
                    Some(q) => format!("{q} {CFS_PERIOD_US}"),
                    None => format!("max {CFS_PERIOD_US}"),
                };
                write_file(&dir.join("cpu.max"), &v)
            }
            CgroupMode::V1 => {
                // Each write of the period or the quota makes the kernel walk the CPU
                // controller's hierarchy (`tg_set_bandwidth`, the agent's largest kernel cost
                // per task): a read is cheap, and a new cgroup has the default period already.
                let period = CFS_PERIOD_US.to_string();
                let period_file = dir.join("cpu.cfs_period_us");
                if std::fs::read_to_string(&period_file).map_or(true, |p| p.trim() != period) {
                    write_file(&period_file, &period)?;
                }
                let v = quota.map(|q| q.to_string()).unwrap_or_else(|| "-1".into());
                write_file(&dir.join("cpu.cfs_quota_us"), &v)
            }
            CgroupMode::None => Ok(()),
        }
    }

    /// Pids of every process in the cgroup (any hierarchy).
    pub fn pids(&self) -> BTreeSet<i32> {
        self.dirs()
            .iter()
            .filter_map(|d| crate::small_file::read_to_string(&d.join("cgroup.procs")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .filter(|p| *p > 1)
            .collect()
    }

    /// Kills every process in the cgroup (SIGKILL, repeated until none is left or about a
    /// second has passed: a process may fork while being killed). True when it is empty.
    pub fn kill_all(&self) -> bool {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for p in pids {
                match kill(Pid::from_raw(p), Signal::SIGKILL) {
                    Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                    Err(e) => tracing::warn!(pid = p, error = %e, "cannot kill a task process"),
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.pids().is_empty()
    }

    /// OOM kills counted in this cgroup (0 where unknown).
    pub fn oom_kills(&self) -> u64 {
        self.oom_counter_file()
            .and_then(|f| crate::small_file::read_to_string(&f).ok())
            .map(|s| oom_kills_of(&s))
            .unwrap_or(0)
    }

    /// Removes the cgroup's directories (best effort: a cgroup with processes cannot go; the
    /// next start's stale cleanup retries).
    pub fn remove(&self) {
        for d in self.dirs() {
            self.spares.forget(d);
            remove_cgroup_dir(d);
        }
    }

    /// The end of an ended attempt's cgroup: kept as a spare for the next attempt with the
    /// same limits where nothing of this one carries over ([`crate::cgroup_spares`]), else
    /// removed.
    pub fn retire(&self) {
        self.retire_with(false);
    }

    /// [`retire`](Self::retire) right after [`kill_all`](Self::kill_all) found the cgroup
    /// empty: its `cgroup.procs` files are not read again. Nothing joins it in between: only
    /// the supervisor moves processes in, before the attempt's task starts, and the attempt
    /// has ended.
    pub fn retire_emptied(&self) {
        self.retire_with(true);
    }

    fn retire_with(&self, emptied: bool) {
        for d in self.dirs() {
            // v2 has no rename of cgroups.
            if self.mode != CgroupMode::V1 || !self.spares.retire(d, |d| self.reusable(d, emptied))
            {
                remove_cgroup_dir(d);
            }
        }
    }

    /// Whether directory `d` of this cgroup may serve another attempt: no process left (known
    /// when `emptied`), and for its memory controller no OOM kill counted and little memory
    /// still charged.
    fn reusable(&self, d: &Path, emptied: bool) -> bool {
        let empty = emptied
            || crate::small_file::read_to_string(&d.join("cgroup.procs"))
                .is_ok_and(|s| s.trim().is_empty());
        if !empty || self.mem.as_deref() != Some(d) {
            return empty;
        }
        let read = |f: &str| crate::small_file::read_to_string(&d.join(f)).ok();
        let number = |f: &str| read(f).and_then(|s| s.trim().parse::<u64>().ok());
        let (left, limit) = match self.mode {
            CgroupMode::V2 => (number("memory.current"), number("memory.max")),
            _ => (
                number("memory.usage_in_bytes"),
                number("memory.limit_in_bytes").filter(|l| *l < (1 << 62)),
            ),
        };
        let no_oom = self
            .oom_counter_file()
            .and_then(|f| crate::small_file::read_to_string(&f).ok())
            .is_some_and(|s| oom_kills_of(&s) == 0);
        no_oom && left.is_some_and(|left| memory_left_ok(left, limit))
    }
}

/// Removes a cgroup directory, retrying a moment while it is busy.
fn remove_cgroup_dir(d: &Path) {
    for _ in 0..10 {
        match std::fs::remove_dir(d) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            // A fake tree (tests) holds regular files: remove them with it.
            Err(_) if !d.join("cgroup.controllers").exists() && is_fake(d) => {
                let _ = std::fs::remove_dir_all(d);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A directory outside a cgroup filesystem (its `cgroup.procs`, if any, is a plain file the
/// tests wrote) — removed recursively, which the kernel's cgroupfs would refuse.
fn is_fake(dir: &Path) -> bool {
    !dir.starts_with("/sys/fs/cgroup")
}

/// The `oom_kill N` count in the text of `memory.events` (v2) or `memory.oom_control` (v1).
pub fn oom_kills_of(text: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("oom_kill")).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
