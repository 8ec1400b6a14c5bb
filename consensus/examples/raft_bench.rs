//! In-process throughput and disk-use measurement: a 3-member cluster (real sled data dirs
//! with fsync, TCP on 127.0.0.1) in one process, `concurrency` proposals in flight.
//!
//! ```text
//! cargo run --release -p hetsched-consensus --example raft_bench -- [proposals] [concurrency] [bytes] [catchup] [snapshot ballast MiB]
//! ```
//!
//! With `catchup` = 1, one follower is isolated during the run and healed after it; the time
//! until it has applied everything (by snapshot, the log being compacted past it) is printed.
//!
//! Prints commits/s, p50/p99 commit latency, proposals per flush, snapshots and each data
//! dir's size. The state machine is a counter (a tiny snapshot), so the disk figures are
//! those of the log, its compaction and sled.

use hetsched_common::protocol::Message;
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_consensus::{Consensus, FaultConfig, RaftConfig, Role, StateMachine};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counter {
    n: u64,
    hash: u64,
    /// Padding bytes in every snapshot, to measure large-snapshot transfers.
    ballast: usize,
}

impl StateMachine for Counter {
    type Output = u64;
    fn apply(&mut self, _index: u64, command: &[u8]) -> u64 {
        self.n += 1;
        for &b in command {
            self.hash = self.hash.rotate_left(5) ^ u64::from(b);
        }
        self.n
    }
    fn snapshot(&self) -> Vec<u8> {
        let mut s = [self.n.to_be_bytes(), self.hash.to_be_bytes()].concat();
        s.resize(16 + self.ballast, 0xAB);
        s
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), String> {
        let word = |i: usize| {
            s.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or("short snapshot")
        };
        self.n = word(0)?;
        self.hash = word(1)?;
        Ok(())
    }
}

fn dir_size(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_size(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn start(
    id: u64,
    peers: &BTreeMap<u64, String>,
    dir: PathBuf,
    listener: std::net::TcpListener,
    ballast: usize,
) -> Consensus<Counter> {
    let cfg = RaftConfig::new(id, peers.clone(), dir);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let sys = actix::System::new();
        sys.block_on(async move {
            let c = match Consensus::start(
                cfg,
                Counter {
                    n: 0,
                    hash: 0,
                    ballast,
                },
            ) {
                Ok(c) => c,
                Err(e) => panic!("start: {e}"),
            };
            let _ = listener.set_nonblocking(true);
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => panic!("listener: {e}"),
            };
            let h = c.clone();
            let handler: Handler = Arc::new(move |m, _| {
                if let Message::Raft { from, msgs } = m {
                    h.step(from.get(), msgs.into_iter().map(|b| b.into_vec()).collect());
                }
                Box::pin(async { None })
            });
            actix::spawn(async move {
                let _ = wire::serve(listener, FrameLimits::default(), handler).await;
            });
            let _ = tx.send(c);
        });
        let _ = sys.run();
    });
    rx.recv()
        .unwrap_or_else(|_| panic!("member {id} did not start"))
}

fn main() {
    // RUST_LOG=hetsched_consensus=info shows snapshot timings.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let total = args.first().copied().unwrap_or(200_000);
    let concurrency = args.get(1).copied().unwrap_or(512);
    let size = args.get(2).copied().unwrap_or(64) as usize;
    let catchup = args.get(3).copied().unwrap_or(0) == 1;
    let ballast = args.get(4).copied().unwrap_or(0) as usize * 1024 * 1024;
    let base = std::env::temp_dir().join(format!("hetsched-raft-bench-{}", std::process::id()));
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let peers: BTreeMap<u64, String> = listeners
        .iter()
        .zip(1u64..)
        .map(|(l, id)| {
            (
                id,
                l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    let dirs: Vec<PathBuf> = (1..=3).map(|id| base.join(format!("m{id}"))).collect();
    let members: Vec<Consensus<Counter>> = listeners
        .into_iter()
        .zip(1u64..)
        .map(|(l, id)| start(id, &peers, dirs[(id - 1) as usize].clone(), l, ballast))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        if let Some(m) = members.iter().find(|m| m.status().role == Role::Leader) {
            // The leader's no-op must apply before it takes proposals reliably.
            if rt.block_on(m.read_index()).is_ok() {
                break m.clone();
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        std::thread::sleep(Duration::from_millis(20));
    };
    let lagging = members.iter().find(|m| m.id() != leader.id()).cloned();
    if let (true, Some(f)) = (catchup, &lagging) {
        f.set_faults(FaultConfig {
            isolated: true,
            ..Default::default()
        });
    }
    let before = leader.stats();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let (latencies, failures) = rt.block_on(async {
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let c = leader.clone();
                let next = next.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut failed = 0u64;
                    let payload = vec![7u8; size];
                    while next.fetch_add(1, Ordering::Relaxed) < total {
                        let t = Instant::now();
                        match c.propose(payload.clone()).await {
                            Ok(_) => lat.push(t.elapsed()),
                            Err(_) => failed += 1,
                        }
                    }
                    (lat, failed)
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut failures = 0;
        for t in tasks {
            if let Ok((l, f)) = t.await {
                all.extend(l);
                failures += f;
            }
        }
        (all, failures)
    });
    let elapsed = started.elapsed();
    let mut lat = latencies;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let after = leader.stats();
    let flushes = after.flushes - before.flushes;
    let proposals = after.proposals - before.proposals;
    println!(
        "{} commits in {:.2?}: {:.0} commits/s, p50 {:.2} ms, p99 {:.2} ms, {} failed, \
         proposals/flush {:.1} (leader: {} proposals, {} flushes), concurrency {concurrency}, {size}-byte commands",
        lat.len(),
        elapsed,
        lat.len() as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        failures,
        proposals as f64 / flushes.max(1) as f64,
        proposals,
        flushes
    );
    if let (true, Some(f)) = (catchup, &lagging) {
        let healed = Instant::now();
        let target = leader.status().applied_index;
        f.set_faults(FaultConfig::default());
        while f.status().applied_index < target && healed.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        println!(
            "follower {} caught up to {target} in {:.2?} ({:?})",
            f.id(),
            healed.elapsed(),
            f.stats()
        );
    }
    // Let followers apply and snapshot too.
    std::thread::sleep(Duration::from_secs(2));
    for (m, d) in members.iter().zip(&dirs) {
        println!(
            "member {}: {:?}; data dir {:.1} MiB",
            m.id(),
            m.stats(),
            dir_size(d) as f64 / (1024.0 * 1024.0)
        );
    }
    for m in &members {
        m.stop();
    }
    std::thread::sleep(Duration::from_millis(500));
    for d in &dirs {
        println!(
            "after stop: {} {:.1} MiB",
            d.display(),
            dir_size(d) as f64 / (1024.0 * 1024.0)
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
