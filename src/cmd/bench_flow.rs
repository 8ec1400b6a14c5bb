//! `hetsched bench flow`: what the dependency gate costs a fan-out/fan-in flow (issue 51,
//! BENCHMARKS.md "Flows"). On one local cluster of real masters (fsync on, secured) and
//! real slaves, two flows of the same 1 + `--width` + 1 steps (each one task running
//! `--command`, `true` by default) are submitted in one `SubmitFlow` entry each:
//!
//! - **with dependencies**: `first` → `width` steps each `needs = ["first"]` → `last`
//!   `needs` every one of them (fan-out, fan-in);
//! - **without**: the same steps, no `needs` (the baseline: the same jobs, the same entry).
//!
//! The figure of each is the time from the flow's commit to the start of its last step's
//! task, both leader clocks (`explain`'s `submitted_ms` and `started_ms`); the last step
//! runs `sleep 2` in both flows so that it is seen running. The baseline queues the last
//! step behind the others (task ids are queue order), so both measure when the cluster got
//! through the width; the flow adds only what waiting for the ends costs.

use super::bench_e2e::client::BenchClient;
use super::local::{ClusterSpec, LocalCluster, SlaveSpec};
use anyhow::{bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use hetsched_common::{ClientRequestId, FlowSpec, FlowStep, JobSpec, ResourceRequest};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `hetsched bench flow`.
#[derive(clap::Args, Debug)]
pub struct FlowArgs {
    /// Steps between the first and the last.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub width: u32,
    /// Masters.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub masters: u32,
    /// Real slaves.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub slaves: u32,
    /// CPUs each slave declares (each task asks for one).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub slave_cpus: u32,
    /// The command of every step but the last (split on spaces).
    #[arg(long, default_value = "true")]
    pub command: String,
    /// Runs of each flow, alternating (the report gives each run and the medians).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Give up on one flow after this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Run the cluster --insecure (plain TCP).
    #[arg(long)]
    pub insecure: bool,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs `bench flow`.
pub fn run(a: FlowArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.command.split_whitespace().next().is_none() {
        bail!("--command must not be empty");
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hetsched-bench-flow-{}", std::process::id()));
    let slave = SlaveSpec {
        cpus: a.slave_cpus,
        mem_mib: 1 << 20,
        gpus: 0,
        extra_args: Vec::new(),
    };
    let spec = ClusterSpec {
        masters: a.masters,
        slaves: vec![slave; a.slaves as usize],
        insecure: a.insecure,
        ..Default::default()
    };
    let mut cluster = LocalCluster::launch(&dir, &spec)?;
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(bench(&cluster, &a)));
    cluster.stop();
    let report = result?; // a failed run keeps its directory, logs and all
    let _ = std::fs::remove_dir_all(&dir);
    if a.json {
        return super::print_json(&report);
    }
    let ms = |k: &str| report[k].as_f64().unwrap_or(0.0);
    println!(
        "1 → {} → 1 steps, {} real slaves × {} CPUs: last step started {:.0} ms after the \
         flow's commit with dependencies, {:.0} ms without (medians of {}); ratio {:.3}",
        a.width,
        a.slaves,
        a.slave_cpus,
        ms("with_dependencies_ms"),
        ms("without_dependencies_ms"),
        a.rounds,
        ms("ratio"),
    );
    Ok(())
}

/// The flow: `first`, `width` middle steps, `last`; with `needs` when `dependencies`.
fn flow(a: &FlowArgs, dependencies: bool) -> FlowSpec {
    let command: Vec<String> = a.command.split_whitespace().map(String::from).collect();
    let job = |name: &str, command: Vec<String>| JobSpec {
        name: name.to_string(),
        partition: "default".into(),
        count: 1,
        command,
        resources: ResourceRequest {
            cpu_milli: 1000,
            mem_mib: 64,
            ..ResourceRequest::default()
        },
        ..JobSpec::default()
    };
    let mut steps = vec![FlowStep::new("first", job("first", command.clone()))];
    let middle: Vec<String> = (0..a.width).map(|i| format!("step-{i}")).collect();
    for name in &middle {
        let mut s = FlowStep::new(name, job(name, command.clone()));
        if dependencies {
            s.needs = vec!["first".into()];
        }
        steps.push(s);
    }
    let sleep = vec!["sleep".to_string(), "2".to_string()];
    let mut last = FlowStep::new("last", job("last", sleep));
    if dependencies {
        last.needs = middle;
    }
    steps.push(last);
    FlowSpec { steps }
}

async fn ask(client: &mut BenchClient, req: ClientRequest) -> anyhow::Result<ClientResponse> {
    match client
        .call(Message::Client(req), Duration::from_secs(60))
        .await?
    {
        Message::ClientReply(r) => Ok(r),
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// Submits one flow and waits for its last step's task to start; the time from the flow's
/// commit to that start, ms (leader clock).
async fn one(client: &mut BenchClient, a: &FlowArgs, deps: bool, seq: u64) -> anyhow::Result<u64> {
    let request = ClientRequestId(((std::process::id() as u64) << 32) | seq);
    let submitted = match ask(
        client,
        ClientRequest::SubmitFlow {
            request,
            flow: flow(a, deps),
        },
    )
    .await?
    {
        ClientResponse::FlowSubmitted(f) => f,
        other => bail!("the flow was refused: {other:?}"),
    };
    let last = submitted.jobs["last"];
    let task = match ask(
        client,
        ClientRequest::Tasks {
            stale: false,
            job: Some(last),
            filter: Default::default(),
        },
    )
    .await?
    {
        ClientResponse::Tasks(t) => t
            .first()
            .map(|t| t.id)
            .context("the last step has no task")?,
        other => bail!("unexpected answer: {other:?}"),
    };
    let started = Instant::now();
    loop {
        if let ClientResponse::Explain(e) = ask(client, ClientRequest::Explain { task }).await? {
            if let (Some(s), Some(sub)) = (e.started_ms, e.submitted_ms) {
                return Ok(s.saturating_sub(sub));
            }
        }
        if started.elapsed() > a.timeout {
            bail!("{task} did not start within {:?}", a.timeout);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every task of the cluster has ended and every slave is up (so that runs do
/// not overlap).
async fn drained(client: &mut BenchClient, a: &FlowArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let status = client.status().await?;
        let open: u64 = ["pending", "assigned", "running"]
            .iter()
            .map(|s| status.tasks.get(*s).copied().unwrap_or(0))
            .sum();
        if open == 0 && status.nodes.up >= u64::from(a.slaves) {
            return Ok(());
        }
        if started.elapsed() > a.timeout {
            bail!("the cluster did not settle within {:?}", a.timeout);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn median(v: &[u64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2] as f64,
        n => (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0,
    }
}

async fn bench(cluster: &LocalCluster, a: &FlowArgs) -> anyhow::Result<serde_json::Value> {
    let mut client = BenchClient::new(cluster.master_addrs.clone());
    drained(&mut client, a).await?;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..u64::from(a.rounds) {
        // Alternate which goes first, so that neither always meets a warmer cluster.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for deps in order {
            let ms = one(&mut client, a, deps, round * 2 + u64::from(deps)).await?;
            eprintln!(
                "bench flow: round {round}, {}: {ms} ms",
                if deps { "with dependencies" } else { "without" }
            );
            if deps {
                with.push(ms)
            } else {
                without.push(ms)
            }
            drained(&mut client, a).await?;
        }
    }
    let (w, wo) = (median(&with), median(&without));
    Ok(serde_json::json!({
        "width": a.width,
        "jobs": a.width + 2,
        "masters": a.masters,
        "slaves": a.slaves,
        "slave_cpus": a.slave_cpus,
        "with_dependencies_ms": w,
        "without_dependencies_ms": wo,
        "with_runs_ms": with,
        "without_runs_ms": without,
        "ratio": if wo > 0.0 { w / wo } else { 0.0 },
    }))
}
