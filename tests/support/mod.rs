//! Test harness: real clusters of real `hetsched` processes on loopback, in temp dirs,
//! started by the launcher the CLI uses (`hetsched::local`); here only what tests add on top
//! of it: scratch dirs, waits, running the CLI and parsing its JSON, wire requests.
//! Every wait polls a condition with a deadline; nothing sleeps and hopes.

#![allow(dead_code)]

use hetsched::local::{ClusterSpec, LocalCluster, SlaveSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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

/// Pids of the processes (tasks) of a cluster's dir.
#[allow(unused_imports)]
pub use hetsched::local::processes_under;
/// One `hetsched` process of a test: the launcher's, killed (SIGKILL) when dropped.
pub use hetsched::local::LocalProc as Proc;

/// The environment of every process a test starts: `info` logs, whatever the test run's
/// `HETSCHED_LOG` or `RUST_LOG` say (tests read the logs).
fn test_env() -> Vec<(String, String)> {
    vec![("HETSCHED_LOG".into(), "info".into())]
}

/// Starts `hetsched ARGS` as `name` beside a cluster, logging to `dir/NAME.log`. A
/// `master` or `slave` without `--insecure` or `--certs-dir` gets a certificate from the
/// test process's CA (the one every launched cluster uses), named by its `--id` or
/// `--name`, as the launcher does.
pub fn start_proc(name: &str, args: Vec<String>, dir: &Path) -> Proc {
    let mut args = args;
    let role = match args.first().map(String::as_str) {
        Some("master") => Some((hetsched_common::certs::Role::Master, "--id")),
        Some("slave") => Some((hetsched_common::certs::Role::Slave, "--name")),
        _ => None,
    };
    let chosen = args.iter().any(|a| a == "--insecure" || a == "--certs-dir");
    if let (Some((role, flag)), false) = (role, chosen) {
        let cert_name = args
            .iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| name.to_string());
        let ca = hetsched::local::security::process_ca().expect("the test CA");
        let flags = hetsched::local::security::process_flags(&ca, dir, name, role, &cert_name)
            .expect("issue a certificate");
        args.extend(flags);
    }
    let log = dir.join(format!("{name}.log"));
    Proc::spawn(Path::new(BIN), name, args, log, &test_env()).expect("spawn hetsched")
}

/// A cluster of the launcher (`hetsched::local`) in a [`Scratch`] dir, with the client
/// conveniences of the tests. Its fields (`masters`, `slave_addrs`, ...) are the launcher's,
/// through `Deref`; `dir` is the scratch dir.
pub struct Cluster {
    /// The processes (dropped, and so stopped, before the scratch dir goes).
    pub local: LocalCluster,
    pub dir: Scratch,
}

impl std::ops::Deref for Cluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.local
    }
}

impl std::ops::DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.local
    }
}

impl Cluster {
    /// The flags of a slave `name` of this cluster beside it (for [`start_proc`]): a free
    /// port, its data in `data`, `cpus` cores and 2 GiB.
    pub fn slave_args(&self, name: &str, data: &Path, cpus: u32) -> Vec<String> {
        let port = free_port().to_string();
        let (data, cpus) = (data.display().to_string(), cpus.to_string());
        let args = [
            "slave",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--masters",
        ];
        let rest = [
            "--data-dir",
            &data,
            "--name",
            name,
            "--cpus",
            &cpus,
            "--mem",
            "2048",
        ];
        let mut out: Vec<String> = args.map(String::from).to_vec();
        out.push(self.masters_arg());
        out.extend(rest.map(String::from));
        out
    }

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
        let slave = SlaveSpec {
            cpus,
            mem_mib: 4096,
            gpus: 0,
            extra_args: strings(slave_flags),
        };
        Self::launch(
            name,
            ClusterSpec {
                masters: n_masters as u32,
                master_args: strings(master_flags),
                master_http: false,
                slaves: vec![slave; n_slaves],
                ..test_spec()
            },
        )
    }

    /// Starts `spec` in a fresh scratch dir named after `name`; admin requests to its
    /// masters are routed (see [`wire_call`]).
    pub fn launch(name: &str, spec: ClusterSpec) -> Self {
        let dir = Scratch::new(name);
        let local = LocalCluster::launch(dir.path(), &spec).expect("launch the cluster");
        for (c, a) in local.master_addrs.iter().zip(&local.admin_addrs) {
            register_admin(c, a);
        }
        Cluster { local, dir }
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

    /// Runs `scenario` against this cluster; when it panics, the processes' last log lines
    /// are printed before the panic goes on.
    pub fn scenario(&self, scenario: impl FnOnce(&Cluster)) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(self)));
        if let Err(p) = result {
            self.dump_logs();
            std::panic::resume_unwind(p);
        }
    }

    /// `submit ARGS --json`; the job's id (panics, with the CLI's answer, when refused).
    pub fn submit_id(&self, args: &[&str]) -> u64 {
        let mut a = vec!["submit"];
        a.extend_from_slice(args);
        let v = self
            .json(&a)
            .unwrap_or_else(|| panic!("submit {args:?}: {:?}", self.cli(&a)));
        v["job_id"].as_u64().expect("job_id")
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

impl Drop for Cluster {
    /// No grace period: every process and task is killed at once. Tasks outlive their
    /// slave agents by design (supervised attempts); a test cluster's tasks must not
    /// outlive the test.
    fn drop(&mut self) {
        self.local.kill9();
    }
}

/// What every test cluster runs: the test build's `hetsched`, logging at `info`.
pub fn test_spec() -> ClusterSpec {
    ClusterSpec {
        exe: Some(PathBuf::from(BIN)),
        env: test_env(),
        ..ClusterSpec::default()
    }
}

fn strings(flags: &[&str]) -> Vec<String> {
    flags.iter().map(|f| f.to_string()).collect()
}

/// A command's exit code and output, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn cli_with(masters: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    // The clusters of this test process run secured with its CA: the CLI uses its
    // administrator's certificate.
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        cmd.env("HETSCHED_CERTS_DIR", certs);
    }
    cmd.arg("--masters")
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
/// Benchmark and fault requests go to the master's admin listener (docs/CONTRACT.md): the
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

/// A stamp a task wrote in the cluster's scratch dir (see [`stamped`]): nanoseconds since the epoch.
pub fn stamp(c: &Cluster, name: &str) -> u128 {
    let p = c.dir.path().join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", p.display()))
}

/// The shell script (`{d}`: the scratch dir) that stamps `NAME.start`, sleeps `secs`, stamps `NAME.end`.
pub fn stamped(name: &str, secs: &str) -> String {
    format!("date +%s%N > {{d}}/{name}.start; sleep {secs}; date +%s%N > {{d}}/{name}.end")
}
