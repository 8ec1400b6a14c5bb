//! A local cluster of real `hetsched` processes on free loopback ports: what `hetsched up`,
//! the benchmarks, `hetsched chaos run` and the integration tests run. Each process logs to a
//! file in the data dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a local cluster could not start (or a process restart).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The `hetsched` executable to run was not found.
    #[error("cannot find the hetsched executable: {0}")]
    Exe(std::io::Error),
    /// A directory or log file could not be made.
    #[error("cannot create {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {name}: {source}")]
    Spawn {
        /// `master-1`, `slave-2`.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// No loopback port was free.
    #[error("cannot find a free loopback port in 20000-32699")]
    NoPort,
}

/// One child process that can be killed and restarted with the same arguments.
pub struct LocalProc {
    /// Name (`master-1`, `slave-2`).
    pub name: String,
    exe: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl LocalProc {
    fn start(
        exe: &Path,
        name: String,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<Self, LaunchError> {
        let mut p = Self {
            name,
            exe: exe.to_path_buf(),
            args,
            log,
            child: None,
        };
        p.restart()?;
        Ok(p)
    }

    /// Starts the process again (after [`kill9`](Self::kill9)); appends to its log.
    pub fn restart(&mut self) -> Result<(), LaunchError> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| LaunchError::Io {
                path: self.log.display().to_string(),
                source,
            })?;
        let child = Command::new(&self.exe)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                name: self.name.clone(),
                source,
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the process runs (started and not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL once `grace` has passed.
    fn terminate(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + grace;
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// What one slave offers.
#[derive(Clone, Debug)]
pub struct SlaveSpec {
    /// Cores.
    pub cpus: u32,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// Emulated GPUs.
    pub gpus: u32,
    /// More `hetsched slave` flags (engines, profiling).
    pub extra_args: Vec<String>,
}

/// The running cluster. Dropping it stops every process.
pub struct LocalCluster {
    /// Masters, index i is master id i + 1.
    pub masters: Vec<LocalProc>,
    /// Their cluster addresses.
    pub master_addrs: Vec<String>,
    /// Masters' admin addresses (benchmark and fault requests), same order.
    pub admin_addrs: Vec<String>,
    /// Slaves.
    pub slaves: Vec<LocalProc>,
    /// Masters' HTTP addresses (API, /metrics, the dashboard at /ui), same order.
    pub master_http: Vec<String>,
    /// Where the cluster's data and logs are.
    pub dir: std::path::PathBuf,
}

/// Pids of live processes whose environment mentions `dir` (a task's `HETSCHED_CPUS_FILE`
/// lies under its slave's data dir).
fn processes_under(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let needle = dir.display().to_string();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|kv| String::from_utf8_lossy(kv).contains(needle.as_str()))
            })
        })
        .collect()
}

/// Kills the task processes of the cluster in `dir` (they outlive their slave agents by
/// design).
pub fn kill_tasks_under(dir: &Path) {
    let me = std::process::id() as i32;
    for pid in processes_under(dir).into_iter().filter(|p| *p != me) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A loopback port below the ephemeral range (see `hetsched_common::ports` for why).
fn free_port() -> Result<u16, LaunchError> {
    hetsched_common::ports::pick_local_port().ok_or(LaunchError::NoPort)
}

impl LocalCluster {
    /// Starts `n_masters` masters and the given slaves under `dir`, running this executable
    /// (the `hetsched` binary itself).
    pub fn start(dir: &Path, n_masters: u32, slaves: &[SlaveSpec]) -> Result<Self, LaunchError> {
        Self::start_with(dir, n_masters, &[], slaves)
    }

    /// As [`start`](Self::start), with more `hetsched master` flags (`--job-gc-after off`).
    pub fn start_with(
        dir: &Path,
        n_masters: u32,
        master_extra_args: &[String],
        slaves: &[SlaveSpec],
    ) -> Result<Self, LaunchError> {
        let exe = std::env::current_exe().map_err(LaunchError::Exe)?;
        Self::start_exe(&exe, dir, n_masters, master_extra_args, slaves)
    }

    /// As [`start_with`](Self::start_with), running the `hetsched` binary at `exe` (tests
    /// pass `env!("CARGO_BIN_EXE_hetsched")`).
    pub fn start_exe(
        exe: &Path,
        dir: &Path,
        n_masters: u32,
        master_extra_args: &[String],
        slaves: &[SlaveSpec],
    ) -> Result<Self, LaunchError> {
        std::fs::create_dir_all(dir).map_err(|source| LaunchError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let mut master_addrs = Vec::new();
        let mut admin_addrs = Vec::new();
        let mut master_http = Vec::new();
        for _ in 0..n_masters {
            master_addrs.push(format!("127.0.0.1:{}", free_port()?));
            admin_addrs.push(format!("127.0.0.1:{}", free_port()?));
            master_http.push(format!("127.0.0.1:{}", free_port()?));
        }
        let peers = master_addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = LocalCluster {
            masters: Vec::new(),
            master_addrs: master_addrs.clone(),
            admin_addrs: admin_addrs.clone(),
            slaves: Vec::new(),
            master_http: master_http.clone(),
            dir: dir.to_path_buf(),
        };
        for (i, addr) in master_addrs.iter().enumerate() {
            let id = i + 1;
            let name = format!("master-{id}");
            let args = vec![
                "master".into(),
                "--id".into(),
                id.to_string(),
                "--listen".into(),
                addr.clone(),
                "--peers".into(),
                peers.clone(),
                "--data-dir".into(),
                dir.join(&name).display().to_string(),
                // The launcher's clusters are for demos, benchmarks and tests: the admin
                // listener (loopback only) is on for them.
                "--admin".into(),
                admin_addrs[i].clone(),
                "--http".into(),
                master_http[i].clone(),
            ];
            let mut args = args;
            args.extend(master_extra_args.iter().cloned());
            let log = dir.join(format!("{name}.log"));
            cluster
                .masters
                .push(LocalProc::start(exe, name, args, log)?);
        }
        for (i, s) in slaves.iter().enumerate() {
            let name = format!("slave-{}", i + 1);
            let mut args = vec![
                "slave".into(),
                "--listen".into(),
                format!("127.0.0.1:{}", free_port()?),
                "--masters".into(),
                master_addrs.join(","),
                "--data-dir".into(),
                dir.join(&name).display().to_string(),
                "--cpus".into(),
                s.cpus.to_string(),
                "--mem".into(),
                s.mem_mib.to_string(),
                "--name".into(),
                name.clone(),
            ];
            if s.gpus > 0 {
                args.extend([
                    "--gpus".into(),
                    s.gpus.to_string(),
                    "--gpu-model".into(),
                    "T4".into(),
                ]);
            }
            args.extend(s.extra_args.iter().cloned());
            let log = dir.join(format!("{name}.log"));
            cluster.slaves.push(LocalProc::start(exe, name, args, log)?);
        }
        Ok(cluster)
    }

    /// Stops every process: SIGTERM, then SIGKILL after a grace period.
    /// Tasks outlive their slave agents by design (supervised attempts), so the tasks of
    /// this cluster — processes whose environment names a file under its directory — are
    /// killed too: a local cluster leaves nothing running.
    pub fn stop(&mut self) {
        for p in self.slaves.iter_mut().chain(self.masters.iter_mut()) {
            p.terminate(Duration::from_secs(3));
        }
        kill_tasks_under(&self.dir);
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
