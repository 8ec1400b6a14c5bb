//! A local cluster of real `hetsched` processes on free loopback ports: what `hetsched up`,
//! the benchmarks, `hetsched chaos run` and the integration tests run. Each process logs to a
//! file in the data dir; each can be killed, paused, stopped and restarted with the same
//! arguments, alone or with the whole cluster.
//!
//! With [`ClusterSpec::netns`] (root and `ip`), each process runs instead in its own network
//! namespace with its own address on a private bridge ([`netns`]), where the chaos tool can
//! cut real links ([`firewall`]); everything made for it goes when the cluster stops.

pub mod firewall;
pub mod netns;
pub mod security;

pub use firewall::CutDirection;
pub use netns::ClusterNet;

use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a local cluster could not start (or a process restart), or a process not be signalled.
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
    /// The process to signal was not started (or was killed).
    #[error("{name} is not running")]
    NotRunning {
        /// `master-1`, `slave-2`.
        name: String,
    },
    /// A signal could not be sent.
    #[error("cannot signal {name}: {source}")]
    Signal {
        /// `master-1`, `slave-2`.
        name: String,
        /// Why.
        source: nix::errno::Errno,
    },
    /// Network namespaces need root.
    #[error("network namespaces need root (run as root, or without the namespaces)")]
    NotRoot,
    /// A tool network namespaces need is not installed.
    #[error(
        "network namespaces need `{tool}`, which is not on PATH or in /usr/sbin, /sbin \
             (`ip`: package iproute2; `nft`: package nftables)"
    )]
    MissingTool {
        /// `ip`, `nft`.
        tool: String,
    },
    /// A command that makes, changes or removes namespaces, links or rules failed.
    #[error("`{command}` failed: {detail}")]
    Net {
        /// The command (`ip netns add hs-…`).
        command: String,
        /// Its error output.
        detail: String,
    },
    /// Certificates could not be made or loaded.
    #[error("certificates: {0}")]
    Certs(String),
    /// Every 10.213.K.0/24 is taken on this machine (or the cluster needs over 240 addresses).
    #[error("no free private /24 in 10.213.1.0-10.213.254.0 for the namespaces' bridge")]
    NoSubnet,
}

/// One child process that can be killed and restarted with the same arguments. Dropping it
/// kills it (SIGKILL).
pub struct LocalProc {
    /// Name (`master-1`, `slave-2`).
    pub name: String,
    /// Its log file: stderr, appended to across restarts.
    pub log: PathBuf,
    /// The network namespace it runs in (`/var/run/netns/NAME`), if not the launcher's.
    pub netns: Option<PathBuf>,
    exe: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl LocalProc {
    /// Starts `exe args` as `name`, with `env` added to this process's environment, logging
    /// to `log`.
    pub fn spawn(
        exe: &Path,
        name: &str,
        args: Vec<String>,
        log: PathBuf,
        env: &[(String, String)],
    ) -> Result<Self, LaunchError> {
        Self::spawn_in(None, exe, name, args, log, env)
    }

    /// As [`spawn`](Self::spawn), in the network namespace at `netns`
    /// (`/var/run/netns/NAME`) when given: the child enters it between fork and exec, so
    /// its pid, signals and restarts are its own, and it sees the same mounts as the launcher
    /// (`ip netns exec` would remount `/sys`, hiding the slaves' cgroups).
    pub fn spawn_in(
        netns: Option<&Path>,
        exe: &Path,
        name: &str,
        args: Vec<String>,
        log: PathBuf,
        env: &[(String, String)],
    ) -> Result<Self, LaunchError> {
        let mut p = Self {
            name: name.to_string(),
            log,
            netns: netns.map(Path::to_path_buf),
            exe: exe.to_path_buf(),
            args,
            env: env.to_vec(),
            child: None,
        };
        p.restart()?;
        Ok(p)
    }

    /// Adds `args` to its arguments for its next [`restart`](Self::restart) (a test runs a
    /// master with flags of its own).
    pub fn add_args(&mut self, args: &[&str]) {
        self.args.extend(args.iter().map(|a| a.to_string()));
    }

    /// Starts the process again (after [`kill9`](Self::kill9) or [`stop`](Self::stop));
    /// appends to its log. Nothing to do while it was not killed.
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
        let spawn_err = |source| LaunchError::Spawn {
            name: self.name.clone(),
            source,
        };
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(path) = &self.netns {
            let ns = std::fs::File::open(path).map_err(spawn_err)?;
            // SAFETY: runs in the child between fork and exec; setns(2) is one system call
            // on a descriptor opened before the fork (no allocation, no locks).
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let child = cmd.spawn().map_err(spawn_err)?;
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

    /// Its log so far (empty when it cannot be read).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process hangs (its connections stay open) until [`resume`](Self::resume).
    pub fn pause(&self) -> Result<(), LaunchError> {
        self.signal(Signal::SIGSTOP)
    }

    /// SIGCONT, after [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), LaunchError> {
        self.signal(Signal::SIGCONT)
    }

    fn signal(&self, sig: Signal) -> Result<(), LaunchError> {
        let pid = self.pid().ok_or_else(|| LaunchError::NotRunning {
            name: self.name.clone(),
        })?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).map_err(|source| {
            LaunchError::Signal {
                name: self.name.clone(),
                source,
            }
        })
    }

    /// SIGTERM, then SIGKILL once `grace` has passed.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), Signal::SIGTERM);
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

impl Drop for LocalProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// What one slave offers.
#[derive(Clone, Debug)]
pub struct SlaveSpec {
    /// Cores.
    pub cpus: u32,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// Emulated GPUs (model T4).
    pub gpus: u32,
    /// More `hetsched slave` flags (engines, profiling).
    pub extra_args: Vec<String>,
}

/// What [`LocalCluster::launch`] starts.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The `hetsched` binary to run; `None`: this executable (tests pass
    /// `env!("CARGO_BIN_EXE_hetsched")`).
    pub exe: Option<PathBuf>,
    /// Masters, ids 1..=n.
    pub masters: u32,
    /// More `hetsched master` flags, for every master (`--job-gc-after off`).
    pub master_args: Vec<String>,
    /// Whether the masters serve HTTP (`--http`: the API, /metrics, the dashboard).
    pub master_http: bool,
    /// The slaves.
    pub slaves: Vec<SlaveSpec>,
    /// Whether the slaves serve HTTP (`--http`: /metrics).
    pub slave_http: bool,
    /// Variables added to every process's environment (`HETSCHED_LOG`).
    pub env: Vec<(String, String)>,
    /// Each process in its own network namespace on a private bridge ([`ClusterNet`]),
    /// listening on its namespace's address (root and `ip` needed).
    pub netns: bool,
    /// Run `--insecure` (plain TCP, no authentication) instead of with certificates.
    pub insecure: bool,
    /// The CA that signs the processes' certificates (`ca.crt`, `ca.key`, and `client/`
    /// with the administrator's certificate, as [`security::make_ca`] makes it); `None`:
    /// the launching process's own ([`security::process_ca`]).
    pub ca_dir: Option<PathBuf>,
}

impl Default for ClusterSpec {
    /// One master serving HTTP, no slaves, this executable.
    fn default() -> Self {
        Self {
            exe: None,
            masters: 1,
            master_args: Vec::new(),
            master_http: true,
            slaves: Vec::new(),
            slave_http: false,
            env: Vec::new(),
            netns: false,
            insecure: false,
            ca_dir: None,
        }
    }
}

impl ClusterSpec {
    /// The masters (with `master_args`) and slaves of `LocalCluster::start_with`.
    fn simple(
        exe: Option<&Path>,
        masters: u32,
        master_args: &[String],
        slaves: &[SlaveSpec],
    ) -> Self {
        Self {
            exe: exe.map(Path::to_path_buf),
            masters,
            master_args: master_args.to_vec(),
            slaves: slaves.to_vec(),
            ..Self::default()
        }
    }
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
    /// The slaves' listen addresses, same order.
    pub slave_addrs: Vec<String>,
    /// Masters' HTTP addresses (API, /metrics, the dashboard at /ui), same order; empty
    /// unless [`ClusterSpec::master_http`].
    pub master_http: Vec<String>,
    /// Slaves' HTTP addresses, same order; empty unless [`ClusterSpec::slave_http`].
    pub slave_http: Vec<String>,
    /// Where the cluster's data and logs are.
    pub dir: std::path::PathBuf,
    /// The namespaces of [`ClusterSpec::netns`] (`None` on loopback); removed at stop.
    pub net: Option<ClusterNet>,
    /// The client certificates directory (`HETSCHED_CERTS_DIR` for the CLI); `None` when
    /// the cluster runs `--insecure`.
    pub client_certs: Option<PathBuf>,
}

/// Pids of live processes whose environment mentions `dir` (a task's `HETSCHED_CPUS_FILE`
/// lies under its slave's data dir), optionally also carrying the variable `marker`
/// (`HETSCHED_TASK_ID=3`): the processes of one cluster, not of another running beside it.
pub fn processes_under(dir: &Path, marker: Option<&str>) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let needle = dir.display().to_string();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                let ours = vars
                    .iter()
                    .any(|kv| String::from_utf8_lossy(kv).contains(needle.as_str()));
                ours && marker.is_none_or(|m| vars.contains(&m.as_bytes()))
            })
        })
        .collect()
}

/// Kills the task processes of the cluster in `dir` (they outlive their slave agents by
/// design).
pub fn kill_tasks_under(dir: &Path) {
    let me = std::process::id() as i32;
    for pid in processes_under(dir, None).into_iter().filter(|p| *p != me) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// A loopback address on a port below the ephemeral range (see `hetsched_common::ports` for
/// why).
fn free_addr() -> Result<String, LaunchError> {
    let port = hetsched_common::ports::pick_local_port().ok_or(LaunchError::NoPort)?;
    Ok(format!("127.0.0.1:{port}"))
}

/// `n` free loopback addresses.
fn free_addrs(n: usize) -> Result<Vec<String>, LaunchError> {
    (0..n).map(|_| free_addr()).collect()
}

/// The addresses of one cluster's processes.
struct Addrs {
    masters: Vec<String>,
    admin: Vec<String>,
    master_http: Vec<String>,
    slaves: Vec<String>,
    slave_http: Vec<String>,
}

/// The ports of a process in its own namespace (its address is its own: fixed ports do).
const NS_PORTS: (u16, u16, u16) = (7000, 7001, 7080);

impl Addrs {
    /// Free loopback ports, or the namespaces' addresses (`net`: masters first, in order).
    fn pick(spec: &ClusterSpec, net: Option<&ClusterNet>) -> Result<Self, LaunchError> {
        let n_masters = spec.masters as usize;
        let n_slaves = spec.slaves.len();
        let Some(net) = net else {
            let mut a = Addrs {
                masters: Vec::new(),
                admin: Vec::new(),
                master_http: Vec::new(),
                slaves: Vec::new(),
                slave_http: Vec::new(),
            };
            for _ in 0..n_masters {
                a.masters.push(free_addr()?);
                a.admin.push(free_addr()?);
                if spec.master_http {
                    a.master_http.push(free_addr()?);
                }
            }
            a.slaves = free_addrs(n_slaves)?;
            if spec.slave_http {
                a.slave_http = free_addrs(n_slaves)?;
            }
            return Ok(a);
        };
        let (listen, admin, http) = NS_PORTS;
        let at = |i: usize, port: u16| format!("{}:{port}", net.nodes[i].ip);
        let masters = 0..n_masters;
        let slaves = n_masters..n_masters + n_slaves;
        Ok(Addrs {
            masters: masters.clone().map(|i| at(i, listen)).collect(),
            admin: masters.clone().map(|i| at(i, admin)).collect(),
            master_http: if spec.master_http {
                masters.map(|i| at(i, http)).collect()
            } else {
                Vec::new()
            },
            slaves: slaves.clone().map(|i| at(i, listen)).collect(),
            slave_http: if spec.slave_http {
                slaves.map(|i| at(i, http)).collect()
            } else {
                Vec::new()
            },
        })
    }
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
        let spec = ClusterSpec::simple(None, n_masters, master_extra_args, slaves);
        Self::launch(dir, &spec)
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
        let spec = ClusterSpec::simple(Some(exe), n_masters, master_extra_args, slaves);
        Self::launch(dir, &spec)
    }

    /// Starts the cluster `spec` describes under `dir`: `master-ID` and `slave-N` data dirs
    /// and `NAME.log` files there, every master with an admin listener (loopback; with
    /// [`ClusterSpec::netns`], every process in its namespace on its address there).
    pub fn launch(dir: &Path, spec: &ClusterSpec) -> Result<Self, LaunchError> {
        let exe = match &spec.exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().map_err(LaunchError::Exe)?,
        };
        std::fs::create_dir_all(dir).map_err(|source| LaunchError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let n_slaves = spec.slaves.len();
        let names: Vec<String> = (1..=spec.masters)
            .map(|id| format!("master-{id}"))
            .chain((1..=n_slaves).map(|i| format!("slave-{i}")))
            .collect();
        let net = if spec.netns {
            Some(ClusterNet::create(&names)?)
        } else {
            None
        };
        let addrs = Addrs::pick(spec, net.as_ref())?;
        let peers = addrs
            .masters
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = LocalCluster {
            masters: Vec::new(),
            master_addrs: addrs.masters.clone(),
            admin_addrs: addrs.admin.clone(),
            slaves: Vec::new(),
            slave_addrs: addrs.slaves.clone(),
            master_http: addrs.master_http.clone(),
            slave_http: addrs.slave_http.clone(),
            dir: dir.to_path_buf(),
            net,
            client_certs: None,
        };
        let ca = match (&spec.insecure, &spec.ca_dir) {
            (true, _) => None,
            (false, Some(ca)) => Some(ca.clone()),
            (false, None) => Some(security::process_ca()?),
        };
        if let Some(ca) = &ca {
            security::install_client(ca)?;
            cluster.client_certs = Some(security::client_dir_of(ca));
        }
        let security_flags = |proc_name: &str, role, name: &str| match &ca {
            None => Ok(vec!["--insecure".to_string()]),
            Some(ca) => security::process_flags(ca, dir, proc_name, role, name),
        };
        let (master_addrs, admin_addrs) = (&addrs.masters, &addrs.admin);
        let (slave_addrs, master_http, slave_http) =
            (&addrs.slaves, &addrs.master_http, &addrs.slave_http);
        let start = |net: Option<&ClusterNet>, name: &str, args: Vec<String>| {
            let log = dir.join(format!("{name}.log"));
            let ns = net.and_then(|n| n.ns_path(name));
            LocalProc::spawn_in(ns.as_deref(), &exe, name, args, log, &spec.env)
        };
        for (i, addr) in master_addrs.iter().enumerate() {
            let id = i + 1;
            let name = format!("master-{id}");
            let mut args = vec![
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
                // listener (loopback, or the namespace's address on the private bridge) is
                // on for them.
                "--admin".into(),
                admin_addrs[i].clone(),
            ];
            if let Some(http) = master_http.get(i) {
                args.extend(["--http".into(), http.clone()]);
            }
            args.extend(security_flags(
                &name,
                hetsched_common::certs::Role::Master,
                &id.to_string(),
            )?);
            args.extend(spec.master_args.iter().cloned());
            let p = start(cluster.net.as_ref(), &name, args)?;
            cluster.masters.push(p);
        }
        for (i, s) in spec.slaves.iter().enumerate() {
            let name = format!("slave-{}", i + 1);
            let mut args = vec![
                "slave".into(),
                "--listen".into(),
                slave_addrs[i].clone(),
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
            if let Some(http) = slave_http.get(i) {
                args.extend(["--http".into(), http.clone()]);
            }
            args.extend(security_flags(
                &name,
                hetsched_common::certs::Role::Slave,
                &name,
            )?);
            args.extend(s.extra_args.iter().cloned());
            let p = start(cluster.net.as_ref(), &name, args)?;
            cluster.slaves.push(p);
        }
        Ok(cluster)
    }

    /// Every process, masters first (in id order), then slaves.
    pub fn procs_mut(&mut self) -> impl Iterator<Item = &mut LocalProc> {
        self.masters.iter_mut().chain(self.slaves.iter_mut())
    }

    /// Stops every process: SIGTERM, then SIGKILL after a grace period.
    /// Tasks outlive their slave agents by design (supervised attempts), so the tasks of
    /// this cluster — processes whose environment names a file under its directory — are
    /// killed too: a local cluster leaves nothing running.
    /// The namespaces of [`ClusterSpec::netns`] go too.
    pub fn stop(&mut self) {
        for p in self.slaves.iter_mut().chain(self.masters.iter_mut()) {
            p.stop(Duration::from_secs(3));
        }
        kill_tasks_under(&self.dir);
        if let Some(net) = &mut self.net {
            net.teardown();
        }
    }

    /// As [`stop`](Self::stop) with no grace period: SIGKILL every process, then the tasks
    /// (the whole cluster crashes at once; tests tear down this way).
    pub fn kill9(&mut self) {
        for p in self.slaves.iter_mut().chain(self.masters.iter_mut()) {
            p.kill9();
        }
        kill_tasks_under(&self.dir);
        if let Some(net) = &mut self.net {
            net.teardown();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
