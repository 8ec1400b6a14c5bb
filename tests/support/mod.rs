//! Test harness: real clusters of real `hetsched` processes on loopback, in temp dirs.
//! Every wait polls a condition with a deadline; nothing sleeps and hopes.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_hetsched");

/// A unique scratch directory, removed on drop unless the test failed.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "hetsched-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed; logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A loopback port below the ephemeral range (see `hetsched_common::ports` for why).
pub fn free_port() -> u16 {
    hetsched_common::ports::pick_local_port().expect("free port")
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub struct Proc {
    pub name: String,
    pub args: Vec<String>,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl Proc {
    pub fn start(name: &str, args: Vec<String>, dir: &Path) -> Self {
        let mut p = Proc {
            name: name.into(),
            args,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        p.restart();
        p
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        let child = Command::new(BIN)
            .args(&self.args)
            .env("HETSCHED_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hetsched");
        self.child = Some(child);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub struct Cluster {
    pub dir: Scratch,
    pub masters: Vec<Proc>,
    pub master_addrs: Vec<String>,
    /// Admin listeners of the masters (bench and fault requests), same order.
    pub admin_addrs: Vec<String>,
    pub slaves: Vec<Proc>,
    pub slave_addrs: Vec<String>,
}

impl Cluster {
    /// `n_masters` masters and `n_slaves` slaves with `cpus` cores each.
    pub fn start(name: &str, n_masters: usize, n_slaves: usize, cpus: u32) -> Self {
        Self::start_with(name, n_masters, n_slaves, cpus, &[])
    }

    /// As [`start`](Self::start), with extra flags for every master.
    pub fn start_with(
        name: &str,
        n_masters: usize,
        n_slaves: usize,
        cpus: u32,
        master_flags: &[&str],
    ) -> Self {
        Self::start_full(name, n_masters, n_slaves, cpus, master_flags, &[])
    }

    /// As [`start_with`](Self::start_with), with extra flags for every slave too.
    pub fn start_full(
        name: &str,
        n_masters: usize,
        n_slaves: usize,
        cpus: u32,
        master_flags: &[&str],
        slave_flags: &[&str],
    ) -> Self {
        let dir = Scratch::new(name);
        let master_addrs: Vec<String> = (0..n_masters)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let admin_addrs: Vec<String> = (0..n_masters)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        for (c, a) in master_addrs.iter().zip(&admin_addrs) {
            register_admin(c, a);
        }
        let peers = master_addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let masters = master_addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let id = i + 1;
                let mut args: Vec<String> = vec![
                    "master".into(),
                    "--id".into(),
                    id.to_string(),
                    "--listen".into(),
                    addr.clone(),
                    "--peers".into(),
                    peers.clone(),
                    "--data-dir".into(),
                    dir.path()
                        .join(format!("master-{id}"))
                        .display()
                        .to_string(),
                    "--admin".into(),
                    admin_addrs[i].clone(),
                ];
                args.extend(master_flags.iter().map(|f| f.to_string()));
                Proc::start(&format!("master-{id}"), args, dir.path())
            })
            .collect();
        let slave_addrs: Vec<String> = (0..n_slaves)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let slaves = slave_addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let n = i + 1;
                let mut args: Vec<String> = vec![
                    "slave".into(),
                    "--listen".into(),
                    addr.clone(),
                    "--masters".into(),
                    master_addrs.join(","),
                    "--data-dir".into(),
                    dir.path().join(format!("slave-{n}")).display().to_string(),
                    "--cpus".into(),
                    cpus.to_string(),
                    "--mem".into(),
                    "4096".into(),
                    "--name".into(),
                    format!("slave-{n}"),
                ];
                args.extend(slave_flags.iter().map(|f| f.to_string()));
                Proc::start(&format!("slave-{n}"), args, dir.path())
            })
            .collect();
        Cluster {
            dir,
            masters,
            master_addrs,
            admin_addrs,
            slaves,
            slave_addrs,
        }
    }

    pub fn masters_arg(&self) -> String {
        self.master_addrs.join(",")
    }

    /// Runs a client command against the cluster.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli_with(&self.masters_arg(), args)
    }

    /// Runs a client command with `--json` and parses its last stdout line.
    pub fn json(&self, args: &[&str]) -> Option<Value> {
        json_with(&self.masters_arg(), args)
    }

    /// Status of one master from its own applied state.
    pub fn local_status(&self, i: usize) -> Option<Value> {
        json_with(&self.master_addrs[i], &["status", "--local"])
    }

    pub fn wait_leader(&self, timeout: Duration) -> u64 {
        wait_for("a leader", timeout, || {
            self.json(&["status"])
                .and_then(|s| s.get("leader").and_then(Value::as_u64))
        })
    }

    pub fn wait_nodes_up(&self, n: u64, timeout: Duration) {
        wait_for(&format!("{n} nodes up"), timeout, || {
            let s = self.json(&["status"])?;
            (s["nodes"]["up"].as_u64()? >= n).then_some(())
        })
    }

    pub fn tasks(&self) -> Vec<Value> {
        self.json(&["tasks"])
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until every master's own applied state has the same hash; returns it.
    pub fn wait_same_hash(&self, timeout: Duration) -> String {
        wait_for("equal state hashes on every master", timeout, || {
            let hashes: Vec<(u64, String)> = (0..self.masters.len())
                .map(|i| {
                    let s = self.local_status(i)?;
                    Some((
                        s["applied_index"].as_u64()?,
                        s["state_hash"].as_str()?.to_string(),
                    ))
                })
                .collect::<Option<_>>()?;
            let first = hashes.first()?.clone();
            hashes.iter().all(|h| *h == first).then_some(first.1)
        })
    }

    pub fn dump_logs(&self) {
        for p in self.masters.iter().chain(&self.slaves) {
            let text = p.log_text();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            eprintln!("----- {} (last lines) -----", p.name);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// Pids of live processes whose environment mentions `dir` (tasks carry their attempt's
/// `HETSCHED_CPUS_FILE` under their slave's data dir), optionally also carrying `marker`
/// (`HETSCHED_TASK_ID=3`): the processes of one test cluster, not of another running beside it.
pub fn processes_under(dir: &Path, marker: Option<&str>) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let dir = dir.display().to_string();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                let ours = vars
                    .iter()
                    .any(|kv| String::from_utf8_lossy(kv).contains(dir.as_str()));
                ours && marker.is_none_or(|m| vars.contains(&m.as_bytes()))
            })
        })
        .collect()
}

impl Drop for Cluster {
    /// Tasks outlive their slave agents by design (supervised attempts); a test cluster's
    /// tasks must not outlive the test.
    fn drop(&mut self) {
        for p in self.slaves.iter_mut() {
            p.kill9();
        }
        for pid in processes_under(self.dir.path(), None) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

pub fn cli_with(masters: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--masters")
        .arg(masters)
        .args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched")
}

pub fn json_with(masters: &str, args: &[&str]) -> Option<Value> {
    // `--json` goes right after the subcommand: after a `--` it would be part of a task's command.
    let mut a: Vec<&str> = args.to_vec();
    a.insert(1.min(a.len()), "--json");
    let out = cli_with(masters, &a);
    if !out.status.success() {
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last()?).ok()
}

/// Cluster address → admin address of every master the tests started.
fn admin_map() -> &'static std::sync::Mutex<std::collections::HashMap<String, String>> {
    static MAP: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
        std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
}

/// Remembers that the master at cluster address `cluster` serves admin requests at `admin`.
pub fn register_admin(cluster: &str, admin: &str) {
    if let Ok(mut m) = admin_map().lock() {
        m.insert(cluster.to_string(), admin.to_string());
    }
}

/// Direct wire access to one process (for requests the CLI does not expose, like faults).
/// Benchmark and fault requests go to the master's admin listener (CONTRACT.md): the
/// cluster port refuses them.
pub fn wire_call(
    addr: &str,
    req: hetsched_common::protocol::ClientRequest,
    timeout: Duration,
) -> Result<hetsched_common::protocol::Message, String> {
    use hetsched_common::protocol::ClientRequest;
    let admin_only = matches!(
        req,
        ClientRequest::BenchPropose { .. }
            | ClientRequest::BenchCheck { .. }
            | ClientRequest::SetFaults(_)
    );
    let routed = admin_only
        .then(|| admin_map().lock().ok()?.get(addr).cloned())
        .flatten();
    wire_call_direct(routed.as_deref().unwrap_or(addr), req, timeout)
}

/// [`wire_call`] to exactly `addr`, whatever the request.
pub fn wire_call_direct(
    addr: &str,
    req: hetsched_common::protocol::ClientRequest,
    timeout: Duration,
) -> Result<hetsched_common::protocol::Message, String> {
    use hetsched_common::protocol::Message;
    use hetsched_common::wire::Connection;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let c = Connection::connect(addr, Duration::from_secs(1))
            .await
            .map_err(|e| e.to_string())?;
        c.call(Message::Client(req), timeout)
            .await
            .map_err(|e| e.to_string())
    })
}
