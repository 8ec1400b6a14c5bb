//! hetsched slave agent: registers with the masters, heartbeats, runs assigned tasks as child
//! processes, and keeps every result the master has not acknowledged.
//!
//! Modules:
//! - [`queue`] — the local queue (pure bookkeeping, unit-tested);
//! - [`store`] — sled persistence: identity, held tasks, acknowledged attempts;
//! - [`exec`] — child processes in their own process groups; the exit-code convention;
//! - [`agent`] — the task that owns queue and store and does their I/O;
//! - [`link`] — registration, heartbeats, report delivery, leader following;
//! - [`gpu`] — GPU probes (NVML, emulated).
//!
//! # Restart semantics (at-least-once)
//! Everything accepted is in sled before the master hears `Accepted`; every result is in sled
//! before it is reported and stays there until the master answers `Ack`. On start the slave
//! reloads it all: queued tasks run; unacknowledged results are reported again; a task that was
//! running when the slave died has its leftover process group killed (found by the stored pgid
//! and checked through `/proc` to still carry that task's `HETSCHED_TASK_ID`) and is **run again
//! under the same attempt**. A task may therefore run more than once (at-least-once); tasks
//! should be idempotent, and their log files are appended to, not truncated.

#![deny(missing_docs)]

pub mod agent;
pub mod exec;
pub mod gpu;
pub mod http;
pub mod link;
pub mod logs;
pub mod queue;
pub mod store;

use hetsched_common::protocol::{ErrorKind, ErrorReply, Message, SlaveCommand};
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_common::NodeResources;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

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
    if cfg.masters.is_empty() {
        return Err(Error::Config("no master addresses".into()));
    }
    if cfg.cpus == 0 {
        return Err(Error::Config("cpus must be at least 1".into()));
    }
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
    let capacity = NodeResources {
        cpu_milli: u64::from(cfg.cpus) * 1000,
        mem_mib: cfg.mem_mib,
        gpus,
        engines: Default::default(),
    };
    let me = link::Identity {
        key,
        name: cfg.name.clone().unwrap_or_else(|| addr.clone()),
        addr: addr.clone(),
        capacity: capacity.clone(),
        partitions: cfg.partitions.clone(),
    };
    tracing::info!(
        listen = %cfg.listen, advertise = %addr, key = format_args!("{key:016x}"),
        node = ?store.node().ok().flatten(), cpus = cfg.cpus, mem_mib = cfg.mem_mib,
        gpus = capacity.gpus.len(), data_dir = %cfg.data_dir.display(),
        "slave starting"
    );

    let (agent_tx, agent_rx) = mpsc::unbounded_channel();
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let agent = agent::Agent::restore(
        store.clone(),
        capacity.cpu_milli,
        log_dir.clone(),
        tuning.stop_grace,
        agent_tx.clone(),
        report_tx,
    )?;
    tokio::spawn(agent.run(agent_rx));
    let link = link::Link::new(
        cfg.masters.clone(),
        me,
        link::LinkTiming {
            heartbeat: tuning.heartbeat,
            call_timeout: tuning.call_timeout,
            backoff_min: tuning.backoff_min,
            backoff_max: tuning.backoff_max,
        },
        store,
        agent_tx.clone(),
    );
    tokio::spawn(link.run(report_rx));

    wire::serve(listener, FrameLimits::default(), handler(agent_tx, log_dir))
        .await
        .map_err(|e| Error::Serve(e.to_string()))
}

/// The listener's handler: masters' commands go to the agent; anything else is refused.
fn handler(agent: mpsc::UnboundedSender<agent::AgentMsg>, log_dir: PathBuf) -> Handler {
    Arc::new(move |msg, peer| {
        let agent = agent.clone();
        let log_dir = log_dir.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let m = match msg {
                // Reading output files needs nothing of the agent's state.
                Message::ToSlave(SlaveCommand::ReadLog {
                    task,
                    attempt,
                    stderr,
                    offset,
                    max_bytes,
                }) => {
                    let read = tokio::task::spawn_blocking(move || {
                        logs::read_log(&log_dir, task, attempt, stderr, offset, max_bytes)
                    });
                    return Some(read.await.unwrap_or_else(|e| {
                        Message::Error(ErrorReply::new(
                            ErrorKind::Internal,
                            format!("log reader failed: {e}"),
                        ))
                    }));
                }
                Message::ToSlave(SlaveCommand::Assign(assignment)) => agent::AgentMsg::Assign {
                    assignment,
                    reply: tx,
                },
                // The grace period a preemption asks for is honoured by the executor's
                // stop path; the slave's own `stop_grace` applies otherwise.
                Message::ToSlave(SlaveCommand::StopTask { task, attempt, .. }) => {
                    agent::AgentMsg::Stop {
                        task,
                        attempt,
                        reply: tx,
                    }
                }
                other => {
                    tracing::debug!(%peer, message = ?other, "unsupported request");
                    return Some(Message::Error(ErrorReply::new(
                        ErrorKind::Unsupported,
                        "a slave serves only Assign, StopTask and ReadLog",
                    )));
                }
            };
            let gone = || {
                Message::Error(ErrorReply::new(
                    ErrorKind::Unavailable,
                    "slave is shutting down",
                ))
            };
            if agent.send(m).is_err() {
                return Some(gone());
            }
            Some(rx.await.unwrap_or_else(|_| gone()))
        })
    })
}
