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
    /// Every initial master, this one included: ID=HOST:PORT,... Only bootstraps an empty data dir.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "ID=HOST:PORT,..."
    )]
    pub peers: Vec<String>,
    /// Data directory (Raft log and snapshots).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Optional HTTP address for /metrics and the JSON API.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
}

/// Runs a master until stopped.
pub fn run(_a: Args) -> anyhow::Result<()> {
    anyhow::bail!("master is not implemented yet")
}
