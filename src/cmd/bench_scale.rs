//! `hetsched bench scale`: how the leader holds many slaves. Real master processes (fsync
//! on, secured by default) and `--slaves` in-process slaves (`bench_e2e`'s, speaking the full
//! wire protocol: registration, heartbeats at the slave's default period with what they
//! hold, assignments accepted, started and finished reports) — no task processes.
//!
//! The run: every slave registered and up; a quiet window with heartbeats only, where the
//! leader's CPU time (`/proc/PID/stat`) divided by the heartbeats sent gives the CPU per
//! heartbeat; then `--tasks` tasks submitted in jobs of `--job-size` and waited for. The
//! bench itself counts, from what the slaves received, the tasks never received (`lost`) and
//! those received by more than one slave or under more than one attempt (`placed_twice`).

use super::bench_e2e::client::BenchClient;
use super::bench_e2e::inproc::{lock, start_in_process_slave, Seen, SeenRef};
use super::local::{ClusterSpec, LocalCluster};
use anyhow::{bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use hetsched_common::ClientRequestId;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `hetsched bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// In-process slaves.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves: u32,
    /// Tasks in total.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub tasks: u64,
    /// Tasks per job.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub job_size: u32,
    /// CPUs each slave declares (each task asks for one).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub slave_cpus: u32,
    /// Masters.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub masters: u32,
    /// Length of the heartbeats-only window that measures the leader's CPU per heartbeat.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub quiet: Duration,
    /// Give up after this long (e.g. `5m`).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Run the cluster --insecure (plain TCP).
    #[arg(long)]
    pub insecure: bool,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs `bench scale`.
pub fn run(a: ScaleArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    super::log_open_file_limit();
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hetsched-bench-scale-{}", std::process::id()));
    let spec = ClusterSpec {
        masters: a.masters,
        insecure: a.insecure,
        ..Default::default()
    };
    let mut cluster = LocalCluster::launch(&dir, &spec)?;
    // Several threads: thousands of slaves' links and listeners live in this process.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(bench(&cluster, &a));
    rt.shutdown_timeout(Duration::from_secs(1));
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = result?;
    if a.json {
        super::print_json(&report)
    } else {
        println!(
            "{} slaves, {} tasks: placed {:.0}/s, submit→dispatch p50 {:.1} ms, p99 {:.1} ms; leader {:.1} µs CPU per heartbeat, {:.0} MiB; snapshot {} bytes; lost {}, placed twice {}",
            report["slaves"],
            report["tasks"],
            report["placed_per_sec"].as_f64().unwrap_or(0.0),
            report["submit_to_dispatch_p50_ms"].as_f64().unwrap_or(0.0),
            report["submit_to_dispatch_p99_ms"].as_f64().unwrap_or(0.0),
            report["leader_cpu_per_heartbeat_us"].as_f64().unwrap_or(0.0),
            report["leader_rss_mib"].as_f64().unwrap_or(0.0),
            report["snapshot_bytes"],
            report["lost"],
            report["placed_twice"],
        );
        Ok(())
    }
}

/// CPU time (user + system) of process `pid`, microseconds.
fn cpu_us(pid: i32) -> Option<u64> {
    hetsched_common::procstat::ProcStat::read(pid).map(|s| s.cpu_us())
}

/// Resident memory of process `pid`, MiB.
fn rss_mib(pid: i32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn nodes_up(client: &mut BenchClient) -> usize {
    match client
        .call(
            Message::Client(ClientRequest::Nodes { stale: true }),
            Duration::from_secs(30),
        )
        .await
    {
        Ok(Message::ClientReply(ClientResponse::Nodes(n))) => {
            n.iter().filter(|n| n.state == "up").count()
        }
        _ => 0,
    }
}

async fn bench(cluster: &LocalCluster, a: &ScaleArgs) -> anyhow::Result<serde_json::Value> {
    let masters = cluster.master_addrs.clone();
    let mut client = BenchClient::new(masters.clone());
    let seen: SeenRef = Arc::new(Mutex::new(Seen::default()));
    let t_reg = Instant::now();
    for i in 0..a.slaves {
        start_in_process_slave(i, masters.clone(), a.slave_cpus, seen.clone()).await?;
    }
    let deadline = t_reg + a.timeout;
    loop {
        let up = nodes_up(&mut client).await;
        if up >= a.slaves as usize {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {up} of {} slaves up within {:?}", a.slaves, a.timeout);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let register_secs = t_reg.elapsed().as_secs_f64();
    let status = client.status().await?;
    let leader = cluster
        .masters
        .get((status.master_id.0 as usize).saturating_sub(1))
        .and_then(|m| m.pid())
        .context("the leader's process")?;
    eprintln!(
        "bench scale: {} slaves up in {register_secs:.1} s; leader is master {}; {:?} of heartbeats only",
        a.slaves, status.master_id.0, a.quiet
    );
    // Heartbeats only: the leader's CPU per heartbeat.
    let (cpu0, hb0) = (cpu_us(leader).unwrap_or(0), lock(&seen).heartbeats);
    tokio::time::sleep(a.quiet).await;
    let (cpu1, hb1) = (cpu_us(leader).unwrap_or(0), lock(&seen).heartbeats);
    let heartbeats = hb1.saturating_sub(hb0).max(1);
    let cpu_per_hb = cpu1.saturating_sub(cpu0) as f64 / heartbeats as f64;
    let hb_per_sec = heartbeats as f64 / a.quiet.as_secs_f64();
    // The tasks.
    let jobs = a.tasks.div_ceil(a.job_size as u64);
    let request_base = (std::process::id() as u64) << 32;
    let t0 = Instant::now();
    let mut sent_at = Vec::new();
    let mut in_flight = tokio::task::JoinSet::new();
    for j in 0..jobs {
        while in_flight.len() >= 4 {
            if let Some(r) = in_flight.join_next().await {
                sent_at.push(r??);
            }
        }
        let count = (a.tasks - j * a.job_size as u64).min(a.job_size as u64) as u32;
        let spec: hetsched_common::JobSpec = serde_json::from_value(serde_json::json!({
            "name": format!("scale-{j}"),
            "user": "bench",
            "partition": "",
            "resources": {"cpu_milli": 1000, "mem_mib": 1},
            "count": count,
            "command": ["true"],
            "env": {},
        }))
        .context("job spec")?;
        let req = Message::Client(ClientRequest::Submit {
            request: ClientRequestId(request_base + j + 1),
            spec,
            allow_unplaceable: false,
        });
        let mut c = BenchClient::new(masters.clone());
        in_flight.spawn(async move {
            let sent = Instant::now();
            match c.call(req, Duration::from_secs(120)).await? {
                Message::ClientReply(ClientResponse::Submitted { tasks, .. }) => {
                    Ok::<_, anyhow::Error>((sent, tasks))
                }
                other => bail!("unexpected answer to submit: {other:?}"),
            }
        });
    }
    while let Some(r) = in_flight.join_next().await {
        sent_at.push(r??);
    }
    let submit_secs = t0.elapsed().as_secs_f64();
    eprintln!("bench scale: {jobs} jobs submitted in {submit_secs:.2} s");
    let deadline = t0 + a.timeout;
    loop {
        let done = lock(&seen).completed.len() as u64;
        if done >= a.tasks || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Late duplicates would show within a heartbeat or two.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = client.status().await?;
    let rss = rss_mib(leader).unwrap_or(0.0);
    let s = lock(&seen);
    let mut lat = Vec::new();
    let mut lost = 0u64;
    for (sent, tasks) in &sent_at {
        for t in tasks {
            match s.running.get(t) {
                Some(at) => lat.push(at.saturating_duration_since(*sent).as_secs_f64() * 1e3),
                None => lost += 1,
            }
        }
    }
    lat.sort_by(|x, y| x.total_cmp(y));
    let placed_twice = s.received.values().filter(|r| r.len() > 1).count() as u64;
    let place_secs = s
        .last_placed
        .map(|l| l.saturating_duration_since(t0).as_secs_f64())
        .unwrap_or(0.0)
        .max(1e-9);
    let placed = s.running.len() as u64;
    let completed = s.completed.len() as u64;
    drop(s);
    Ok(serde_json::json!({
        "slaves": a.slaves,
        "tasks": a.tasks,
        "masters": a.masters,
        "register_secs": register_secs,
        "submit_secs": submit_secs,
        "placed": placed,
        "completed": completed,
        "placed_per_sec": placed as f64 / place_secs,
        "submit_to_dispatch_p50_ms": percentile(&lat, 0.5),
        "submit_to_dispatch_p99_ms": percentile(&lat, 0.99),
        "heartbeats_per_sec": hb_per_sec,
        "leader_cpu_per_heartbeat_us": cpu_per_hb,
        "leader_cpu_cores_heartbeats": cpu_per_hb * hb_per_sec / 1e6,
        "leader_rss_mib": rss,
        "leader_rss_kib_per_node": rss * 1024.0 / a.slaves as f64,
        "snapshot_bytes": after.state_bytes,
        "snapshot_file_bytes": after.snapshot_bytes,
        "log_entries": after.raft.commit_index.saturating_sub(status.raft.commit_index),
        "lost": lost,
        "placed_twice": placed_twice,
    }))
}
