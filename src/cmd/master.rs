//! `hetsched master`.

use std::path::PathBuf;

/// Arguments of `hetsched master`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// This master's id (≥ 1).
    #[arg(long)]
    pub id: u64,
    /// Cluster address to listen on (Raft, slaves and clients share it).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// Every master, this one included: ID=HOST:PORT,... Bootstraps an empty data dir; with
    /// --join it only tells this master where the existing ones are.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "ID=HOST:PORT,..."
    )]
    pub peers: Vec<String>,
    /// Join an existing cluster: start empty, without bootstrapping, and wait to be added
    /// with `hetsched members add ID HOST:PORT` (then caught up by snapshot).
    #[arg(long)]
    pub join: bool,
    /// Data directory (Raft log and snapshots).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Optional HTTP address for the JSON API (/v1), /metrics, /healthz, /readyz and the
    /// dashboard (/ui). Unauthenticated: bind it where only trusted clients reach it.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Snapshot the state and compact the Raft log every this many applied entries.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_entries: u64,
    /// Node selection for tasks that ask for GPUs: auto (frag, or best-fit for GPU tasks
    /// while 15 % or more of the recent GPU tasks name a GPU model), frag
    /// (fragmentation-aware packing), least-fit (spread), best-fit (pack), first-fit,
    /// next-fit, random.
    #[arg(long, default_value = "auto")]
    pub policy: hetsched_master_core::sched::index::PolicyKind,
    /// Node selection for tasks that ask no GPU (same names). Under --policy frag or auto
    /// they go to CPU-only nodes first (chosen by this policy), then where they strand fewest GPUs.
    #[arg(long, default_value = "least-fit")]
    pub cpu_policy: hetsched_master_core::sched::index::PolicyKind,
    /// Queue order (S3): fifo (priority, then submission), drf (priority, then users by
    /// dominant share) or pipeline (cpu / gpu-single / gpu-multi queues, DRF within each,
    /// CPUs reserved for GPU tasks on GPU nodes with borrowing and take-back). The default
    /// is pipeline: on the Alibaba trace under load it has GPU tasks wait less than drf with
    /// CPU tasks waiting no more (BENCHMARKS.md#s3-queueing-trace).
    #[arg(long, default_value = "pipeline")]
    pub queueing: hetsched_master_core::sched::multiqueue::Ordering,
    /// Under --queueing pipeline: CPUs reserved per GPU on GPU nodes until a GPU task's
    /// demand is seen (then the highest CPUs per GPU seen).
    #[arg(long, default_value_t = 4.0)]
    pub gpu_cpu_reserve: f64,
    /// S0.1: an API-program task's target engine kinds are the fastest in its task–engine
    /// relation and any whose efficiency (fastest total time / its total time) is at least
    /// this. In (0, 1]; 1.0: the fastest kind only.
    #[arg(long, default_value_t = 1.0, value_name = "RATIO", value_parser = parse_ratio)]
    pub engine_efficiency_bound: f64,
    /// S0.2: slaves whose load rate of the target engine kind (busy engines / engines,
    /// queued tasks counted) is at or above this are passed over. In (0, 1].
    #[arg(long, default_value_t = 0.8, value_name = "RATIO", value_parser = parse_ratio)]
    pub load_bound: f64,
    /// S0.3: tasks the master may assign to a slave beyond its free resources; they wait in
    /// the slave's local queue (idle slaves steal them, S0.4). The leader promotes a queued
    /// task when room frees (the slave asks, and starts it only once the start is
    /// committed). 0: no slave queues.
    #[arg(long, default_value_t = 4, value_name = "TASKS")]
    pub queue_depth: u32,
    /// S4.7: threads the leader selects nodes on, each for its own group of a plan's
    /// tasks against its own partition of the index (default: min(cores − 1, 4), at
    /// least 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub placement_threads: Option<u32>,
    /// S4.7: groups a plan's placeable tasks are dealt to (part of the plan's input, so
    /// the plan does not depend on the host; default: as many as threads; 1: one
    /// selection after another, as before).
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub placement_groups: Option<u32>,
    /// Silence after which the leader declares a slave down, ms (longer past
    /// --max-heartbeats-per-sec: 12.5 of the period slaves are asked for).
    #[arg(long, default_value_t = 5000)]
    pub node_timeout_ms: u64,
    /// The most heartbeats a second the leader takes from all its slaves together: past
    /// that many × 0.4 s slaves, each is asked to beat less often (at 10,000 slaves, every
    /// 4 s), and a node is declared down after as many periods of silence as at 400 ms
    /// (12.5). 0: no limit (every slave beats at its own period).
    #[arg(long, default_value_t = 2500, value_name = "N")]
    pub max_heartbeats_per_sec: u32,
    /// Admin listener for benchmark proposals and fault injection (docs/CONTRACT.md). Off by
    /// default; the cluster port refuses those requests. Bind it to loopback only.
    #[arg(long, value_name = "HOST:PORT")]
    pub admin: Option<String>,
    /// Finished jobs (and their tasks) are removed from the replicated state this long after
    /// their last task ended, e.g. `30s`, `1h`; `off` keeps them forever.
    #[arg(long, default_value = "1h", value_name = "DURATION|off", value_parser = parse_gc_after)]
    pub job_gc_after: GcAfter,
    /// How long a client request's outcome is kept so that a retry applies once. Keep it
    /// at least as long as clients retry (HETSCHED_CLIENT_TIMEOUT_MS).
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub request_retention: std::time::Duration,
    /// How long the outcome of a submit made with an idempotency key (`submit
    /// --idempotency-key`, HTTP `Idempotency-Key`) is kept: the same key from the same user
    /// answers the first job until then.
    #[arg(long, default_value = "24h", value_name = "DURATION", value_parser = parse_duration)]
    pub idempotency_retention: std::time::Duration,
    /// How long each ended attempt's usage record is kept in detail (`hetsched history`);
    /// older ones are folded into per-user per-day totals (`hetsched usage`), which stay.
    #[arg(long, default_value = "30d", value_name = "DURATION", value_parser = parse_duration)]
    pub accounting_retention: std::time::Duration,
    /// Fair share: how fast past usage is forgotten (Slurm's PriorityDecayHalfLife); within
    /// one S1 priority level users are ordered by their factor 2^(−usage share ÷ share).
    /// `off` keeps the plain DRF order.
    #[arg(long, default_value = "7d", value_name = "DURATION|off", value_parser = parse_gc_after)]
    pub fairshare_half_life: GcAfter,
    /// Time a preempted task gets between SIGTERM and SIGKILL (S1).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub preempt_grace: std::time::Duration,
    /// S3.2: how long each CPU count of a GPU task's search (`submit --class`) is measured
    /// before the next step.
    #[arg(long, default_value = "90s", value_name = "DURATION", value_parser = parse_duration)]
    pub probe_period: std::time::Duration,
    /// S3.2: a step of the CPU-count search counts only when the mean GPU utilisation
    /// improves by more than this many percentage points.
    #[arg(long, default_value_t = 1.0, value_name = "POINTS", value_parser = parse_epsilon)]
    pub util_epsilon: f64,
    /// A task preempted this many times is not chosen as a victim again (S1).
    #[arg(long, default_value_t = 3)]
    pub max_preemptions: u32,
    /// Most tasks pending at once; a submit beyond it gets "busy, retry" (exit 5). 0: no cap.
    #[arg(long, default_value_t = 1_000_000, value_name = "TASKS")]
    pub max_pending: u64,
    /// Tasks per second each user may submit (burst: one second's worth); beyond it a
    /// submit gets "busy, retry" (exit 5). Default: no limit.
    #[arg(long, value_name = "TASKS_PER_SEC")]
    pub submit_rate: Option<f64>,
    #[command(flatten)]
    pub security: super::security::ServerSecurity,
}

/// `--job-gc-after`: a duration, or never.
#[derive(Clone, Copy, Debug)]
pub struct GcAfter(pub Option<std::time::Duration>);

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 30s, 5m, 1h: {e}"))
}

/// A ratio in (0, 1] (`--engine-efficiency-bound`, `--load-bound`).
fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        Ok(v) => Err(format!("{v} is outside (0, 1]")),
        Err(_) => Err(format!("{s:?} is not a number in (0, 1]")),
    }
}

/// A duration, or `off`/`never` (`--job-gc-after`, `--fairshare-half-life`).
pub(crate) fn parse_gc_after(s: &str) -> Result<GcAfter, String> {
    match s {
        "off" | "never" => Ok(GcAfter(None)),
        _ => parse_duration(s).map(|d| GcAfter(Some(d))),
    }
}

/// Runs a master until stopped.
pub fn run(a: Args) -> anyhow::Result<()> {
    use anyhow::Context;
    use hetsched_master::server::{self, DutiesConfig, MasterConfig};
    hetsched_common::telemetry::init_logging("info");
    if a.id == 0 {
        anyhow::bail!("--id must be at least 1 (Raft reserves 0)");
    }
    hetsched_common::parse_host_port(&a.listen)?;
    if let Some(admin) = &a.admin {
        hetsched_common::parse_host_port(admin).context("--admin")?;
    }
    if a.submit_rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        anyhow::bail!("--submit-rate must be a positive number of tasks per second");
    }
    let engine_choice = hetsched_master_core::sched::engine_choice::EngineChoiceConfig {
        efficiency_bound: a.engine_efficiency_bound,
        load_bound: a.load_bound,
    };
    engine_choice.validate().map_err(anyhow::Error::msg)?;
    let peers = server::parse_peers(&a.peers)?;
    std::fs::create_dir_all(&a.data_dir)
        .with_context(|| format!("cannot create data dir {}", a.data_dir.display()))?;
    // Last of the checks: a bad flag is reported as itself, not as missing certificates.
    a.security.install(
        hetsched_common::certs::Role::Master,
        Some(&a.id.to_string()),
    )?;
    let cfg = MasterConfig {
        id: a.id,
        listen: a.listen,
        peers,
        data_dir: a.data_dir,
        http: a.http,
        admin: a.admin,
        join: a.join,
        snapshot_entries: a.snapshot_entries,
        policy: a.policy,
        cpu_policy: a.cpu_policy,
        engine_choice,
        queue_depth: a.queue_depth,
        parallel: placement(a.placement_threads, a.placement_groups),
        accounting_retention_ms: a.accounting_retention.as_millis() as u64,
        fairshare_half_life_ms: a
            .fairshare_half_life
            .0
            .map(|d| (d.as_millis() as u64).max(1)),
        queueing: hetsched_master_core::sched::multiqueue::QueueingConfig {
            ordering: a.queueing,
            reserve_start_milli_per_gpu: cpus_to_milli(a.gpu_cpu_reserve)?,
        },
        preemption: hetsched_master_core::sched::preemption::PreemptionConfig {
            max_preemptions: a.max_preemptions,
            ..Default::default()
        },
        duties: DutiesConfig {
            node_timeout_ms: a.node_timeout_ms.max(500),
            job_gc_after_ms: a.job_gc_after.0.map(|d| d.as_millis() as u64),
            request_retention_ms: a.request_retention.as_millis() as u64,
            idempotency_retention_ms: a.idempotency_retention.as_millis() as u64,
            preempt_grace_ms: a.preempt_grace.as_millis() as u64,
            probe_period_ms: (a.probe_period.as_millis() as u64).max(1),
            util_epsilon: a.util_epsilon,
            max_heartbeats_per_sec: a.max_heartbeats_per_sec,
            ..DutiesConfig::default()
        },
        admission: hetsched_master::backpressure::AdmissionConfig {
            max_pending: (a.max_pending > 0).then_some(a.max_pending),
            submit_rate: a.submit_rate.filter(|r| *r > 0.0),
        },
    };
    let reloader = a
        .security
        .reloader(hetsched_common::certs::Role::Master, Some(a.id.to_string()));
    // After the flags are checked (a bad one is reported alone), before any socket.
    super::log_open_file_limit();
    let system = actix::System::new();
    system
        .block_on(async move {
            if let Some(r) = reloader {
                tokio::spawn(r);
            }
            server::run(cfg).await
        })
        .context("master stopped")
}

/// `--gpu-cpu-reserve`: cores (a finite, non-negative number, at most a million) to
/// thousandths.
fn cpus_to_milli(cpus: f64) -> anyhow::Result<u64> {
    if !cpus.is_finite() || !(0.0..=1e6).contains(&cpus) {
        anyhow::bail!("--gpu-cpu-reserve must be a number of CPUs from 0 to 1000000, got {cpus}");
    }
    Ok((cpus * 1000.0).round() as u64)
}

/// `--util-epsilon`: percentage points, 0–100.
fn parse_epsilon(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a utilisation difference in points within 0..=100 (e.g. 1 or 2.5)"
        )),
    }
}

/// The S4.7 split from `--placement-threads` and `--placement-groups`: the host's default
/// (min(cores − 1, 4) threads) for what is not given, as many groups as threads.
fn placement(
    threads: Option<u32>,
    groups: Option<u32>,
) -> hetsched_master_core::sched::ParallelConfig {
    let host = hetsched_master_core::sched::ParallelConfig::for_host();
    let threads = threads.unwrap_or(host.threads);
    hetsched_master_core::sched::ParallelConfig {
        groups: groups.unwrap_or(threads),
        threads,
    }
}
