//! `hetsched plan-batch` — the S2 makespan planner on a file (issue 5).

use std::path::PathBuf;

/// Arguments of `hetsched plan-batch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input: our JSON (with replicas) or the course's plain-text format.
    pub file: PathBuf,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Show the baselines and the lower bound beside the plan.
    #[arg(long)]
    pub compare: bool,
}

/// Runs the planner.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("plan-batch is not implemented yet")
}
