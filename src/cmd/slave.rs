//! `hetsched slave`.

use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `hetsched slave`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on for the masters' commands.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// Master cluster addresses.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "HOST:PORT,..."
    )]
    pub masters: Vec<String>,
    /// Data directory (stable id, accepted tasks, unacknowledged results, task logs).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// CPU cores offered.
    #[arg(long)]
    pub cpus: u32,
    /// Memory offered, MiB.
    #[arg(long)]
    pub mem: u64,
    /// GPUs offered: real ones when detected, else this many emulated devices.
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Model name of emulated GPUs.
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// Human name (default: the advertise address).
    #[arg(long)]
    pub name: Option<String>,
    /// Partitions this node serves (S1): tasks run only on nodes of their job's partition.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "default",
        value_name = "NAME,..."
    )]
    pub partitions: Vec<String>,
    /// Address masters reach this slave at (default: --listen).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Optional HTTP address for /metrics and /healthz.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
}

/// Runs a slave until stopped.
pub fn run(a: Args) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("info");
    hetsched_common::parse_host_port(&a.listen)?;
    for m in &a.masters {
        hetsched_common::parse_host_port(m)?;
    }
    if let Some(adv) = &a.advertise {
        hetsched_common::parse_host_port(adv)?;
    }
    if a.cpus == 0 {
        anyhow::bail!("--cpus must be at least 1");
    }
    let http = a.http.clone();
    let cfg = hetsched_slave::SlaveConfig {
        listen: a.listen,
        advertise: a.advertise,
        masters: a.masters,
        data_dir: a.data_dir,
        cpus: a.cpus,
        mem_mib: a.mem,
        gpus: a.gpus,
        gpu_model: a.gpu_model,
        name: a.name,
        partitions: a.partitions,
    };
    let system = actix::System::new();
    system
        .block_on(async move {
            if let Some(addr) = http {
                let listener = hetsched_slave::http::HttpListener::bind(&addr).await?;
                tokio::spawn(async move {
                    if let Err(e) = listener.serve().await {
                        tracing::error!(error = %e, "http listener stopped");
                    }
                });
            }
            hetsched_slave::run(cfg).await
        })
        .context("slave stopped")
}
