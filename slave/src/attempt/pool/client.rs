//! The agent's side of the slave's long-lived supervisor ([`super::server`]): connecting to
//! it (starting it when none runs), asking it to start attempts — the [`Launch`] of command
//! tasks — and waking each attempt's watcher when the pool announces its end.
//!
//! Announcements are only a shortcut: a watcher also checks `status.json` and the pool's
//! liveness on its own (`agent::watched`), so a lost connection, a restarted agent or a
//! dead pool never loses an exit, it only delays its discovery by a poll period.

use super::protocol::{self, ENV_POOL, SOCKET};
use crate::attempt::files::Spec;
use crate::attempt::{Launch, Started};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long the agent waits for a pool it started to listen.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

type Waiters = Arc<Mutex<HashMap<PathBuf, oneshot::Sender<()>>>>;

/// A connection to the pool.
struct Conn {
    stream: UnixStream,
    /// The pool's pid and start time (its identity).
    pool: (i32, u64),
}

/// The agent's handle on the pool.
pub struct PoolClient {
    /// The supervisor command (`[hetsched, supervise]`); `--pool DIR` is appended.
    program: Vec<OsString>,
    dir: PathBuf,
    conn: Mutex<Option<Conn>>,
    waiters: Waiters,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PoolClient {
    /// A client for the pool in `dir`, started with `program --pool dir` when none runs.
    pub fn new(program: Vec<OsString>, dir: PathBuf) -> Self {
        Self {
            program,
            dir,
            conn: Mutex::new(None),
            waiters: Arc::default(),
        }
    }

    /// Asks the pool to start the attempt prepared in `attempt_dir` as `spec` says (see
    /// [`crate::attempt::Launcher::prepare`]).
    pub fn start(&self, attempt_dir: &Path, spec: &Spec) -> std::io::Result<Started> {
        let line = protocol::start(attempt_dir, spec).map_err(std::io::Error::other)?;
        let (tx, ended) = oneshot::channel();
        lock(&self.waiters).insert(attempt_dir.to_path_buf(), tx);
        let mut conn = lock(&self.conn);
        // One retry on a fresh connection: the pool may have exited while idle.
        for _ in 0..2 {
            if conn.is_none() {
                *conn = Some(self.connect()?);
            }
            if let Some(c) = conn.as_mut() {
                if c.stream.write_all(line.as_bytes()).is_ok() {
                    return Ok(Started {
                        supervisor: c.pool,
                        ended,
                    });
                }
            }
            *conn = None;
        }
        lock(&self.waiters).remove(attempt_dir);
        Err(std::io::Error::other(
            "the supervisor pool does not take requests",
        ))
    }

    /// Connects to the running pool, or starts one and connects.
    fn connect(&self) -> std::io::Result<Conn> {
        std::fs::create_dir_all(&self.dir)?;
        let sock = self.dir.join(SOCKET);
        let mut spawned = false;
        let deadline = Instant::now() + CONNECT_WAIT;
        let stream = loop {
            match UnixStream::connect(&sock) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) if !spawned => {
                    self.spawn_pool()?;
                    spawned = true;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut hello = String::new();
        reader.read_line(&mut hello)?;
        let Some((pid, start)) = protocol::parse_hello(hello.trim_end()) else {
            return Err(std::io::Error::other(format!(
                "unexpected greeting from the supervisor pool: {hello:?}"
            )));
        };
        let waiters = self.waiters.clone();
        std::thread::Builder::new()
            .name("pool-exits".into())
            .spawn(move || read_exits(reader, &waiters))?;
        tracing::debug!(pool = pid, "connected to the supervisor pool");
        Ok(Conn {
            stream,
            pool: (pid, start),
        })
    }

    fn spawn_pool(&self) -> std::io::Result<()> {
        let (program, lead) = self
            .program
            .split_first()
            .ok_or_else(|| std::io::Error::other("no supervisor program configured"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pool.log"))?;
        let mut child = std::process::Command::new(program)
            .args(lead)
            .arg("--pool")
            .arg(&self.dir)
            .env(ENV_POOL, &self.dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()?;
        tracing::info!(pool = child.id(), "started the supervisor pool");
        // Reaped when it exits (idle); after a restart of the agent, init reaps it.
        std::thread::Builder::new()
            .name("pool-reap".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        Ok(())
    }
}

impl Launch for PoolClient {
    fn launch(&self, dir: &Path, spec: &Spec) -> std::io::Result<Started> {
        self.start(dir, spec)
    }

    fn home(&self) -> PathBuf {
        self.dir.clone()
    }
}

/// Fires the waiter of each announced end; at the end of the connection, every waiter (each
/// watcher then checks on its own).
fn read_exits(reader: BufReader<UnixStream>, waiters: &Waiters) {
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = protocol::parse_exited(&line) {
            if let Some(tx) = lock(waiters).remove(dir) {
                let _ = tx.send(());
            }
        }
    }
    lock(waiters).clear();
}
