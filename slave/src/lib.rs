//! hetsched slave agent: registers with the masters, heartbeats, runs assigned tasks as child
//! processes, and keeps every result the master has not acknowledged.
//!
//! Modules:
//! - [`queue`] — the local queue (pure bookkeeping, unit-tested);
//! - [`store`] — sled persistence: identity, held tasks, acknowledged attempts;
//! - [`attempt`] — a task attempt: its files and their format, preparing and launching it
//!   (the supervisor pool, the one way command tasks start, behind a launcher seam), `/proc`
//!   readings of its processes, the exit-code convention;
//! - [`supervisor`] — the entry point of `hetsched supervise --pool DIR`;
//! - [`cgroup`] — CPU and memory limits through cgroups v2 or v1;
//! - [`agent`] — the task that owns queue and store and does their I/O;
//! - [`link`] — registration, heartbeats, report delivery, leader following;
//! - `listener` — what the slave answers on its port (masters' commands, peers' calls);
//! - [`gpu`] — GPU probes (NVML, emulated);
//! - [`probe`] — per-task GPU-utilisation and memory-bandwidth probes (NVML, resctrl,
//!   emulated) and the sampling loop (S3);
//! - [`contention`] — the S3.6 contention rule (pure): which CPU tasks to compress;
//! - [`engine`] — engines (S0): the engines file, built-in kernels, plug-ins, the profiler
//!   and the selection table (S0.5);
//! - [`program`] — API-program tasks, run in-process call by call on the best available
//!   engine;
//! - [`announce`] — delivery of the profile and program call summaries to the masters;
//! - [`forward`] — S0.6 forwarding of single calls to peers (query the leader, send the
//!   call to the peer it names); [`forward_serve`] — serving peers' forwarded calls.
//!
//! # Restart semantics (each attempt runs at most once)
//! Everything accepted is in sled before the master hears `Accepted`; every result is in sled
//! before it is reported and stays there until the master answers `Ack`. Each attempt runs
//! under the slave's supervisor pool, which outlives the agent and records the exit status
//! durably. On start the slave reloads it all: queued tasks run; unacknowledged results are
//! reported again; attempts that were running are re-adopted (their supervisor still lives),
//! collected (it ended meanwhile: the true exit code is reported) or — supervisor gone with no
//! status — have their leftovers killed and are reported `lost`, and the master runs them
//! again as attempt + 1. No attempt is ever started twice, and a restart of the agent kills
//! nothing (see [`agent`]).

#![deny(missing_docs)]

pub mod agent;
pub mod announce;
pub mod attempt;
pub mod cgroup;
pub mod cgroup_favor;
pub mod cgroup_spares;
pub mod cgroup_usage;
pub mod container;
pub mod contention;
pub mod engine;
pub mod forward;
pub mod forward_serve;
pub mod gpu;
pub mod http;
pub mod link;
mod listener;
pub mod log_spares;
pub mod logs;
pub mod membw_total;
pub mod probe;
pub use probe::ProbeOptions;
pub mod program;
pub mod queue;
pub mod runtime_dir;
pub mod small_file;
pub mod store;
pub mod supervisor;
pub mod vspawn;

use hetsched_common::wire::{self, FrameLimits};
use hetsched_common::NodeResources;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Configuration of a slave process (from `hetsched slave ...`).
#[derive(Clone, Debug)]
pub struct SlaveConfig {
    /// Address to listen on for the masters' commands.
    pub listen: String,
    /// Address masters use to reach this slave (defaults to `listen`).
    pub advertise: Option<String>,
    /// Master cluster addresses.
    pub masters: Vec<String>,
    /// Data directory (stable id, accepted tasks, results, logs).
    pub data_dir: PathBuf,
    /// CPU capacity in whole cores.
    pub cpus: u32,
    /// Memory capacity in MiB.
    pub mem_mib: u64,
    /// Number of GPUs to offer (emulated unless real ones are detected).
    pub gpus: u32,
    /// Model name for emulated GPUs.
    pub gpu_model: Option<String>,
    /// Human name (defaults to the advertise address).
    pub name: Option<String>,
    /// Partitions this node serves (S1; empty: `default`).
    pub partitions: Vec<String>,
    /// The supervisor command, program and leading arguments, to which each attempt's
    /// directory is appended (the CLI uses `[current_exe, "supervise"]`).
    pub supervisor: Vec<std::ffi::OsString>,
    /// Root of the cgroup filesystem (normally `/sys/fs/cgroup`); `None` runs tasks without
    /// cgroups.
    pub cgroup_root: Option<PathBuf>,
    /// Whether the slave has the kernel favour cgroup moves (`favordynmods`, see
    /// [`cgroup_favor`]) when tasks run in cgroups: `slave --no-favordynmods` turns it off.
    pub favordynmods: bool,
    /// Probes and the contention rule (S3).
    pub probes: ProbeOptions,
    /// S3 GPU pool to announce (`None`: by GPU count, multi with 8 or more).
    pub gpu_pool: Option<hetsched_common::protocol::GpuPool>,
    /// Issue 52: the OCI runtime (`--oci-runtime`, `--no-containers`).
    pub containers: container::ContainerOptions,
}

/// Timings, separate from [`SlaveConfig`] so tests can shorten them.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Heartbeat period (the masters' liveness timeout must be several of these).
    pub heartbeat: Duration,
    /// Time a stopped task gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// Deadline of one request to a master.
    pub call_timeout: Duration,
    /// First retry delay while no master answers.
    pub backoff_min: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(400),
            stop_grace: Duration::from_secs(2),
            call_timeout: Duration::from_secs(2),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// Engines and programs (S0): `slave --engines FILE [--no-profile | --reprofile]
/// --profile-budget D --call-timeout D`.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// The engines file, parsed (none: the CPU engine only).
    pub engines: engine::EnginesFile,
    /// Profile the engines at start unless the persisted table matches the engines file
    /// (`--no-profile` clears it).
    pub profile: bool,
    /// Profile even when the persisted table matches (`--reprofile`).
    pub reprofile: bool,
    /// Budget of that profile.
    pub profile_budget: Duration,
    /// Deadline of one plug-in call.
    pub call_timeout: Duration,
    /// A server plug-in unused this long is stopped (`--plugin-idle`).
    pub plugin_idle: Duration,
    /// Check plug-in results against the CPU kernel (`--check-results`).
    pub check_results: bool,
    /// S0.6 forwarding of calls to peers.
    pub forward: forward::ForwardOptions,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            engines: engine::EnginesFile::default(),
            profile: true,
            reprofile: false,
            profile_budget: Duration::from_secs(3),
            call_timeout: Duration::from_secs(60),
            plugin_idle: engine::plugin::DEFAULT_PLUGIN_IDLE,
            check_results: false,
            forward: forward::ForwardOptions::default(),
        }
    }
}

/// Errors of the slave.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
    /// Storage failed.
    #[error("storage: {0}")]
    Storage(String),
    /// I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The listener stopped serving.
    #[error("serving: {0}")]
    Serve(String),
}

impl From<store::StoreError> for Error {
    fn from(e: store::StoreError) -> Self {
        Error::Storage(e.to_string())
    }
}

/// Runs the slave until the process is stopped.
pub async fn run(cfg: SlaveConfig) -> Result<(), Error> {
    run_with(cfg, Tuning::default()).await
}

/// A random non-zero key: from the OS, else from the clock and pid (a collision only merges
/// two slaves' registrations, and the OS source is there on every supported host).
fn fresh_key() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    let from_os = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if from_os {
        return u64::from_ne_bytes(b);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    hetsched_common::rng::SplitMix64::new(nanos ^ ((std::process::id() as u64) << 32)).next_u64()
}

/// Runs the slave with explicit timings.
pub async fn run_with(cfg: SlaveConfig, tuning: Tuning) -> Result<(), Error> {
    run_with_engines(cfg, tuning, EngineOptions::default()).await
}

/// Runs the slave with explicit timings and engines.
pub async fn run_with_engines(
    cfg: SlaveConfig,
    tuning: Tuning,
    engine_opts: EngineOptions,
) -> Result<(), Error> {
    check_config(&cfg)?;
    let log_dir = cfg.data_dir.join("logs");
    std::fs::create_dir_all(&log_dir)?;
    let store =
        store::Store::open_waiting(&cfg.data_dir.join("db"), Duration::from_secs(5)).await?;
    let key = store.key_or_init(fresh_key)?;

    let listener = tokio::net::TcpListener::bind(&cfg.listen).await?;
    // The bound address, not the flag, so `--listen 127.0.0.1:0` advertises the real port.
    let addr = match &cfg.advertise {
        Some(a) => a.clone(),
        None => listener.local_addr()?.to_string(),
    };
    let (capacity, engines) = capacity_of(&cfg, &engine_opts)?;
    let cgroups = match &cfg.cgroup_root {
        Some(root) => {
            let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
            cgroup::Cgroups::detect(root, &own, &format!("{key:016x}"))
        }
        None => cgroup::Cgroups::none(),
    };
    if cfg.favordynmods && cgroups.mode() != cgroup::CgroupMode::None {
        cgroup_favor::ensure_at_start();
    }
    let mut cfg = cfg;
    let (probes, membw) = detect_probes(&mut cfg, &capacity, engine_opts.reprofile).await;
    let containers = {
        let (opts, dir) = (
            cfg.containers.clone(),
            container::containers_dir(&cfg.data_dir),
        );
        tokio::task::spawn_blocking(move || container::probe(&opts, &dir))
            .await
            .unwrap_or_else(|e| container::RuntimeProbe::Missing(format!("probe failed: {e}")))
    };
    let probe_files = attempt::ProbeFiles {
        gpu_util: probes.gpu.emulated(),
        membw: probes.membw.emulated(),
    };
    // `auto` announces nothing: the master splits the pools by demand.
    let gpu_pool = cfg.gpu_pool.filter(|_| !capacity.gpus.is_empty());
    let me = link::Identity {
        key,
        name: cfg.name.clone().unwrap_or_else(|| addr.clone()),
        addr: addr.clone(),
        capacity: capacity.clone(),
        partitions: cfg.partitions.clone(),
        labels: {
            let mut l = node_labels(&cgroups, &probes, membw.as_ref(), gpu_pool);
            l.extend(container_labels(&containers));
            l
        },
    };
    tracing::info!(
        listen = %cfg.listen, advertise = %addr, key = format_args!("{key:016x}"),
        node = ?store.node().ok().flatten(), cpus = cfg.cpus, mem_mib = cfg.mem_mib,
        gpus = capacity.gpus.len(), data_dir = %cfg.data_dir.display(),
        cgroup = cgroups.mode().as_str(),
        gpu_probe = if probes.gpu.emulated() { "EMULATED" } else { probes.gpu.name() },
        membw_probe = if probes.membw.emulated() { "EMULATED" } else { probes.membw.name() },
        membw_total_mbps = ?cfg.probes.contention.membw_total_mbps,
        gpu_pool = gpu_pool.map_or("auto", |p| p.name()),
        "slave starting"
    );

    let (announce_tx, announce_rx) = mpsc::unbounded_channel();
    tokio::spawn(announce::run(
        cfg.masters.clone(),
        store.clone(),
        tuning.call_timeout,
        announce_rx,
    ));
    let forwarder = engine_opts.forward.enabled.then(|| {
        let f = forward::Forwarder::new(
            engine_opts.forward,
            cfg.masters.clone(),
            store.clone(),
            tokio::runtime::Handle::current(),
        );
        tokio::spawn(f.clone().refresh());
        f
    });
    let programs = start_engines(
        &cfg,
        &me.name,
        engines,
        &engine_opts,
        forwarder,
        announce_tx.clone(),
    );
    reannounce_calls(&store, &log_dir, &announce_tx);
    let attempts = runtime_dir::prepare(&cfg.data_dir)?;
    if attempts.lost {
        tracing::warn!(dir = %attempts.path.display(), "the attempt directories of the last run are gone (machine restarted); held attempts that may have started are reported lost");
    }
    let launcher = attempt::Launcher {
        supervisor: cfg.supervisor.clone(),
        attempts_dir: attempts.path.clone(),
        log_dir: log_dir.clone(),
        cgroups,
        probe_files,
        containers: match &containers {
            container::RuntimeProbe::Ready(rt) => Some(Arc::new(container::Containers::new(
                container::containers_dir(&cfg.data_dir),
                rt.clone(),
                &cfg.containers,
            ))),
            container::RuntimeProbe::Missing(_) => None,
        },
    };
    let parts = Parts {
        store,
        lost: attempts.lost,
        capacity_milli: capacity.cpu_milli,
        launcher,
        probes,
        me,
        programs: programs.clone(),
        announce: announce_tx,
    };
    let agent_tx = spawn_agent_sampler_link(&cfg, &tuning, parts)?;

    wire::serve(
        listener,
        FrameLimits::default(),
        listener::handler(agent_tx, log_dir, attempts.path, programs),
    )
    .await
    .map_err(|e| Error::Serve(e.to_string()))
}

/// Refuses a configuration the slave cannot run with.
fn check_config(cfg: &SlaveConfig) -> Result<(), Error> {
    if cfg.masters.is_empty() {
        return Err(Error::Config("no master addresses".into()));
    }
    if cfg.cpus == 0 {
        return Err(Error::Config("cpus must be at least 1".into()));
    }
    if cfg.supervisor.is_empty() {
        return Err(Error::Config("no supervisor program".into()));
    }
    Ok(())
}

/// What the node offers: its cores, memory, GPUs (real through NVML, else emulated) and
/// engines.
fn capacity_of(
    cfg: &SlaveConfig,
    engine_opts: &EngineOptions,
) -> Result<(NodeResources, engine::EngineSet), Error> {
    let gpus = gpu::detect(
        cfg.gpus,
        &gpu::NvmlProbe,
        &gpu::EmulatedProbe {
            count: cfg.gpus,
            model: cfg
                .gpu_model
                .clone()
                .unwrap_or_else(|| gpu::EMULATED_MODEL.to_string()),
        },
    );
    let engines = engine::EngineSet::new(
        &engine_opts.engines,
        cfg.cpus,
        gpus.len() as u32,
        !gpus.is_empty() && gpus.iter().all(|g| g.emulated),
    )
    .map_err(|e| Error::Config(e.to_string()))?
    .with_plugin_idle(engine_opts.plugin_idle);
    let capacity = NodeResources {
        cpu_milli: u64::from(cfg.cpus) * 1000,
        mem_mib: cfg.mem_mib,
        gpus,
        engines: engines.other_counts(),
    };
    Ok((capacity, engines))
}

/// The S3 probes of this node, and its memory bandwidth (S3.6): `--membw-total`, else the
/// persisted measurement, else measured now (the triad of [`membw_total`]); written into
/// `cfg` for the contention rule. `fresh` (`--reprofile`) measures again.
async fn detect_probes(
    cfg: &mut SlaveConfig,
    capacity: &NodeResources,
    fresh: bool,
) -> (probe::Probes, Option<membw_total::MembwTotal>) {
    let real_gpus = capacity.gpus.iter().any(|g| !g.emulated);
    let probes = probe::Probes::detect(real_gpus, &cfg.probes.resctrl_root);
    let root = cfg.probes.resctrl_root.clone();
    let data_dir = cfg.data_dir.clone();
    let flag = cfg.probes.contention.membw_total_mbps;
    let total = tokio::task::spawn_blocking(move || {
        membw_total::resolve(&data_dir, flag, fresh, || {
            let m = membw_total::measure_node(&root, membw_total::TRIAD_TIME);
            tracing::info!(measured = ?m, "measured the node's memory bandwidth");
            m
        })
    })
    .await
    .ok()
    .flatten();
    cfg.probes.contention.membw_total_mbps = total.as_ref().map(|m| m.mbps);
    (probes, total)
}

/// The labels saying whether the node runs containers: its runtime's name, or why none.
fn container_labels(p: &container::RuntimeProbe) -> BTreeMap<String, String> {
    let (key, value) = match p {
        container::RuntimeProbe::Ready(rt) => (
            hetsched_common::protocol::CONTAINER_RUNTIME_LABEL,
            rt.name.clone(),
        ),
        container::RuntimeProbe::Missing(why) => {
            (hetsched_common::protocol::CONTAINER_WHY_LABEL, why.clone())
        }
    };
    [(key.to_string(), value)].into()
}

/// The labels the node registers with: its cgroup mode, its probes, its GPU pool (S3).
fn node_labels(
    cgroups: &cgroup::Cgroups,
    probes: &probe::Probes,
    membw: Option<&membw_total::MembwTotal>,
    gpu_pool: Option<hetsched_common::protocol::GpuPool>,
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [(
        hetsched_common::protocol::CGROUP_LABEL.to_string(),
        cgroups.mode().as_str().to_string(),
    )]
    .into();
    labels.insert(
        hetsched_common::protocol::PROBE_GPU_LABEL.to_string(),
        probes.gpu.name().to_string(),
    );
    labels.insert(
        hetsched_common::protocol::PROBE_MEMBW_LABEL.to_string(),
        probes.membw.name().to_string(),
    );
    if let Some(m) = membw {
        labels.insert(
            hetsched_common::protocol::MEMBW_TOTAL_LABEL.to_string(),
            format!("{:.0}", m.mbps),
        );
        labels.insert(
            hetsched_common::protocol::MEMBW_SOURCE_LABEL.to_string(),
            m.source.clone(),
        );
    }
    if let Some(pool) = gpu_pool {
        labels.insert(
            hetsched_common::protocol::GPU_POOL_LABEL.to_string(),
            pool.name().to_string(),
        );
    }
    labels
}

/// What the agent, the sampler and the link are built from.
struct Parts {
    store: store::Store,
    /// The attempt directories of the last run are gone (`runtime_dir`).
    lost: bool,
    capacity_milli: u64,
    launcher: attempt::Launcher,
    probes: probe::Probes,
    me: link::Identity,
    programs: Arc<program::ProgramRuntime>,
    announce: mpsc::UnboundedSender<announce::Announcement>,
}

/// Restores the agent and starts it, the probes' sampler and the link to the masters, wired
/// to each other; returns the agent's mailbox (the listener's way in).
fn spawn_agent_sampler_link(
    cfg: &SlaveConfig,
    tuning: &Tuning,
    p: Parts,
) -> Result<mpsc::UnboundedSender<agent::AgentMsg>, Error> {
    let (agent_tx, agent_rx) = mpsc::unbounded_channel();
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    // The leader's commands on the link answer as on the listener.
    let commands = listener::handler(
        agent_tx.clone(),
        p.launcher.log_dir.clone(),
        p.launcher.attempts_dir.clone(),
        p.programs.clone(),
    );
    let containers = p.launcher.containers.clone();
    let agent = agent::Agent::restore(
        p.store.clone(),
        p.lost,
        p.capacity_milli,
        p.launcher,
        tuning.stop_grace,
        agent_tx.clone(),
        report_tx.clone(),
    )?
    .with_programs(agent::ProgramHooks {
        runtime: p.programs.clone(),
        announce: p.announce,
    });
    tokio::spawn(agent.run(agent_rx));
    let (sample_tx, sample_rx) = mpsc::unbounded_channel();
    tokio::spawn(probe::run_sampler(
        p.probes,
        contention::Contention::new(cfg.probes.contention),
        cfg.probes.period,
        agent::SamplerLink {
            mailbox: agent_tx.clone(),
            reports: report_tx,
        },
        sample_tx,
    ));
    let link = link::Link::new(
        cfg.masters.clone(),
        p.me,
        link::LinkTiming {
            heartbeat: tuning.heartbeat,
            call_timeout: tuning.call_timeout,
            backoff_min: tuning.backoff_min,
            backoff_max: tuning.backoff_max,
        },
        p.store,
        agent_tx.clone(),
    )
    .with_samples(sample_rx)
    .with_engines(p.programs.engines.clone())
    .with_links(p.programs.forwarder.as_ref().map(|f| f.links()))
    .with_commands(commands)
    .with_containers(containers);
    tokio::spawn(link.run(report_rx));
    Ok(agent_tx)
}

/// Sets up the program runtime (S0.5): the persisted selection table when it was profiled
/// for these engines (same engines-file hash) or profiling is off; otherwise a profile in
/// the background (the slave registers at once) that replaces and persists it. Either way
/// the engines and the table are announced to the masters, the profiled one when ready.
fn start_engines(
    cfg: &SlaveConfig,
    node_name: &str,
    engines: engine::EngineSet,
    opts: &EngineOptions,
    forwarder: Option<Arc<forward::Forwarder>>,
    announce: mpsc::UnboundedSender<announce::Announcement>,
) -> Arc<program::ProgramRuntime> {
    let path = engine::profile::table_path(&cfg.data_dir);
    let engines_hash = engine::profile::engines_hash(&opts.engines);
    let persisted = engine::profile::load(&path);
    // A table profiled for these engines is reused; one from another engines file is stale.
    let current = persisted.is_some()
        && engine::profile::load_hash(&cfg.data_dir).as_deref() == Some(engines_hash.as_str());
    let fresh = opts.profile && (opts.reprofile || !current);
    let table = match (&persisted, fresh) {
        (Some(t), false) => t.clone(),
        _ => Default::default(),
    };
    let runtime = Arc::new(program::ProgramRuntime {
        engines: Arc::new(engines),
        table: Arc::new(std::sync::RwLock::new(table.clone())),
        node: node_name.to_string(),
        call_timeout: opts.call_timeout,
        forwarder,
        check_results: opts.check_results,
    });
    let decls = runtime.engines.decls();
    tracing::info!(engines = ?decls, "engines");
    if !fresh {
        if opts.profile {
            tracing::info!(path = %path.display(), "reusing the persisted selection table (engines unchanged)");
        }
        let _ = announce.send(announce::Announcement::Profile {
            engines: decls,
            table,
        });
        return runtime;
    }
    let data_dir = cfg.data_dir.clone();
    let rt = runtime.clone();
    let popts = engine::profile::ProfileOptions {
        budget: opts.profile_budget,
        call_timeout: opts.call_timeout,
        ..Default::default()
    };
    tokio::spawn(async move {
        let engines = rt.engines.clone();
        let started = std::time::Instant::now();
        let table =
            match tokio::task::spawn_blocking(move || engine::profile::profile(&engines, popts))
                .await
            {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "profiler failed");
                    return;
                }
            };
        tracing::info!(
            rows = table.rows.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "engines profiled"
        );
        if let Err(e) = engine::profile::save(&table, &path)
            .and_then(|()| engine::profile::save_hash(&data_dir, &engines_hash))
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot persist the selection table");
        }
        match rt.table.write() {
            Ok(mut t) => *t = table.clone(),
            Err(p) => *p.into_inner() = table.clone(),
        }
        let _ = announce.send(announce::Announcement::Profile {
            engines: decls,
            table,
        });
    });
    runtime
}

/// Call summaries of program tasks that ended before the last stop and whose results the
/// master has not acknowledged: sent again (recording one twice is harmless), since the
/// first announcement may have been lost with the process.
fn reannounce_calls(
    store: &store::Store,
    log_dir: &std::path::Path,
    announce: &mpsc::UnboundedSender<announce::Announcement>,
) {
    let Ok(loaded) = store.load() else {
        return;
    };
    for t in loaded.tasks {
        if !matches!(t.phase, store::StoredPhase::Finished { .. }) {
            continue;
        }
        let (task, attempt) = (t.assignment.task, t.assignment.attempt);
        if let Some(records) = program::read_calls(log_dir, task.0, attempt) {
            let _ = announce.send(announce::Announcement::Calls {
                task,
                attempt,
                summary: hetsched_common::program::CallSummary::of(&records),
            });
        }
    }
}
