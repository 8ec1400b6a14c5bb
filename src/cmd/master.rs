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
    /// Optional HTTP address for /metrics and the JSON API.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Snapshot the state and compact the Raft log every this many applied entries.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_entries: u64,
    /// Node selection for tasks that ask for GPUs: frag (fragmentation-aware packing),
    /// least-fit (spread), best-fit (pack), first-fit, next-fit, random.
    #[arg(long, default_value = "frag")]
    pub policy: hetsched_master::sched::index::PolicyKind,
    /// Node selection for tasks that ask no GPU (same names). Under --policy frag they go
    /// to CPU-only nodes first (chosen by this policy), then where they strand fewest GPUs.
    #[arg(long, default_value = "least-fit")]
    pub cpu_policy: hetsched_master::sched::index::PolicyKind,
    /// Silence after which the leader declares a slave down, ms.
    #[arg(long, default_value_t = 5000)]
    pub node_timeout_ms: u64,
}

/// Runs a master until stopped.
pub fn run(a: Args) -> anyhow::Result<()> {
    use anyhow::Context;
    use hetsched_master::server::{self, DutyTiming, MasterConfig};
    hetsched_common::telemetry::init_logging("info");
    if a.id == 0 {
        anyhow::bail!("--id must be at least 1 (Raft reserves 0)");
    }
    hetsched_common::parse_host_port(&a.listen)?;
    let peers = server::parse_peers(&a.peers)?;
    std::fs::create_dir_all(&a.data_dir)
        .with_context(|| format!("cannot create data dir {}", a.data_dir.display()))?;
    let cfg = MasterConfig {
        id: a.id,
        listen: a.listen,
        peers,
        data_dir: a.data_dir,
        http: a.http,
        join: a.join,
        snapshot_entries: a.snapshot_entries,
        policy: a.policy,
        cpu_policy: a.cpu_policy,
        timing: DutyTiming {
            node_timeout: std::time::Duration::from_millis(a.node_timeout_ms.max(500)),
            ..DutyTiming::default()
        },
    };
    let system = actix::System::new();
    system.block_on(server::run(cfg)).context("master stopped")
}
