//! A 3-member cluster in one process: each member runs in its own thread with its own actix
//! System, a real sled data dir and a real TCP listener on 127.0.0.1, so stopping a member's
//! System is a crash (its listener and every connection close).

#![allow(dead_code)]

use hetsched_common::protocol::Message;
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_consensus::{Consensus, ProposeError, RaftConfig, RaftStatus, Role, StateMachine};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Extra bytes appended to every Toy snapshot (ignored by `restore`), to make snapshots span
/// several transport chunks. Per test binary (each is its own process).
pub static SNAPSHOT_BALLAST: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Appends u64 commands; the output is (number of values applied, their sum).
pub struct Toy {
    pub applied: Arc<Mutex<Vec<u64>>>,
    sum: u64,
}

impl StateMachine for Toy {
    type Output = (usize, u64);

    fn apply(&mut self, _index: u64, command: &[u8]) -> Self::Output {
        let v = command
            .try_into()
            .map(u64::from_be_bytes)
            .unwrap_or(u64::MAX);
        self.sum = self.sum.wrapping_add(v);
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        applied.push(v);
        (applied.len(), self.sum)
    }

    fn snapshot(&self) -> Vec<u8> {
        let applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        let ballast = SNAPSHOT_BALLAST.load(std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::with_capacity(8 * (applied.len() + 2) + ballast);
        out.extend_from_slice(&self.sum.to_be_bytes());
        out.extend_from_slice(&(applied.len() as u64).to_be_bytes());
        for v in applied.iter() {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.resize(out.len() + ballast, 0xAB);
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let mut words = snapshot
            .chunks_exact(8)
            .map(|c| c.try_into().map(u64::from_be_bytes).unwrap_or(0));
        let (Some(sum), Some(n)) = (words.next(), words.next()) else {
            return Err(format!("bad toy snapshot of {} bytes", snapshot.len()));
        };
        let values: Vec<u64> = words.take(n as usize).collect();
        if values.len() as u64 != n {
            return Err(format!("toy snapshot holds fewer than {n} values"));
        }
        self.sum = sum;
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        *applied = values;
        Ok(())
    }
}

pub fn cmd(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `f` until it returns `Some`, failing the test after `timeout`.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A temp dir removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "hetsched-consensus-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Member {
    pub id: u64,
    pub consensus: Consensus<Toy>,
    pub applied: Arc<Mutex<Vec<u64>>>,
    system: actix::System,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    pub fn applied(&self) -> Vec<u64> {
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn status(&self) -> RaftStatus {
        self.consensus.status()
    }

    /// Crashes the member: stops its System (listener, connections, Raft arbiter) and waits
    /// until its data dir is released.
    pub fn kill(mut self) {
        self.system.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("member thread");
        }
        let c = self.consensus.clone();
        wait_until(
            "the node to release its data dir",
            Duration::from_secs(10),
            || c.is_stopped().then_some(()),
        );
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.system.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Let sled close before the test removes the data dir.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.consensus.is_stopped() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Starts member `id` on `listener`, or, when restarting, on a new bind of its address
/// (retried, as the port may still be held for a moment).
pub fn start_member(
    id: u64,
    peers: &BTreeMap<u64, String>,
    dir: PathBuf,
    listener: Option<std::net::TcpListener>,
) -> Member {
    start_member_with(id, peers, dir, listener, |_| {})
}

/// [`start_member`] with a configuration tweak (snapshot thresholds, `join`).
pub fn start_member_with(
    id: u64,
    peers: &BTreeMap<u64, String>,
    dir: PathBuf,
    listener: Option<std::net::TcpListener>,
    tweak: impl FnOnce(&mut RaftConfig),
) -> Member {
    let addr = peers[&id].clone();
    let listener = listener.unwrap_or_else(|| {
        wait_until(&format!("bind {addr}"), Duration::from_secs(10), || {
            std::net::TcpListener::bind(&addr).ok()
        })
    });
    let mut cfg = RaftConfig::new(id, peers.clone(), dir);
    tweak(&mut cfg);
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(format!("member-{id}"))
        .spawn(move || {
            let sys = actix::System::new();
            sys.block_on(async move {
                let applied = Arc::new(Mutex::new(Vec::new()));
                let sm = Toy {
                    applied: applied.clone(),
                    sum: 0,
                };
                let consensus = match Consensus::start(cfg, sm) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                listener.set_nonblocking(true).expect("nonblocking");
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let c = consensus.clone();
                let handler: Handler = Arc::new(move |m, _peer| {
                    if let Message::Raft { from, msgs } = m {
                        c.step(from.get(), msgs.into_iter().map(|b| b.into_vec()).collect());
                    }
                    Box::pin(async { None })
                });
                actix::spawn(async move {
                    let _ = wire::serve(listener, FrameLimits::default(), handler).await;
                });
                let _ = tx.send(Ok((consensus, applied, actix::System::current())));
            });
            let _ = sys.run();
        })
        .expect("spawn member thread");
    let (consensus, applied, system) = rx
        .recv()
        .expect("member thread answered")
        .expect("consensus started");
    Member {
        id,
        consensus,
        applied,
        system,
        thread: Some(thread),
    }
}

/// Three listeners on 127.0.0.1 with ports the OS handed out, and the peer map.
pub fn three_peers() -> (BTreeMap<u64, String>, Vec<std::net::TcpListener>) {
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind :0"))
        .collect();
    let peers = listeners
        .iter()
        .zip(1u64..)
        .map(|(l, id)| (id, l.local_addr().expect("addr").to_string()))
        .collect();
    (peers, listeners)
}

/// Starts a fresh 3-member cluster in `dirs`.
pub fn start_cluster(name: &str) -> (BTreeMap<u64, String>, Vec<TempDir>, Vec<Member>) {
    start_cluster_with(name, |_| {})
}

/// [`start_cluster`] with each member's configuration adjusted by `tune`.
pub fn start_cluster_with(
    name: &str,
    tune: impl Fn(&mut RaftConfig) + Copy,
) -> (BTreeMap<u64, String>, Vec<TempDir>, Vec<Member>) {
    let (peers, listeners) = three_peers();
    let dirs: Vec<TempDir> = (1..=3)
        .map(|id| TempDir::new(&format!("{name}-{id}")))
        .collect();
    let members = listeners
        .into_iter()
        .zip(1u64..)
        .map(|(l, id)| {
            start_member_with(id, &peers, dirs[(id - 1) as usize].0.clone(), Some(l), tune)
        })
        .collect();
    (peers, dirs, members)
}

/// The id every given member agrees is the leader (and that member says it leads).
pub fn agreed_leader(members: &[&Member]) -> Option<u64> {
    let first = members.first()?.status().leader?;
    let all_agree = members.iter().all(|m| m.status().leader == Some(first));
    let leader = members.iter().find(|m| m.id == first)?;
    (all_agree && leader.status().role == Role::Leader).then_some(first)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Proposes on `c`, failing the test if no answer comes within 10 s.
pub fn propose(
    rt: &tokio::runtime::Runtime,
    c: &Consensus<Toy>,
    v: u64,
) -> Result<(usize, u64), ProposeError> {
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), c.propose(cmd(v)))
            .await
            .expect("proposal answered within 10 s")
    })
}
