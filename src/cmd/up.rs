//! `hetsched up` — a local cluster as child processes plus a demo workload.

use std::path::PathBuf;

/// Arguments of `hetsched up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of masters.
    #[arg(long, default_value_t = 3)]
    pub masters: u32,
    /// Number of slaves.
    #[arg(long, default_value_t = 2)]
    pub slaves: u32,
    /// Data directory (default: a fresh temporary directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the cluster running without the demo workload (Ctrl-C stops it).
    #[arg(long)]
    pub no_demo: bool,
}

/// Runs the local cluster.
pub fn run(_a: Args) -> anyhow::Result<()> {
    anyhow::bail!("up is not implemented yet")
}
