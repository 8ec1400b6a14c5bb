//! The master's configuration (what `hetsched master` parses from its flags), the errors
//! of starting one, and the parsing of its `--peers`.

use hetsched_master_core::duties::DutiesConfig;
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::preemption::PreemptionConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Errors of the master process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
    /// Consensus failed to start.
    #[error(transparent)]
    Consensus(#[from] hetsched_consensus::Error),
    /// I/O (binding the port).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Metrics endpoint.
    #[error("metrics: {0}")]
    Metrics(String),
}

/// Configuration of one master.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// Id (≥ 1).
    pub id: u64,
    /// Cluster address to listen on.
    pub listen: String,
    /// Initial members and their cluster addresses (this one included).
    pub peers: BTreeMap<u64, String>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// HTTP address for /metrics.
    pub http: Option<String>,
    /// Admin address (bench proposals, fault injection): off when `None` (docs/CONTRACT.md).
    pub admin: Option<String>,
    /// Leader-duty timing and retention.
    pub duties: DutiesConfig,
    /// Start empty and wait to be added to an existing cluster (`peers` holds only this
    /// master then).
    pub join: bool,
    /// Snapshot and compact the log every this many applied entries.
    pub snapshot_entries: u64,
    /// Node selection policy of the scheduler (for tasks that ask for GPUs).
    pub policy: PolicyKind,
    /// Limits of the S1 preemption stage.
    pub preemption: PreemptionConfig,
    /// Node selection policy for tasks that ask no GPU.
    pub cpu_policy: PolicyKind,
    /// Admission back-pressure: pending cap and per-user submit rate.
    pub admission: crate::backpressure::AdmissionConfig,
    /// S3 queue order and reserved CPU pools.
    pub queueing: hetsched_master_core::sched::multiqueue::QueueingConfig,
    /// S0.1–2 engine choice bounds (`--engine-efficiency-bound`, `--load-bound`).
    pub engine_choice: hetsched_master_core::sched::engine_choice::EngineChoiceConfig,
    /// S0.3 slave queue depth beyond free resources (`--queue-depth`; 0: off).
    pub queue_depth: u32,
    /// S4.7 parallel selection (`--placement-groups`, `--placement-threads`).
    pub parallel: hetsched_master_core::sched::ParallelConfig,
    /// Issue 53: accounting detail is kept this long, ms (`--accounting-retention`), then
    /// folded into daily totals.
    pub accounting_retention_ms: u64,
    /// Issue 53: fair share's half-life, ms (`--fairshare-half-life`; `None`: off).
    pub fairshare_half_life_ms: Option<u64>,
}

/// Parses `ID=HOST:PORT,...`.
pub fn parse_peers(items: &[String]) -> Result<BTreeMap<u64, String>, Error> {
    let mut peers = BTreeMap::new();
    for item in items {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("peer {item:?} is not ID=HOST:PORT")))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| Error::Config(format!("peer id {id:?} is not a number")))?;
        if id == 0 {
            return Err(Error::Config(
                "peer ids start at 1 (0 means none in Raft)".into(),
            ));
        }
        hetsched_common::parse_host_port(addr.trim()).map_err(|e| Error::Config(e.to_string()))?;
        if peers.insert(id, addr.trim().to_string()).is_some() {
            return Err(Error::Config(format!("peer id {id} given twice")));
        }
    }
    Ok(peers)
}
