//! `hetsched bench e2e`: throughput and latency end to end on a local cluster of real master
//! processes (fsync on) — submit → placed → running → completed.
//!
//! Two kinds of slave:
//! - real `hetsched slave` processes running the task command (`true` by default). "Running"
//!   is the moment the slave created the task's stdout log file, which it does right before
//!   it spawns the process (read back from the file's modification time: `true` writes
//!   nothing into it afterwards);
//! - `--in-process-slaves`: slaves inside the bench process that speak the real wire
//!   protocol (register, heartbeat with what they hold, accept assignments, report started
//!   and finished) but start no process: "running" is the moment an assignment arrives, and
//!   the task finishes at once.
//!
//! Log entries and fsyncs per task are deltas of the leader's counters (`status`
//! `raft.commit_index`, `raft.flushes`) over the run divided by the tasks.

use super::local::{LocalCluster, SlaveSpec};
use anyhow::{bail, Context};
use hetsched_common::leader::{self, LeaderError, LeaderOptions};
use hetsched_common::protocol::{
    Assignment, ClientRequest, ClientResponse, ErrorKind, ErrorReply, HeldPhase, HeldTask, Message,
    SlaveCommand, SlaveCommandReply, SlaveRequest, SlaveResponse, StatusInfo, TaskReport,
};
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_common::{Attempt, ClientRequestId, JobId, NodeId, NodeResources, TaskId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// Arguments of `hetsched bench e2e`.
#[derive(clap::Args, Debug)]
pub struct E2eArgs {
    /// Masters in the cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub masters: u32,
    /// Slaves.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves: u32,
    /// Tasks in total.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub tasks: u64,
    /// Tasks per job.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub job_size: u32,
    /// Offered load in tasks per second (jobs are submitted at rate / job-size per second);
    /// default: as fast as the cluster takes them (4 submits in flight).
    #[arg(long, value_parser = positive)]
    pub rate: Option<f64>,
    /// Run the slaves inside the bench process: full protocol, no task processes.
    #[arg(long)]
    pub in_process_slaves: bool,
    /// CPUs each slave declares.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub slave_cpus: u32,
    /// CPUs each task asks for.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub task_cpus: f64,
    /// Task command for real slaves (split on spaces).
    #[arg(long, default_value = "true")]
    pub command: String,
    /// Give up after this long (e.g. `5m`).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Data directory (default: a fresh directory under the system's temp dir, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// A positive, finite number (a usage error otherwise: exit 2).
fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// Runs `bench e2e`.
pub fn run(a: E2eArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.command.split_whitespace().next().is_none() {
        bail!("--command must not be empty");
    }
    let (dir, remove) = match &a.data_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("hetsched-bench-e2e-{}", std::process::id())),
            true,
        ),
    };
    let real: Vec<SlaveSpec> = if a.in_process_slaves {
        Vec::new()
    } else {
        (0..a.slaves)
            .map(|_| SlaveSpec {
                cpus: a.slave_cpus,
                mem_mib: 1 << 20,
                gpus: 0,
                extra_args: Vec::new(),
            })
            .collect()
    };
    let mut cluster = LocalCluster::start(&dir, a.masters, &real)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(bench(&cluster, &dir, &a));
    drop(rt);
    cluster.stop();
    if remove && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = result?;
    if a.json {
        super::print_json(&report)
    } else {
        println!(
            "{} tasks ({} per job, {} slaves): submitted {:.0}/s, placed {:.0}/s, completed {:.0}/s; submit→running p50 {:.1} ms, p99 {:.1} ms; {:.3} log entries and {:.3} fsyncs per task",
            report["tasks"],
            a.job_size,
            if a.in_process_slaves { format!("{} in-process", a.slaves) } else { format!("{} real", a.slaves) },
            report["submit_per_sec"].as_f64().unwrap_or(0.0),
            report["placed_per_sec"].as_f64().unwrap_or(0.0),
            report["completed_per_sec"].as_f64().unwrap_or(0.0),
            report["submit_to_running_p50_ms"].as_f64().unwrap_or(0.0),
            report["submit_to_running_p99_ms"].as_f64().unwrap_or(0.0),
            report["log_entries_per_task"].as_f64().unwrap_or(0.0),
            report["fsyncs_per_task"].as_f64().unwrap_or(0.0),
        );
        Ok(())
    }
}

/// Requests to whichever master leads: the common [`LeaderClient`], retrying everything
/// that may pass (elections, `Busy`) every 50 ms; a refusal comes back as the error answer
/// it was.
struct LeaderClient {
    inner: leader::LeaderClient,
}

impl LeaderClient {
    fn new(masters: Vec<String>) -> Self {
        let options = LeaderOptions {
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(50),
            retry_busy: true,
            ..LeaderOptions::default()
        };
        Self {
            inner: leader::LeaderClient::new(masters).with_options(options),
        }
    }

    async fn call(&mut self, body: Message, deadline: Duration) -> anyhow::Result<Message> {
        match self.inner.request(body, deadline).await {
            Ok(m) => Ok(m),
            Err(LeaderError::Refused { kind, message, .. }) => {
                Ok(Message::Error(ErrorReply { kind, message }))
            }
            Err(LeaderError::Deadline { .. }) => {
                bail!("no answer from a leader within {deadline:?}")
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn status(&mut self) -> anyhow::Result<StatusInfo> {
        match self
            .call(
                Message::Client(ClientRequest::Status { stale: false }),
                Duration::from_secs(30),
            )
            .await?
        {
            Message::ClientReply(ClientResponse::Status(s)) => Ok(s),
            other => bail!("unexpected answer to status: {other:?}"),
        }
    }
}

/// What the in-process slaves record, shared by all of them.
#[derive(Default)]
struct Seen {
    /// First arrival of each task's assignment.
    running: HashMap<TaskId, Instant>,
    /// Tasks whose finish report the leader acknowledged.
    completed: HashSet<TaskId>,
    /// Arrival of the last new assignment.
    last_placed: Option<Instant>,
    /// Assignment messages received (a batch counts once).
    dispatch_messages: u64,
}

type SeenRef = Arc<Mutex<Seen>>;

fn lock(seen: &SeenRef) -> std::sync::MutexGuard<'_, Seen> {
    match seen.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One in-process slave: a listener for the masters' commands and a link task.
struct InProcSlave {
    reports: mpsc::UnboundedSender<(TaskId, Attempt)>,
    held: Arc<Mutex<BTreeMap<(TaskId, Attempt), ()>>>,
    seen: SeenRef,
}

impl InProcSlave {
    /// Accepts an assignment (again, for a duplicate) and queues its reports.
    fn accept(&self, a: &Assignment) {
        let new = {
            let mut held = match self.held.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            held.insert((a.task, a.attempt), ()).is_none()
        };
        if new {
            let now = Instant::now();
            let mut s = lock(&self.seen);
            s.running.entry(a.task).or_insert(now);
            s.last_placed = Some(now);
            drop(s);
            let _ = self.reports.send((a.task, a.attempt));
        }
    }
}

async fn start_in_process_slave(
    i: u32,
    masters: Vec<String>,
    cpus: u32,
    seen: SeenRef,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind an in-process slave")?;
    let addr = listener.local_addr()?.to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let slave = Arc::new(InProcSlave {
        reports: tx,
        held: Arc::new(Mutex::new(BTreeMap::new())),
        seen: seen.clone(),
    });
    let s = slave.clone();
    let handler: Handler = Arc::new(move |msg, _peer| {
        let s = s.clone();
        Box::pin(async move {
            Some(match msg {
                Message::ToSlave(SlaveCommand::Assign(a)) => {
                    lock(&s.seen).dispatch_messages += 1;
                    s.accept(&a);
                    Message::ToSlaveReply(SlaveCommandReply::Accepted)
                }
                Message::ToSlave(SlaveCommand::AssignBatch(batch)) => {
                    lock(&s.seen).dispatch_messages += 1;
                    for a in &batch {
                        s.accept(a);
                    }
                    Message::ToSlaveReply(SlaveCommandReply::Accepted)
                }
                Message::ToSlave(SlaveCommand::StopTask { .. }) => {
                    Message::ToSlaveReply(SlaveCommandReply::Stopped)
                }
                _ => Message::Error(ErrorReply::new(
                    ErrorKind::Unsupported,
                    "an in-process bench slave serves assignments only",
                )),
            })
        })
    });
    tokio::spawn(async move {
        let _ = wire::serve(listener, FrameLimits::default(), handler).await;
    });
    tokio::spawn(slave_link(i, addr, masters, cpus, slave, rx));
    Ok(())
}

/// Registers, heartbeats, and reports every accepted task as started and finished (exit 0).
async fn slave_link(
    i: u32,
    addr: String,
    masters: Vec<String>,
    cpus: u32,
    slave: Arc<InProcSlave>,
    mut rx: mpsc::UnboundedReceiver<(TaskId, Attempt)>,
) {
    let mut client = LeaderClient::new(masters);
    let key = 0xE2E0_0000 + i as u64 + ((std::process::id() as u64) << 32);
    let register = |held: Vec<HeldTask>| {
        Message::Slave(SlaveRequest::Register {
            key,
            node: None,
            name: format!("inproc-{}", i + 1),
            addr: addr.clone(),
            capacity: NodeResources {
                cpu_milli: cpus as u64 * 1000,
                mem_mib: 1 << 20,
                ..Default::default()
            },
            labels: BTreeMap::new(),
            held,
            partitions: Vec::new(),
        })
    };
    let mut node: Option<NodeId> = None;
    let mut beat = tokio::time::interval(Duration::from_millis(400));
    let mut last_beat = Instant::now();
    let mut queue: Vec<(TaskId, Attempt)> = Vec::new();
    loop {
        if node.is_none() {
            match client
                .call(register(held_now(&slave)), Duration::from_secs(60))
                .await
            {
                Ok(Message::SlaveReply(SlaveResponse::Registered { node: n })) => node = Some(n),
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(n) = node else { continue };
        tokio::select! {
            _ = beat.tick() => {
                if !heartbeat(&mut client, &slave, n, &mut last_beat).await {
                    node = None;
                }
            }
            r = rx.recv() => match r {
                Some(r) => queue.push(r),
                None => return,
            },
        }
        while let Ok(r) = rx.try_recv() {
            queue.push(r);
        }
        let mut failed = Vec::new();
        for chunk in std::mem::take(&mut queue).chunks(2048) {
            if !deliver(&mut client, &slave, n, chunk).await {
                failed.extend_from_slice(chunk);
            }
            // A long backlog must not starve liveness.
            if last_beat.elapsed() > Duration::from_millis(400)
                && !heartbeat(&mut client, &slave, n, &mut last_beat).await
            {
                node = None;
            }
        }
        queue = failed;
    }
}

/// What an in-process slave holds: everything accepted and not acknowledged finished.
fn held_now(slave: &InProcSlave) -> Vec<HeldTask> {
    let held = match slave.held.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    held.keys()
        .map(|&(task, attempt)| HeldTask {
            task,
            attempt,
            phase: HeldPhase::Running,
        })
        .collect()
}

/// One heartbeat; false when the leader does not know the node (register again).
async fn heartbeat(
    client: &mut LeaderClient,
    slave: &InProcSlave,
    node: NodeId,
    last_beat: &mut Instant,
) -> bool {
    let hb = Message::Slave(SlaveRequest::Heartbeat {
        node,
        held: held_now(slave),
        samples: Vec::new(),
        engine_load: Vec::new(),
    });
    *last_beat = Instant::now();
    !matches!(
        client.call(hb, Duration::from_secs(5)).await,
        Ok(Message::Error(ErrorReply {
            kind: ErrorKind::UnknownNode,
            ..
        }))
    )
}

/// Reports the tasks as started and finished (exit 0), all in one message as a real
/// slave's link batches them; what is not acknowledged is reconciled through heartbeats.
async fn deliver(
    client: &mut LeaderClient,
    slave: &InProcSlave,
    node: NodeId,
    tasks: &[(TaskId, Attempt)],
) -> bool {
    let reports = tasks
        .iter()
        .flat_map(|&(task, attempt)| {
            [
                TaskReport::Started { task, attempt },
                TaskReport::Finished {
                    task,
                    attempt,
                    exit_code: 0,
                    reason: None,
                },
            ]
        })
        .collect();
    let msg = Message::Slave(SlaveRequest::TaskReports { node, reports });
    if let Ok(Message::SlaveReply(SlaveResponse::Ack)) =
        client.call(msg, Duration::from_secs(30)).await
    {
        if let Ok(mut h) = slave.held.lock() {
            for t in tasks {
                h.remove(t);
            }
        }
        lock(&slave.seen)
            .completed
            .extend(tasks.iter().map(|t| t.0));
        true
    } else {
        false
    }
}

/// A submitted job: when its submit was sent, and its task ids once answered.
struct Submitted {
    sent: Instant,
    sent_wall: SystemTime,
    job: JobId,
    tasks: Vec<TaskId>,
}

async fn bench(
    cluster: &LocalCluster,
    dir: &Path,
    a: &E2eArgs,
) -> anyhow::Result<serde_json::Value> {
    let masters = cluster.master_addrs.clone();
    let mut client = LeaderClient::new(masters.clone());
    let seen: SeenRef = Arc::new(Mutex::new(Seen::default()));
    if a.in_process_slaves {
        for i in 0..a.slaves {
            start_in_process_slave(i, masters.clone(), a.slave_cpus, seen.clone()).await?;
        }
    }
    // Every slave registered and up.
    let start = Instant::now();
    loop {
        if let Ok(Message::ClientReply(ClientResponse::Nodes(n))) = client
            .call(
                Message::Client(ClientRequest::Nodes { stale: false }),
                Duration::from_secs(60),
            )
            .await
        {
            if n.iter().filter(|n| n.state == "up").count() >= a.slaves as usize {
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the slaves did not all register within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = client.status().await?;
    eprintln!(
        "bench e2e: leader is master {}; {} {} slaves up; submitting {} tasks in jobs of {}",
        before.master_id.0,
        a.slaves,
        if a.in_process_slaves {
            "in-process"
        } else {
            "real"
        },
        a.tasks,
        a.job_size
    );
    let jobs = a.tasks.div_ceil(a.job_size as u64);
    let cpu_milli = (a.task_cpus * 1000.0).round() as u64;
    let command: Vec<String> = if a.in_process_slaves {
        vec!["true".into()]
    } else {
        a.command.split_whitespace().map(String::from).collect()
    };
    let t0 = Instant::now();
    let submitted: Arc<Mutex<Vec<Submitted>>> = Arc::new(Mutex::new(Vec::new()));
    let mut in_flight = tokio::task::JoinSet::new();
    let window = if a.rate.is_some() { 64 } else { 4 };
    let request_base = (std::process::id() as u64) << 32;
    for j in 0..jobs {
        if let Some(rate) = a.rate {
            let due = t0 + Duration::from_secs_f64(j as f64 * a.job_size as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        while in_flight.len() >= window {
            if let Some(r) = in_flight.join_next().await {
                r??;
            }
        }
        let count = (a.tasks - j * a.job_size as u64).min(a.job_size as u64) as u32;
        let spec: hetsched_common::JobSpec = serde_json::from_value(serde_json::json!({
            "name": format!("e2e-{j}"),
            "user": "bench",
            "partition": "",
            "resources": {"cpu_milli": cpu_milli, "mem_mib": 1},
            "count": count,
            "command": command,
            "env": {},
        }))
        .context("job spec")?;
        let req = Message::Client(ClientRequest::Submit {
            request: ClientRequestId(request_base + j + 1),
            spec,
        });
        let masters = masters.clone();
        let submitted = submitted.clone();
        in_flight.spawn(async move {
            let mut c = LeaderClient::new(masters);
            let (sent, sent_wall) = (Instant::now(), SystemTime::now());
            match c.call(req, Duration::from_secs(120)).await? {
                Message::ClientReply(ClientResponse::Submitted { job, tasks }) => {
                    if let Ok(mut s) = submitted.lock() {
                        s.push(Submitted {
                            sent,
                            sent_wall,
                            job,
                            tasks,
                        });
                    }
                    Ok::<(), anyhow::Error>(())
                }
                other => bail!("unexpected answer to submit: {other:?}"),
            }
        });
    }
    while let Some(r) = in_flight.join_next().await {
        r??;
    }
    let submit_secs = t0.elapsed().as_secs_f64();
    eprintln!("bench e2e: all {jobs} jobs submitted in {submit_secs:.2} s");
    let submitted = match Arc::try_unwrap(submitted) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(_) => bail!("submitters still running"),
    };
    // Wait for every task to complete.
    let deadline = t0 + a.timeout;
    let done_at;
    if a.in_process_slaves {
        loop {
            let done = lock(&seen).completed.len() as u64;
            if done >= a.tasks {
                done_at = Instant::now();
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {done} of {} tasks completed within {:?}",
                    a.tasks,
                    a.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    } else {
        let mut open: Vec<JobId> = submitted.iter().map(|s| s.job).collect();
        loop {
            let mut still = Vec::new();
            for job in open {
                match client
                    .call(
                        Message::Client(ClientRequest::Jobs {
                            stale: true,
                            filter: hetsched_common::protocol::ListFilter {
                                job: Some(job),
                                ..Default::default()
                            },
                        }),
                        Duration::from_secs(10),
                    )
                    .await?
                {
                    Message::ClientReply(ClientResponse::Jobs(j))
                        if j.iter()
                            .all(|j| matches!(j.state.as_str(), "succeeded" | "failed")) => {}
                    _ => still.push(job),
                }
            }
            open = still;
            if open.is_empty() {
                done_at = Instant::now();
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {jobs} jobs unfinished after {:?}",
                    open.len(),
                    a.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let after = client.status().await?;
    // Submit → running per task.
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).context("histogram")?;
    let mut last_running = t0;
    if a.in_process_slaves {
        let s = lock(&seen);
        for sub in &submitted {
            for t in &sub.tasks {
                if let Some(at) = s.running.get(t) {
                    let _ = hist.record(at.saturating_duration_since(sub.sent).as_micros() as u64);
                }
            }
        }
        last_running = s.last_placed.unwrap_or(t0);
    } else {
        let starts = real_starts(dir, a.slaves);
        let t0_wall = SystemTime::now() - t0.elapsed();
        for sub in &submitted {
            for t in &sub.tasks {
                if let Some(at) = starts.get(t) {
                    let us = at
                        .duration_since(sub.sent_wall)
                        .map_or(0, |d| d.as_micros() as u64);
                    let _ = hist.record(us);
                    if let Ok(d) = at.duration_since(t0_wall) {
                        last_running = last_running.max(t0 + d);
                    }
                }
            }
        }
    }
    let secs = |i: Instant| i.saturating_duration_since(t0).as_secs_f64().max(1e-6);
    let per_task = |d: u64| d as f64 / a.tasks as f64;
    let round = |x: f64, p: f64| (x * p).round() / p;
    let q = |x: f64| round(hist.value_at_quantile(x) as f64 / 1000.0, 100.0);
    let dispatch_messages = lock(&seen).dispatch_messages;
    Ok(serde_json::json!({
        "tasks": a.tasks,
        "job_size": a.job_size,
        "slaves": a.slaves,
        "masters": a.masters,
        "rate": a.rate,
        "submit_per_sec": round(a.tasks as f64 / submit_secs.max(1e-6), 1.0),
        "placed_per_sec": round(a.tasks as f64 / secs(last_running), 1.0),
        "completed_per_sec": round(a.tasks as f64 / secs(done_at), 1.0),
        "submit_to_running_p50_ms": q(0.5),
        "submit_to_running_p99_ms": q(0.99),
        "running_samples": hist.len(),
        "log_entries_per_task": round(per_task(after.raft.commit_index.saturating_sub(before.raft.commit_index)), 1000.0),
        "fsyncs_per_task": round(per_task(after.raft.flushes.saturating_sub(before.raft.flushes)), 1000.0),
        "dispatch_messages_per_task": if a.in_process_slaves { Some(round(per_task(dispatch_messages), 1000.0)) } else { None },
        "leader_changed": before.master_id != after.master_id,
        "in_process_slaves": a.in_process_slaves,
    }))
}

/// When each task's process started on a real slave: the modification time of its stdout
/// log file `task-ID-ATTEMPT.out`, which the slave creates right before spawning it (first
/// attempt seen wins).
fn real_starts(dir: &Path, slaves: u32) -> HashMap<TaskId, SystemTime> {
    let mut starts: HashMap<TaskId, SystemTime> = HashMap::new();
    for i in 1..=slaves {
        let logs = dir.join(format!("slave-{i}")).join("logs");
        let Ok(rd) = std::fs::read_dir(&logs) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name
                .strip_prefix("task-")
                .and_then(|s| s.strip_suffix(".out"))
            else {
                continue;
            };
            let Some(id) = stem.split('-').next().and_then(|s| s.parse::<u64>().ok()) else {
                continue;
            };
            if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                let slot = starts.entry(TaskId(id)).or_insert(m);
                if m < *slot {
                    *slot = m;
                }
            }
        }
    }
    starts
}
