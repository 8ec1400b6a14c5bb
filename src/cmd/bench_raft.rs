//! `hetsched bench raft` and `hetsched bench failover`: the consensus layer measured on a
//! local cluster of real master processes (fsync on), driven over real TCP.

use super::local::LocalCluster;
use anyhow::{bail, Context};
use futures::stream::{FuturesUnordered, StreamExt};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message, StatusInfo};
use hetsched_common::wire::Connection;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `hetsched bench raft`.
#[derive(clap::Args, Debug)]
pub struct RaftArgs {
    /// Masters in the cluster.
    #[arg(long, default_value_t = 3)]
    pub masters: u32,
    /// Concurrent clients, each on its own connection to the leader.
    #[arg(long, default_value_t = 8)]
    pub clients: u32,
    /// Proposals in total.
    #[arg(long, default_value_t = 100_000)]
    pub proposals: u64,
    /// Proposals each client keeps in flight.
    #[arg(long, default_value_t = 64)]
    pub window: u32,
    /// Padding bytes per proposal.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    /// Data directory (default: a fresh directory under the system's temp dir, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched bench failover`.
#[derive(clap::Args, Debug)]
pub struct FailoverArgs {
    /// Leader kills.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Masters in the cluster.
    #[arg(long, default_value_t = 3)]
    pub masters: u32,
    /// Data directory (default: a fresh directory under the system's temp dir, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

fn scratch(dir: &Option<PathBuf>, what: &str) -> (PathBuf, bool) {
    match dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("hetsched-bench-{what}-{}", std::process::id())),
            true,
        ),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn status_of(addr: &str, stale: bool) -> anyhow::Result<StatusInfo> {
    let c = Connection::connect(addr, Duration::from_millis(500)).await?;
    match c
        .call(
            Message::Client(ClientRequest::Status { stale }),
            Duration::from_secs(2),
        )
        .await?
    {
        Message::ClientReply(ClientResponse::Status(s)) => Ok(s),
        other => bail!("unexpected answer {other:?}"),
    }
}

/// Waits for a leader; returns its index in `addrs` and its status.
async fn wait_leader(addrs: &[String], timeout: Duration) -> anyhow::Result<(usize, StatusInfo)> {
    let start = Instant::now();
    loop {
        for (i, a) in addrs.iter().enumerate() {
            if let Ok(s) = status_of(a, true).await {
                if s.role == "leader" && s.leader == Some(s.master_id) {
                    // Confirm through a linearizable read that it really leads.
                    if let Ok(s) = status_of(a, false).await {
                        return Ok((i, s));
                    }
                }
            }
        }
        if start.elapsed() > timeout {
            bail!("no leader within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile_ms(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn dir_size(path: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(path) {
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

/// Runs `bench raft`.
pub fn raft(a: RaftArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.masters == 0 || a.clients == 0 || a.window == 0 || a.proposals == 0 {
        bail!("--masters, --clients, --window and --proposals must be at least 1");
    }
    let (dir, remove) = scratch(&a.data_dir, "raft");
    let mut cluster = LocalCluster::start(&dir, a.masters, &[])?;
    let rt = runtime()?;
    let result = rt.block_on(run_raft(&cluster, &a));
    cluster.stop();
    let sizes: Vec<u64> = (1..=a.masters)
        .map(|i| dir_size(&dir.join(format!("master-{i}"))))
        .collect();
    if remove && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut report = result?;
    let max_mib = sizes.iter().copied().max().unwrap_or(0) as f64 / (1024.0 * 1024.0);
    report["data_dir_mib_max"] = serde_json::json!((max_mib * 10.0).round() / 10.0);
    if a.json {
        super::print_json(&report)
    } else {
        println!(
            "{} proposals from {} clients (window {}) on {} masters: {:.0} commits/s, p50 {:.2} ms, p99 {:.2} ms, {:.1} proposals per flush, {} errors, largest data dir {:.1} MiB",
            report["proposals"], a.clients, a.window, a.masters,
            report["commits_per_sec"].as_f64().unwrap_or(0.0),
            report["p50_ms"].as_f64().unwrap_or(0.0),
            report["p99_ms"].as_f64().unwrap_or(0.0),
            report["proposals_per_flush"].as_f64().unwrap_or(0.0),
            report["errors"],
            max_mib
        );
        Ok(())
    }
}

async fn run_raft(cluster: &LocalCluster, a: &RaftArgs) -> anyhow::Result<serde_json::Value> {
    let (leader, before) = wait_leader(&cluster.admin_addrs, Duration::from_secs(30)).await?;
    let addr = cluster.admin_addrs[leader].clone();
    eprintln!(
        "bench raft: leader is master {} at {addr}",
        before.master_id.0
    );
    let payload = serde_bytes::ByteBuf::from(vec![0xA5u8; a.payload]);
    let per_client = a.proposals.div_ceil(a.clients as u64);
    let hist = Arc::new(Mutex::new(
        hdrhistogram::Histogram::<u64>::new(3).context("histogram")?,
    ));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let mut clients = Vec::new();
    for c in 0..a.clients as u64 {
        let conn = Connection::connect(&addr, Duration::from_secs(2)).await?;
        let (hist, errors, payload) = (hist.clone(), errors.clone(), payload.clone());
        let window = a.window as usize;
        let count = per_client.min(a.proposals.saturating_sub(c * per_client));
        clients.push(tokio::spawn(async move {
            let mut in_flight = FuturesUnordered::new();
            let mut next = 0u64;
            let mut local = hdrhistogram::Histogram::<u64>::new(3).ok();
            loop {
                while in_flight.len() < window && next < count {
                    let conn = conn.clone();
                    let req = ClientRequest::BenchPropose {
                        client: c + 1,
                        seq: next,
                        record: false,
                        payload: payload.clone(),
                    };
                    next += 1;
                    in_flight.push(async move {
                        let t = Instant::now();
                        let r = conn
                            .call(Message::Client(req), Duration::from_secs(10))
                            .await;
                        (t.elapsed(), r)
                    });
                }
                match in_flight.next().await {
                    Some((lat, Ok(Message::ClientReply(ClientResponse::Done)))) => {
                        if let Some(h) = local.as_mut() {
                            let _ = h.record(lat.as_micros() as u64);
                        }
                    }
                    Some(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    None => break,
                }
            }
            if let (Some(l), Ok(mut h)) = (local, hist.lock()) {
                let _ = h.add(&l);
            }
        }));
    }
    for c in clients {
        c.await.context("client task failed")?;
    }
    let elapsed = start.elapsed();
    let after = status_of(&addr, true).await?;
    let h = hist
        .lock()
        .map_err(|_| anyhow::anyhow!("histogram lock poisoned"))?;
    let committed = h.len();
    let flushes = after.raft.flushes.saturating_sub(before.raft.flushes);
    let proposals = after.raft.proposals.saturating_sub(before.raft.proposals);
    Ok(serde_json::json!({
        "proposals": committed,
        "errors": errors.load(std::sync::atomic::Ordering::Relaxed),
        "elapsed_s": elapsed.as_secs_f64(),
        "commits_per_sec": (committed as f64 / elapsed.as_secs_f64()).round(),
        "p50_ms": percentile_ms(&h, 0.50),
        "p99_ms": percentile_ms(&h, 0.99),
        "proposals_per_flush": if flushes == 0 { 0.0 } else { ((proposals as f64 / flushes as f64) * 10.0).round() / 10.0 },
        "clients": a.clients,
        "window": a.window,
        "masters": a.masters,
        "payload_bytes": a.payload,
        "log_first_index": after.raft.first_index,
        "snapshots": after.raft.snapshots,
    }))
}

/// Runs `bench failover`.
pub fn failover(a: FailoverArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.rounds == 0 || a.masters < 3 {
        bail!("--rounds must be at least 1 and --masters at least 3");
    }
    let (dir, remove) = scratch(&a.data_dir, "failover");
    let mut cluster = LocalCluster::start(&dir, a.masters, &[])?;
    let rt = runtime()?;
    let result = rt.block_on(run_failover(&mut cluster, &a));
    cluster.stop();
    if remove && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let (rounds, lost) = result?;
    let mut sorted = rounds.clone();
    sorted.sort_by(|x, y| x.total_cmp(y));
    // Linear interpolation between closest ranks (the usual definition; the median of an
    // even count is the mean of the middle two).
    let pick = |q: f64| {
        let pos = (sorted.len() as f64 - 1.0) * q;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        let v = sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64);
        (v * 10.0).round() / 10.0
    };
    let (median, p99) = (pick(0.5), pick(0.99));
    if a.json {
        super::print_json(&serde_json::json!({
            "rounds": rounds,
            "median_ms": median,
            "p99_ms": p99,
            "lost_proposals": lost,
        }))
    } else {
        for (i, r) in rounds.iter().enumerate() {
            println!(
                "round {}: {r:.0} ms from kill -9 to a committed proposal",
                i + 1
            );
        }
        println!("median {median:.0} ms, p99 {p99:.0} ms, lost acknowledged proposals: {lost}");
        Ok(())
    }
}

/// A client that proposes continuously through whichever master leads, recording every
/// acknowledged sequence number.
async fn background_load(
    addrs: Vec<String>,
    acked: Arc<Mutex<Vec<u64>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut seq = 1_000_000u64;
    let mut i = 0usize;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let addr = &addrs[i % addrs.len()];
        let ok = async {
            let c = Connection::connect(addr, Duration::from_millis(200))
                .await
                .ok()?;
            loop {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Some(());
                }
                let req = ClientRequest::BenchPropose {
                    client: 1,
                    seq,
                    record: true,
                    payload: Default::default(),
                };
                match c.call(Message::Client(req), Duration::from_secs(2)).await {
                    Ok(Message::ClientReply(ClientResponse::Done)) => {
                        if let Ok(mut a) = acked.lock() {
                            a.push(seq);
                        }
                        seq += 1;
                    }
                    _ => return None,
                }
            }
        }
        .await;
        if ok.is_none() {
            // Unknown outcomes are not counted as acknowledged; a fresh number follows.
            seq += 1;
            i += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn run_failover(
    cluster: &mut LocalCluster,
    a: &FailoverArgs,
) -> anyhow::Result<(Vec<f64>, u64)> {
    let addrs = cluster.admin_addrs.clone();
    wait_leader(&addrs, Duration::from_secs(30)).await?;
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(background_load(addrs.clone(), acked.clone(), stop.clone()));
    let mut rounds = Vec::new();
    let mut probe_seq = 1u64;
    for round in 1..=a.rounds {
        let (leader, _) = wait_leader(&addrs, Duration::from_secs(30)).await?;
        // Let the load run against this leader for a moment.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed_at = Instant::now();
        cluster.masters[leader].kill9();
        let others: Vec<&String> = addrs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .map(|(_, a)| a)
            .collect();
        let elapsed = 'probe: loop {
            for addr in &others {
                let Ok(c) = Connection::connect(addr, Duration::from_millis(200)).await else {
                    continue;
                };
                let req = ClientRequest::BenchPropose {
                    client: 1,
                    seq: probe_seq,
                    record: true,
                    payload: Default::default(),
                };
                probe_seq += 1;
                if let Ok(Message::ClientReply(ClientResponse::Done)) =
                    c.call(Message::Client(req), Duration::from_secs(1)).await
                {
                    if let Ok(mut v) = acked.lock() {
                        v.push(probe_seq - 1);
                    }
                    break 'probe killed_at.elapsed();
                }
            }
            if killed_at.elapsed() > Duration::from_secs(30) {
                bail!("round {round}: no new leader committed within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let ms = elapsed.as_secs_f64() * 1000.0;
        eprintln!(
            "round {round}: master {} killed; a new leader committed after {ms:.0} ms",
            leader + 1
        );
        rounds.push((ms * 10.0).round() / 10.0);
        cluster.masters[leader].restart()?;
        // Wait until the restarted master has caught up before the next kill.
        let (_, st) = wait_leader(&addrs, Duration::from_secs(30)).await?;
        let target = st.raft.commit_index;
        let start = Instant::now();
        loop {
            if let Ok(s) = status_of(&addrs[leader], true).await {
                if s.applied_index >= target {
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("master {} did not catch up after its restart", leader + 1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.await;
    let acked: Vec<u64> = acked.lock().map(|v| v.clone()).unwrap_or_default();
    let (leader, _) = wait_leader(&addrs, Duration::from_secs(30)).await?;
    let c = Connection::connect(&addrs[leader], Duration::from_secs(1)).await?;
    let lost = match c
        .call(
            Message::Client(ClientRequest::BenchCheck {
                client: 1,
                acked: acked.clone(),
            }),
            Duration::from_secs(10),
        )
        .await?
    {
        Message::ClientReply(ClientResponse::BenchChecked { missing, .. }) => missing.len() as u64,
        other => bail!("unexpected answer {other:?}"),
    };
    eprintln!("{} acknowledged proposals checked", acked.len());
    Ok((rounds, lost))
}
