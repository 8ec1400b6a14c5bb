//! `hetsched bench e2e`: throughput and latency end to end on a local cluster of real master
//! processes (fsync on) — submit → placed → running → completed.
//!
//! Two kinds of slave:
//! - real `hetsched slave` processes running the task command (`true` by default). "Running"
//!   is the moment the slave created the task's stdout file, which it does right before
//!   it spawns the process (its modification time, which the slave's log index records
//!   when the attempt ends: `true` writes nothing into it afterwards);
//! - `--in-process-slaves`: slaves inside the bench process that speak the real wire
//!   protocol (register, heartbeat with what they hold, accept assignments, report started
//!   and finished) but start no process: "running" is the moment an assignment arrives, and
//!   the task finishes at once.
//!
//! Log entries and fsyncs per task are deltas of the leader's counters (`status`
//! `raft.commit_index`, `raft.flushes`) over the run divided by the tasks.
//!
//! `inproc.rs` holds the in-process slaves, `workload.rs` the run (slaves up, submits at the
//! offered rate, completion), `measure.rs` the measurements and the report, `client.rs`
//! the requests to the leader.

pub(crate) mod client;
pub(crate) mod inproc;
mod measure;
mod workload;

use super::local::{LocalCluster, SlaveSpec};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `hetsched bench e2e`.
#[derive(clap::Args, Debug)]
pub struct E2eArgs {
    /// Masters in the cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub masters: u32,
    /// Slaves.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves: u32,
    /// Tasks in total.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub tasks: u64,
    /// Tasks per job.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub job_size: u32,
    /// Offered load in tasks per second (jobs are submitted at rate / job-size per second);
    /// default: as fast as the cluster takes them (4 submits in flight).
    #[arg(long, value_parser = positive)]
    pub rate: Option<f64>,
    /// Run the slaves inside the bench process: full protocol, no task processes.
    #[arg(long)]
    pub in_process_slaves: bool,
    /// CPUs each slave declares.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub slave_cpus: u32,
    /// CPUs each task asks for.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub task_cpus: f64,
    /// Task command for real slaves (split on spaces).
    #[arg(long, default_value = "true")]
    pub command: String,
    /// Give up after this long (e.g. `5m`).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Data directory (default: a fresh directory under the system's temp dir, removed after).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The masters' `--queue-depth` (S0.3 slave queues; 0: none). Comparing runs at 0 and
    /// at the default 4 shows what promotion through the leader adds to submit → running.
    #[arg(long, default_value_t = 4, value_name = "TASKS")]
    pub queue_depth: u32,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Run the cluster --insecure (plain TCP) instead of with certificates, to measure what
    /// TLS costs.
    #[arg(long)]
    pub insecure: bool,
}

/// A positive, finite number (a usage error otherwise: exit 2).
fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// Runs `bench e2e`.
pub fn run(a: E2eArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.command.split_whitespace().next().is_none() {
        bail!("--command must not be empty");
    }
    let (dir, remove) = match &a.data_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("hetsched-bench-e2e-{}", std::process::id())),
            true,
        ),
    };
    let real: Vec<SlaveSpec> = if a.in_process_slaves {
        Vec::new()
    } else {
        (0..a.slaves)
            .map(|_| SlaveSpec {
                cpus: a.slave_cpus,
                mem_mib: 1 << 20,
                gpus: 0,
                extra_args: Vec::new(),
            })
            .collect()
    };
    let spec = super::local::ClusterSpec {
        masters: a.masters,
        master_args: vec!["--queue-depth".to_string(), a.queue_depth.to_string()],
        slaves: real,
        insecure: a.insecure,
        ..Default::default()
    };
    let mut cluster = LocalCluster::launch(&dir, &spec)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(workload::bench(&cluster, &dir, &a));
    drop(rt);
    cluster.stop();
    if remove && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = result?;
    if a.json {
        super::print_json(&report)
    } else {
        println!(
            "{} tasks ({} per job, {} slaves): submitted {:.0}/s, placed {:.0}/s, completed {:.0}/s; submit→running p50 {:.1} ms, p99 {:.1} ms; {:.3} log entries and {:.3} fsyncs per task",
            report["tasks"],
            a.job_size,
            if a.in_process_slaves { format!("{} in-process", a.slaves) } else { format!("{} real", a.slaves) },
            report["submit_per_sec"].as_f64().unwrap_or(0.0),
            report["placed_per_sec"].as_f64().unwrap_or(0.0),
            report["completed_per_sec"].as_f64().unwrap_or(0.0),
            report["submit_to_running_p50_ms"].as_f64().unwrap_or(0.0),
            report["submit_to_running_p99_ms"].as_f64().unwrap_or(0.0),
            report["log_entries_per_task"].as_f64().unwrap_or(0.0),
            report["fsyncs_per_task"].as_f64().unwrap_or(0.0),
        );
        Ok(())
    }
}
