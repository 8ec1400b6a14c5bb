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

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
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
        }
    }

    /// Detects the hierarchy under `root` (normally `/sys/fs/cgroup`) and creates the slave's
    /// own directory `hetsched-<slave>` under the slave process's cgroup (`proc_self_cgroup`
    /// is the text of `/proc/self/cgroup`). Falls back to [`CgroupMode::None`], with a
    /// warning, where nothing is writable.
    pub fn detect(root: &Path, proc_self_cgroup: &str, slave: &str) -> Self {
        let name = format!("hetsched-{slave}");
        if root.join("cgroup.controllers").exists() {
            let own = own_path(proc_self_cgroup, "").unwrap_or_else(|| "/".into());
            match Self::setup_v2(root, &own, &name) {
                Ok(dir) => {
                    return Self {
                        mode: CgroupMode::V2,
                        cpu_dir: Some(dir.clone()),
                        mem_dir: Some(dir),
                    }
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
        if cpu_dir.is_none() && mem_dir.is_none() {
            tracing::warn!(root = %root.display(), "no writable cgroup hierarchy; tasks run without limits");
            return Self::none();
        }
        Self {
            mode: CgroupMode::V1,
            cpu_dir,
            mem_dir,
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

    /// The (not necessarily existing) cgroup of attempt `name`.
    pub fn attempt(&self, name: &str) -> AttemptCgroup {
        AttemptCgroup {
            mode: self.mode,
            cpu: self.cpu_dir.as_ref().map(|d| d.join(name)),
            mem: self.mem_dir.as_ref().map(|d| d.join(name)),
        }
    }

    /// Creates the cgroup of attempt `name` with `limits`. In mode `None` it is empty (no
    /// directories, nothing limited).
    pub fn create(&self, name: &str, limits: Limits) -> Result<AttemptCgroup, CgroupError> {
        let cg = self.attempt(name);
        for d in cg.dirs() {
            std::fs::create_dir_all(d).map_err(io_err(d))?;
        }
        match self.mode {
            CgroupMode::None => {}
            CgroupMode::V2 => {
                cg.set_cpu(limits.cpu_milli)?;
                if let (Some(dir), true) = (cg.mem.as_ref(), limits.mem_mib > 0) {
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
                cg.set_cpu(limits.cpu_milli)?;
                if let (Some(dir), true) = (cg.mem.as_ref(), limits.mem_mib > 0) {
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
        Ok(cg)
    }

    /// Removes the slave's own (empty) cgroup directories, e.g. when a test or benchmark
    /// is done with them; best effort.
    pub fn remove_own(&self) {
        for d in self.cpu_dir.iter().chain(self.mem_dir.iter()) {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Names of the attempt cgroups that exist under the slave's directories.
    pub fn attempt_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for d in self.cpu_dir.iter().chain(self.mem_dir.iter()) {
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
    /// whatever still runs in it first. Returns the names removed.
    pub fn clean_stale(&self, keep: &BTreeSet<String>) -> Vec<String> {
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
    cpu: Option<PathBuf>,
    /// Directory of the memory controller (v2: the same as `cpu`).
    mem: Option<PathBuf>,
}

impl AttemptCgroup {
    /// The mode.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }

    /// Its distinct directories (one in v2, up to two in v1).
    fn dirs(&self) -> Vec<&PathBuf> {
        let mut v: Vec<&PathBuf> = self.cpu.iter().chain(self.mem.iter()).collect();
        v.dedup();
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

    /// Sets (or changes, live) the CPU limit; 0 removes it.
    pub fn set_cpu(&self, cpu_milli: u64) -> Result<(), CgroupError> {
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
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
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
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|s| oom_kills_of(&s))
            .unwrap_or(0)
    }

    /// Removes the cgroup's directories (best effort: a cgroup with processes cannot go; the
    /// next start's stale cleanup retries).
    pub fn remove(&self) {
        for d in self.dirs() {
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
mod tests {
    use super::*;

    const V1_SELF: &str = "4:memory:/outer/abc\n2:cpu,cpuacct:/\n1:name=systemd:/x\n0::/\n";

    fn touch(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn own_paths() {
        assert_eq!(own_path(V1_SELF, "memory").as_deref(), Some("/outer/abc"));
        assert_eq!(own_path(V1_SELF, "cpu").as_deref(), Some("/"));
        assert_eq!(own_path(V1_SELF, "").as_deref(), Some("/"));
        assert_eq!(own_path("0::/a/b\n", "").as_deref(), Some("/a/b"));
        assert_eq!(own_path("garbage", "cpu"), None);
    }

    #[test]
    fn quota_of_cpus() {
        assert_eq!(cfs_quota_us(500), Some(50_000));
        assert_eq!(cfs_quota_us(2500), Some(250_000));
        assert_eq!(cfs_quota_us(1), Some(CFS_QUOTA_MIN_US));
        assert_eq!(cfs_quota_us(0), None);
    }

    #[test]
    fn oom_counter_parsing() {
        assert_eq!(
            oom_kills_of("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
            2
        );
        assert_eq!(
            oom_kills_of("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"),
            1
        );
        assert_eq!(oom_kills_of("nothing"), 0);
    }

    #[test]
    fn fake_v1_tree_gets_the_expected_files() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        touch(&r.join("cpu/cpu.cfs_quota_us"), "-1\n");
        touch(
            &r.join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        // The slave's memory cgroup supports swap accounting.
        touch(
            &r.join("memory/outer/abc/hetsched-s1/memory.memsw.limit_in_bytes"),
            "9223372036854771712\n",
        );
        let cgs = Cgroups::detect(r, V1_SELF, "s1");
        assert_eq!(cgs.mode(), CgroupMode::V1);
        let cg = cgs
            .create(
                "task-17-1",
                Limits {
                    cpu_milli: 1500,
                    mem_mib: 64,
                },
            )
            .expect("create");
        let cpu = r.join("cpu/hetsched-s1/task-17-1");
        let mem = r.join("memory/outer/abc/hetsched-s1/task-17-1");
        let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "150000");
        assert_eq!(read(mem.join("memory.limit_in_bytes")), "67108864");
        assert_eq!(read(mem.join("memory.memsw.limit_in_bytes")), "67108864");
        assert_eq!(
            cg.procs_files(),
            vec![cpu.join("cgroup.procs"), mem.join("cgroup.procs")]
        );
        assert_eq!(cg.oom_counter_file(), Some(mem.join("memory.oom_control")));
        // Live change of the CPU limit.
        cg.set_cpu(500).expect("set cpu");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
        touch(
            &mem.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 1\n",
        );
        assert_eq!(cg.oom_kills(), 1);

        // Without swap accounting, swappiness closes swap instead.
        let r2 = tempfile::tempdir().expect("tempdir");
        touch(&r2.path().join("memory/memory.limit_in_bytes"), "1\n");
        let cgs2 = Cgroups::detect(r2.path(), V1_SELF, "s2");
        cgs2.create(
            "task-1-1",
            Limits {
                cpu_milli: 100,
                mem_mib: 1,
            },
        )
        .expect("create");
        let mem2 = r2.path().join("memory/outer/abc/hetsched-s2/task-1-1");
        assert_eq!(read(mem2.join("memory.swappiness")), "0");
        assert!(!mem2.join("memory.memsw.limit_in_bytes").exists());

        // Stale attempt cgroups go; kept ones stay.
        cgs.create(
            "task-18-2",
            Limits {
                cpu_milli: 100,
                mem_mib: 0,
            },
        )
        .expect("create");
        let keep: BTreeSet<String> = ["task-18-2".to_string()].into();
        assert_eq!(cgs.clean_stale(&keep), vec!["task-17-1".to_string()]);
        assert!(!cpu.exists() && !mem.exists());
        assert!(r.join("cpu/hetsched-s1/task-18-2").exists());
    }

    #[test]
    fn fake_v2_tree_gets_the_expected_files() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        touch(&r.join("cgroup.controllers"), "cpuset cpu io memory pids\n");
        touch(
            &r.join("a/b/hetsched-s1/cgroup.controllers"),
            "cpu memory pids\n",
        );
        touch(&r.join("a/b/hetsched-s1/memory.swap.max"), "max\n");
        let cgs = Cgroups::detect(r, "0::/a/b\n", "s1");
        assert_eq!(cgs.mode(), CgroupMode::V2);
        let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(r.join("a/b/cgroup.subtree_control")), "+cpu +memory");
        assert_eq!(
            read(r.join("a/b/hetsched-s1/cgroup.subtree_control")),
            "+cpu +memory"
        );
        let cg = cgs
            .create(
                "task-5-3",
                Limits {
                    cpu_milli: 500,
                    mem_mib: 100,
                },
            )
            .expect("create");
        let d = r.join("a/b/hetsched-s1/task-5-3");
        assert_eq!(read(d.join("cpu.max")), "50000 100000");
        assert_eq!(read(d.join("memory.max")), "104857600");
        assert_eq!(read(d.join("memory.swap.max")), "0");
        assert_eq!(cg.procs_files(), vec![d.join("cgroup.procs")]);
        assert_eq!(cg.oom_counter_file(), Some(d.join("memory.events")));
        cg.set_cpu(0).expect("unlimit");
        assert_eq!(read(d.join("cpu.max")), "max 100000");
        cg.set_cpu(2000).expect("two cores");
        assert_eq!(read(d.join("cpu.max")), "200000 100000");
        cg.remove();
        assert!(!d.exists());

        // Controllers not delegated: no limits, and the node says so.
        let r2 = tempfile::tempdir().expect("tempdir");
        touch(&r2.path().join("cgroup.controllers"), "cpu memory\n");
        touch(
            &r2.path().join("x/hetsched-s1/cgroup.controllers"),
            "pids\n",
        );
        assert_eq!(
            Cgroups::detect(r2.path(), "0::/x\n", "s1").mode(),
            CgroupMode::None
        );
    }

    #[test]
    fn no_hierarchy_means_none() {
        let root = tempfile::tempdir().expect("tempdir");
        let cgs = Cgroups::detect(root.path(), V1_SELF, "s");
        assert_eq!(cgs.mode(), CgroupMode::None);
        let cg = cgs
            .create(
                "task-1-1",
                Limits {
                    cpu_milli: 1,
                    mem_mib: 1,
                },
            )
            .expect("nothing to do");
        assert!(cg.procs_files().is_empty());
        assert_eq!(cg.oom_kills(), 0);
    }
}
