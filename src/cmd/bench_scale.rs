//! `hetsched bench scale`: how the leader holds many slaves. Real master processes (fsync
//! on, secured by default) and `--slaves` in-process slaves (`bench_e2e`'s, speaking the full
//! wire protocol: registration, heartbeats at the slave's default period with what they
//! hold, their link taking the leader's commands, assignments accepted, started and
//! finished reports) — no task processes. The slaves run in helper processes of at most
//! `--slaves-per-process` each (`bench_scale_slaves`), so no process needs more descriptors
//! than its limit allows.
//!
//! The run: every slave registered and up; a quiet window with heartbeats only, where the
//! leader's CPU time (`/proc/PID/stat`) divided by the heartbeats sent gives the CPU per
//! heartbeat (and per slave per second); then `--tasks` tasks submitted in jobs of
//! `--job-size` and waited for. The bench itself counts, from what the slaves received, the
//! tasks never received (`lost`) and those received by more than one slave or under more
//! than one attempt (`placed_twice`). With several `--placement-threads` values, one
//! cluster per value in the same run, and the ratios to the first.

use super::bench_e2e::client::BenchClient;
use super::bench_scale_fleet::{Fleet, Procs};
use super::local::{ClusterSpec, LocalCluster};
use anyhow::{bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use hetsched_common::ClientRequestId;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `hetsched bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// In-process slaves (in helper processes, see `--slaves-per-process`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves: u32,
    /// Most slaves in one helper process (each holds about two descriptors per slave).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves_per_process: u32,
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
    /// The masters' `--placement-threads` (S4.7), comma-separated: one cluster per value,
    /// ratios to the first; absent: the masters' default.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub placement_threads: Vec<u32>,
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
    let threads: Vec<Option<u32>> = if a.placement_threads.is_empty() {
        vec![None]
    } else {
        a.placement_threads.iter().copied().map(Some).collect()
    };
    let mut runs = Vec::new();
    for t in &threads {
        runs.push(run_one(&a, *t)?);
    }
    let unfinished: Vec<String> = runs
        .iter()
        .filter(|r| r["timed_out"].as_bool() == Some(true))
        .map(|r| format!("{} of {} tasks completed", r["completed"], r["tasks"]))
        .collect();
    let report = if runs.len() == 1 {
        runs.remove(0)
    } else {
        with_ratios(runs)
    };
    // The figures of a run that did not finish are printed, and the command still fails.
    let finished = || {
        if unfinished.is_empty() {
            Ok(())
        } else {
            bail!(
                "bench scale: not every task completed within --timeout {} ({}); the figures above are partial",
                humantime::format_duration(a.timeout),
                unfinished.join("; ")
            )
        }
    };
    if a.json {
        super::print_json(&report)?;
        return finished();
    }
    let lines = match report.get("runs").and_then(|r| r.as_array()) {
        Some(r) => r.clone(),
        None => vec![report.clone()],
    };
    for r in &lines {
        println!("{}", summary(r));
    }
    if let Some(ratios) = report.get("ratios") {
        println!("ratios to the first run: {ratios}");
    }
    finished()
}

fn summary(r: &serde_json::Value) -> String {
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    format!(
        "{} slaves, {} tasks, placement threads {}: placed {:.0}/s, submit→dispatch p50 {:.1} ms, p99 {:.1} ms; leader {:.1} µs CPU per heartbeat ({:.2} µs per slave per second), {:.0} MiB ({:.1} KiB per slave; followers {:.1}); lost {}, placed twice {}",
        r["slaves"],
        r["tasks"],
        r["placement_threads"],
        f("placed_per_sec"),
        f("submit_to_dispatch_p50_ms"),
        f("submit_to_dispatch_p99_ms"),
        f("leader_cpu_per_heartbeat_us"),
        f("leader_cpu_per_slave_per_sec_us"),
        f("leader_rss_mib"),
        f("leader_kib_per_slave"),
        f("follower_kib_per_slave"),
        r["lost"],
        r["placed_twice"],
    )
}

/// Several runs and each one's placements/s and submit→dispatch p50 against the first's.
fn with_ratios(runs: Vec<serde_json::Value>) -> serde_json::Value {
    let base = |k: &str| runs[0][k].as_f64().unwrap_or(0.0).max(1e-9);
    let ratios: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| {
            serde_json::json!({
                "placement_threads": r["placement_threads"],
                "placed_per_sec": r["placed_per_sec"].as_f64().unwrap_or(0.0) / base("placed_per_sec"),
                "submit_to_dispatch_p50_ms": r["submit_to_dispatch_p50_ms"].as_f64().unwrap_or(0.0) / base("submit_to_dispatch_p50_ms"),
            })
        })
        .collect();
    serde_json::json!({ "runs": runs, "ratios": ratios })
}

/// One cluster, its slaves, the measurements.
fn run_one(a: &ScaleArgs, threads: Option<u32>) -> anyhow::Result<serde_json::Value> {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "hetsched-bench-scale-{}-{}",
        std::process::id(),
        threads.unwrap_or(0)
    ));
    let mut spec = ClusterSpec {
        masters: a.masters,
        insecure: a.insecure,
        ..Default::default()
    };
    if let Some(t) = threads {
        spec.master_args = vec!["--placement-threads".into(), t.to_string()];
    }
    let mut cluster = LocalCluster::launch(&dir, &spec)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(bench(&cluster, &dir, a));
    rt.shutdown_timeout(Duration::from_secs(1));
    cluster.stop();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut report = result?;
    report["placement_threads"] = threads.map(serde_json::Value::from).unwrap_or_default();
    Ok(report)
}

/// CPU time (user + system) of process `pid`, microseconds.
fn cpu_us(pid: i32) -> Option<u64> {
    hetsched_common::procstat::ProcStat::read(pid).map(|s| s.cpu_us())
}

/// Resident memory of process `pid`, MiB.
pub(super) fn rss_mib(pid: i32) -> Option<f64> {
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

async fn nodes_up(client: &mut BenchClient) -> u64 {
    client.status().await.map(|s| s.nodes.up).unwrap_or(0)
}

/// The leader's process.
async fn leader_pid(cluster: &LocalCluster, client: &mut BenchClient) -> anyhow::Result<i32> {
    let status = client.status().await?;
    cluster
        .masters
        .get((status.master_id.0 as usize).saturating_sub(1))
        .and_then(|m| m.pid())
        .context("the leader's process")
}

/// Memory per slave, KiB, on the leader and the largest on a follower: the masters' growth
/// in resident memory since `before` (taken before the slaves came).
fn kib_per_slave(before: &HashMap<i32, f64>, leader: i32, slaves: u32) -> (f64, f64) {
    let per_slave = |p: i32| {
        (rss_mib(p).unwrap_or(0.0) - before.get(&p).copied().unwrap_or(0.0)).max(0.0) * 1024.0
            / slaves as f64
    };
    let follower = before
        .keys()
        .filter(|&&p| p != leader)
        .map(|&p| per_slave(p))
        .fold(0.0, f64::max);
    (per_slave(leader), follower)
}

/// The heartbeats-only window: the leader's CPU over it and the heartbeats sent.
struct Quiet {
    cpu_us: f64,
    secs: f64,
    heartbeats: u64,
}

async fn quiet_window(leader: i32, fleet: &Fleet, quiet: Duration) -> Quiet {
    let (cpu0, hb0) = (cpu_us(leader).unwrap_or(0), fleet.progress().heartbeats);
    let q0 = Instant::now();
    tokio::time::sleep(quiet).await;
    let (cpu1, hb1) = (cpu_us(leader).unwrap_or(0), fleet.progress().heartbeats);
    Quiet {
        cpu_us: cpu1.saturating_sub(cpu0) as f64,
        secs: q0.elapsed().as_secs_f64(),
        heartbeats: hb1.saturating_sub(hb0).max(1),
    }
}

/// Submit → first arrival of every task, ms, sorted; and the tasks that never arrived.
fn latencies(
    sent_at: &[(u64, Vec<hetsched_common::TaskId>)],
    running: &HashMap<u64, u64>,
) -> (Vec<f64>, u64) {
    let mut lat = Vec::new();
    let mut lost = 0u64;
    for (sent, tasks) in sent_at {
        for t in tasks {
            match running.get(&t.0) {
                Some(at) => lat.push(at.saturating_sub(*sent) as f64 / 1e3),
                None => lost += 1,
            }
        }
    }
    lat.sort_by(|x, y| x.total_cmp(y));
    (lat, lost)
}

/// Tasks the leader has not seen end (pending, assigned or running).
async fn unfinished(client: &mut BenchClient) -> u64 {
    match client.status().await {
        Ok(s) => ["pending", "assigned", "running"]
            .iter()
            .map(|k| s.tasks.get(*k).copied().unwrap_or(0))
            .sum(),
        Err(_) => u64::MAX,
    }
}

/// Every slave up (or an error saying which limit stopped them).
async fn slaves_up(
    client: &mut BenchClient,
    fleet: &mut Fleet,
    procs: &Procs,
    a: &ScaleArgs,
) -> anyhow::Result<f64> {
    let t_reg = Instant::now();
    let deadline = t_reg + a.timeout;
    loop {
        let up = nodes_up(client).await;
        if up >= a.slaves as u64 {
            return Ok(t_reg.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline || fleet.failed() {
            bail!(
                "only {up} of {} slaves up within {:?}: {}",
                a.slaves,
                t_reg.elapsed(),
                super::bench_scale_fleet::limit_hint(procs, fleet, a.slaves)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn bench(
    cluster: &LocalCluster,
    dir: &std::path::Path,
    a: &ScaleArgs,
) -> anyhow::Result<serde_json::Value> {
    let masters = cluster.master_addrs.clone();
    let mut client = BenchClient::new(masters.clone());
    let pids: Vec<i32> = cluster.masters.iter().filter_map(|m| m.pid()).collect();
    let rss0: HashMap<i32, f64> = pids
        .iter()
        .map(|&p| (p, rss_mib(p).unwrap_or(0.0)))
        .collect();
    let ca = (!a.insecure)
        .then(crate::cmd::local::security::process_ca)
        .transpose()?;
    let mut fleet = Fleet::start(a, &masters, ca.as_deref(), dir)?;
    let leader = leader_pid(cluster, &mut client).await?;
    let procs = Procs {
        leader,
        fleet: fleet.pids(),
    };
    let register_secs = slaves_up(&mut client, &mut fleet, &procs, a).await?;
    let status = client.status().await?;
    eprintln!(
        "bench scale: {} slaves up in {register_secs:.1} s in {} processes; leader is master {}; {:?} of heartbeats only",
        a.slaves,
        fleet.len(),
        status.master_id.0,
        a.quiet
    );
    let (leader_kib, follower_kib) = kib_per_slave(&rss0, leader, a.slaves);
    let leader_fds = super::bench_scale_fleet::open_fds(leader);
    let q = quiet_window(leader, &fleet, a.quiet).await;
    let (quiet_cpu, quiet_secs) = (q.cpu_us, q.secs);
    let cpu_per_hb = quiet_cpu / q.heartbeats as f64;
    let hb_per_sec = q.heartbeats as f64 / quiet_secs;
    let (t0_us, sent_at, submit_secs) = submit(&masters, a).await?;
    let deadline = Instant::now() + a.timeout;
    while fleet.progress().completed < a.tasks && Instant::now() < deadline && !fleet.failed() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The helpers' counts add a task finished on two slaves twice: the leader says when
    // none is left to finish.
    while Instant::now() < deadline && !fleet.failed() && unfinished(&mut client).await > 0 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let timed_out = Instant::now() >= deadline
        && (fleet.progress().completed < a.tasks || unfinished(&mut client).await > 0);
    // Late duplicates would show within a heartbeat or two.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = client.status().await?;
    let rss = rss_mib(leader).unwrap_or(0.0);
    let processes = fleet.len();
    let leader_fds_end = super::bench_scale_fleet::open_fds(leader);
    let got = fleet.finish()?;
    let (lat, lost) = latencies(&sent_at, &got.running);
    let place_secs = (got.last_placed.saturating_sub(t0_us) as f64 / 1e6).max(1e-9);
    let placed = got.running.len() as u64;
    Ok(serde_json::json!({
        "slaves": a.slaves,
        "slave_processes": processes,
        "tasks": a.tasks,
        "masters": a.masters,
        "register_secs": register_secs,
        "submit_secs": submit_secs,
        "placed": placed,
        // Not every task completed within --timeout: the figures are partial.
        "timed_out": timed_out,
        "completed": got.completed,
        "placed_per_sec": placed as f64 / place_secs,
        "submit_to_dispatch_p50_ms": percentile(&lat, 0.5),
        "submit_to_dispatch_p99_ms": percentile(&lat, 0.99),
        "dispatch_messages": got.dispatch_messages,
        "heartbeats_per_sec": hb_per_sec,
        // Issue 54: past the leader's heartbeat limit the slaves beat as it asks.
        "heartbeat_period_ms": a.slaves as f64 / hb_per_sec.max(1e-9) * 1e3,
        "leader_cpu_per_heartbeat_us": cpu_per_hb,
        "leader_cpu_per_slave_per_sec_us": quiet_cpu / quiet_secs / a.slaves as f64,
        "leader_cpu_cores_heartbeats": quiet_cpu / quiet_secs / 1e6,
        "leader_rss_mib": rss,
        "leader_rss_kib_per_node": rss * 1024.0 / a.slaves as f64,
        "leader_kib_per_slave": leader_kib,
        "follower_kib_per_slave": follower_kib,
        "leader_open_files": leader_fds,
        "leader_open_files_end": leader_fds_end,
        "snapshot_bytes": after.state_bytes,
        "snapshot_file_bytes": after.snapshot_bytes,
        "log_entries": after.raft.commit_index.saturating_sub(status.raft.commit_index),
        "lost": lost,
        "placed_twice": got.placed_twice,
    }))
}

/// Tasks submitted, with when each job was sent: (start, [(sent, tasks)], seconds), times
/// in microseconds since the Unix epoch.
#[allow(clippy::type_complexity)]
async fn submit(
    masters: &[String],
    a: &ScaleArgs,
) -> anyhow::Result<(u64, Vec<(u64, Vec<hetsched_common::TaskId>)>, f64)> {
    use super::bench_scale_slaves::unix_us;
    let jobs = a.tasks.div_ceil(a.job_size as u64);
    let request_base = (std::process::id() as u64) << 32;
    let t0 = Instant::now();
    let t0_us = unix_us();
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
        let mut c = BenchClient::new(masters.to_vec());
        in_flight.spawn(async move {
            let sent = unix_us();
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
    Ok((t0_us, sent_at, submit_secs))
}
