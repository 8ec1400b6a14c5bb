//! `hetsched bench placement` — the S4 index against a linear scan (issue 4).

use std::path::PathBuf;

/// Arguments of `hetsched bench placement`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Nodes in the random cluster.
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    /// Tasks in the random stream.
    #[arg(long, default_value_t = 100_000)]
    pub tasks: usize,
    /// Selection policy.
    #[arg(long, default_value = "least-fit")]
    pub policy: String,
    /// Alibaba node list (trace mode; needs --trace-pods).
    #[arg(long, requires = "trace_pods")]
    pub trace_nodes: Option<PathBuf>,
    /// Alibaba pod list (trace mode; needs --trace-nodes).
    #[arg(long, requires = "trace_nodes")]
    pub trace_pods: Option<PathBuf>,
    /// Seed of the random cluster and stream.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs the benchmark.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("bench placement is not implemented yet")
}
