//! The plug-in contract (S0). A `[[plugin]]` runs in one of two modes:
//!
//! - **`once`** (the default): the slave starts the plug-in's `exec` for every call with one
//!   JSON line `{"api": "...", "args": {...}}` on stdin (then closed); what it writes on
//!   stdout is the call's result; exit 0 is success.
//! - **`server`**: the slave starts `exec` on the first call (lazily) and keeps it: for every
//!   call it writes one JSON line on the plug-in's stdin and reads one header line
//!   `{"ok": true, "len": N}` followed by N raw result bytes (or `{"ok": false, "error":
//!   "..."}`, a failed call from a plug-in that stays up). A plug-in that dies, answers
//!   garbage or outlives the call timeout is killed and started again on its next call; one
//!   idle for `--plugin-idle` is stopped (its stdin is closed, then it is killed), and all
//!   stop with the slave. A server must exit when its stdin ends.
//!
//! Either way a failed call makes the caller fall back to the CPU kernel, recorded as such.
//! The plug-in learns its mode from `HETSCHED_PLUGIN_MODE` (`once` or `server`). It runs in
//! the slave's own cgroup (it is the slave's child, not a task's).

use hetsched_common::program::ApiCall;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Largest output kept from a plug-in (more is an error).
pub const MAX_OUTPUT: usize = 512 << 20;

/// Default of `slave --plugin-idle`: a server plug-in unused this long is stopped.
pub const DEFAULT_PLUGIN_IDLE: Duration = Duration::from_secs(60);

/// Longest header line a server plug-in may write.
const MAX_HEADER: u64 = 64 << 10;

/// How a plug-in runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginMode {
    /// A new process per call.
    #[default]
    Once,
    /// One long-lived process serving call after call.
    Server,
}

impl PluginMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Server => "server",
        }
    }
}

/// The request line of a call.
fn request(call: &ApiCall) -> String {
    serde_json::json!({ "api": call.api, "args": call.args }).to_string() + "\n"
}

fn command(exec: &Path, mode: PluginMode) -> Command {
    let mut c = Command::new(exec);
    c.env("HETSCHED_PLUGIN_MODE", mode.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

/// Runs one call through a `once` plug-in at `exec`; the output on success, else why not.
pub fn run(exec: &Path, call: &ApiCall, timeout: Duration) -> Result<Vec<u8>, String> {
    let mut child = command(exec, PluginMode::Once)
        .spawn()
        .map_err(|e| format!("cannot start plug-in {}: {e}", exec.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plug-in that does not read its input may close stdin early: not an error here.
        let _ = stdin.write_all(request(call).as_bytes());
    }
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut out);
        }
        out
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return Err(format!(
                    "plug-in {} timed out after {timeout:?}",
                    exec.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("cannot wait for plug-in {}: {e}", exec.display())),
        }
    };
    let out = reader
        .join()
        .map_err(|_| "plug-in output reader failed".to_string())?;
    if !status.success() {
        return Err(format!("plug-in {} failed: {status}", exec.display()));
    }
    if out.len() > MAX_OUTPUT {
        return Err(format!(
            "plug-in {} wrote more than {MAX_OUTPUT} bytes",
            exec.display()
        ));
    }
    Ok(out)
}

/// What a server plug-in's reader hands the caller.
enum Reply {
    /// `{"ok": true, "len": N}` and N bytes.
    Done(Vec<u8>),
    /// `{"ok": false, "error": ...}`: the call failed, the plug-in stays up.
    Failed(String),
    /// The plug-in died or broke the protocol: it is not used again.
    Broken(String),
}

#[derive(Deserialize)]
struct Header {
    ok: bool,
    #[serde(default)]
    len: Option<u64>,
    #[serde(default)]
    error: Option<String>,
}

/// Reads one reply from a server plug-in's stdout.
fn read_reply(out: &mut BufReader<std::process::ChildStdout>) -> Reply {
    let mut line = String::new();
    match out.by_ref().take(MAX_HEADER).read_line(&mut line) {
        Ok(0) => return Reply::Broken("it exited".into()),
        Ok(_) if !line.ends_with('\n') => {
            return Reply::Broken("its header line is too long or cut short".into())
        }
        Ok(_) => {}
        Err(e) => return Reply::Broken(format!("cannot read it: {e}")),
    }
    let header: Header = match serde_json::from_str(line.trim_end()) {
        Ok(h) => h,
        Err(e) => return Reply::Broken(format!("bad header line ({e}): {:.80}", line.trim())),
    };
    match (header.ok, header.len) {
        (false, _) => Reply::Failed(header.error.unwrap_or_else(|| "no error given".into())),
        (true, None) => Reply::Broken("header has ok but no len".into()),
        (true, Some(n)) if n > MAX_OUTPUT as u64 => {
            Reply::Broken(format!("result of {n} bytes is over {MAX_OUTPUT}"))
        }
        (true, Some(n)) => {
            let mut buf = vec![0u8; n as usize];
            match out.read_exact(&mut buf) {
                Ok(()) => Reply::Done(buf),
                Err(e) => Reply::Broken(format!("result cut short after its header: {e}")),
            }
        }
    }
}

/// One running server plug-in.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::Receiver<Reply>,
    last_used: Instant,
}

impl Server {
    fn start(exec: &Path) -> Result<Self, String> {
        use std::os::unix::process::CommandExt;
        // A process group of its own, so that stopping it stops what it started too.
        let mut child = command(exec, PluginMode::Server)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start plug-in {}: {e}", exec.display()))?;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("plug-in has no stdout".into());
        };
        let (tx, replies) = mpsc::channel();
        std::thread::Builder::new()
            .name("plugin-reader".into())
            .spawn(move || {
                let mut out = BufReader::new(stdout);
                loop {
                    let reply = read_reply(&mut out);
                    let last = matches!(reply, Reply::Broken(_));
                    if tx.send(reply).is_err() || last {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start the plug-in's reader: {e}"))?;
        Ok(Self {
            child,
            stdin,
            replies,
            last_used: Instant::now(),
        })
    }

    /// The reply to the call just sent; `Err` past `timeout`. The process is watched too: a
    /// child it left behind may hold its stdout open after it died.
    fn wait_reply(&mut self, timeout: Duration) -> Result<Reply, ()> {
        let deadline = Instant::now() + timeout;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            match self.replies.recv_timeout(slice) {
                Ok(r) => return Ok(r),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ok(Reply::Broken("its reader stopped".into()))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Ok(Reply::Broken(format!("it exited ({status})")));
            }
            if Instant::now() >= deadline {
                return Err(());
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // End of input asks it to exit; a kill makes sure.
        drop(self.stdin.take());
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Default)]
struct Idle {
    /// Idle servers by executable (a busy one is out of the map, with its caller).
    by_exec: HashMap<PathBuf, Vec<Server>>,
    /// Processes started, ever.
    starts: u64,
    /// Whether the idle reaper runs.
    reaper: bool,
}

/// The server plug-ins of one slave: started on demand, one per call in flight (so at most
/// one per engine unit), kept while used, stopped after `idle` without calls and when
/// this is dropped.
pub struct Servers {
    idle_after: Duration,
    state: Arc<Mutex<Idle>>,
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field("idle_after", &self.idle_after)
            .field("starts", &self.starts())
            .finish()
    }
}

fn lock(m: &Mutex<Idle>) -> MutexGuard<'_, Idle> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Servers {
    /// No servers yet; they stop after `idle_after` without calls.
    pub fn new(idle_after: Duration) -> Self {
        Self {
            idle_after,
            state: Arc::default(),
        }
    }

    /// Processes started so far (restarts included).
    pub fn starts(&self) -> u64 {
        lock(&self.state).starts
    }

    /// Process ids of the idle servers of `exec`.
    pub fn idle_pids(&self, exec: &Path) -> Vec<u32> {
        lock(&self.state)
            .by_exec
            .get(exec)
            .map(|v| v.iter().map(Server::pid).collect())
            .unwrap_or_default()
    }

    /// Whether an idle server of `exec` is up (a call to it would not start one).
    pub fn is_warm(&self, exec: &Path) -> bool {
        lock(&self.state)
            .by_exec
            .get(exec)
            .is_some_and(|v| !v.is_empty())
    }

    /// An idle server of `exec`, or a new one.
    fn take(&self, exec: &Path) -> Result<Server, String> {
        let mut st = lock(&self.state);
        while let Some(mut s) = st.by_exec.get_mut(exec).and_then(Vec::pop) {
            // One that died while idle is replaced now, not on its next call.
            if matches!(s.child.try_wait(), Ok(None)) {
                return Ok(s);
            }
            tracing::warn!(exec = %exec.display(), "server plug-in exited while idle; starting it again");
        }
        st.starts += 1;
        metrics::counter!("hetsched_slave_plugin_starts_total").increment(1);
        if !st.reaper {
            st.reaper = true;
            self.spawn_reaper();
        }
        drop(st);
        Server::start(exec)
    }

    fn put_back(&self, exec: &Path, mut server: Server) {
        server.last_used = Instant::now();
        lock(&self.state)
            .by_exec
            .entry(exec.to_path_buf())
            .or_default()
            .push(server);
    }

    /// Stops the servers idle for longer than `idle_after` until `self` is dropped.
    fn spawn_reaper(&self) {
        let state: Weak<Mutex<Idle>> = Arc::downgrade(&self.state);
        let idle_after = self.idle_after;
        let period = (idle_after / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
        let spawned = std::thread::Builder::new()
            .name("plugin-reaper".into())
            .spawn(move || loop {
                std::thread::sleep(period);
                let Some(state) = state.upgrade() else { return };
                let stale: Vec<Server> = {
                    let mut st = lock(&state);
                    let mut stale = Vec::new();
                    for servers in st.by_exec.values_mut() {
                        let (old, keep) = servers
                            .drain(..)
                            .partition(|s| s.last_used.elapsed() >= idle_after);
                        *servers = keep;
                        stale.extend::<Vec<Server>>(old);
                    }
                    stale
                };
                if !stale.is_empty() {
                    tracing::info!(
                        count = stale.len(),
                        "stopping server plug-ins idle for {idle_after:?}"
                    );
                }
                // Dropped outside the lock: each waits for its process.
                drop(stale);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the plug-in reaper; idle plug-ins stay up");
        }
    }

    /// Runs one call on a server plug-in of `exec` (started if none is idle); the output on
    /// success, else why not (a plug-in that broke is killed; the next call starts another).
    pub fn call(&self, exec: &Path, call: &ApiCall, timeout: Duration) -> Result<Vec<u8>, String> {
        let mut server = self.take(exec)?;
        let name = exec.display();
        let sent = server
            .stdin
            .as_mut()
            .ok_or_else(|| "no stdin".to_string())
            .and_then(|s| {
                s.write_all(request(call).as_bytes())
                    .and_then(|()| s.flush())
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = sent {
            return Err(format!(
                "server plug-in {name} died: cannot send the call: {e}"
            ));
        }
        match server.wait_reply(timeout) {
            Ok(Reply::Done(out)) => {
                self.put_back(exec, server);
                Ok(out)
            }
            Ok(Reply::Failed(why)) => {
                self.put_back(exec, server);
                Err(format!("server plug-in {name} failed the call: {why}"))
            }
            Ok(Reply::Broken(why)) => Err(format!("server plug-in {name} died: {why}")),
            Err(()) => Err(format!("server plug-in {name} timed out after {timeout:?}")),
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let all: Vec<Server> = lock(&self.state)
            .by_exec
            .drain()
            .flat_map(|(_, v)| v)
            .collect();
        drop(all);
    }
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
