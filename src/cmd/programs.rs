//! `calls`, `profile` and `profiles`: API programs' call records, the offline profiler and
//! the cluster's selection tables and task–engine relation (S0, docs/DESIGN.md §S0.1, §S0.5).

use super::client::{block_on, call, ReadFlags};
use super::exit;
use anyhow::bail;
use hetsched_common::program::{CallRecord, SelectionTable};
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::TaskId;
use std::path::PathBuf;
use std::time::Duration;

/// Parses `17` or `task-17`.
pub fn parse_task(s: &str) -> anyhow::Result<TaskId> {
    let digits = s.strip_prefix("task-").unwrap_or(s);
    digits
        .parse::<u64>()
        .map(TaskId)
        .map_err(|_| exit::bad_input(format!("{s:?} is not a task id (17 or task-17)")))
}

/// A duration with a unit: `250ms`, `30s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (expected e.g. 250ms, 30s, 5m)"))
}

/// Arguments of `hetsched calls`.
#[derive(clap::Args, Debug)]
pub struct CallsArgs {
    /// The program task (`17` or `task-17`).
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Print one JSON line: {"task", "attempt", "node", "calls": [...]}.
    #[arg(long)]
    pub json: bool,
}

/// `calls`.
pub fn calls(masters: &[String], a: CallsArgs) -> anyhow::Result<()> {
    let task = parse_task(&a.task)?;
    match block_on(call(masters, ClientRequest::Calls { task }, false))?? {
        ClientResponse::Calls {
            task,
            attempt,
            node,
            calls,
        } => {
            if a.json {
                return super::print_json(&serde_json::json!({
                    "task": task, "attempt": attempt, "node": node, "calls": calls,
                }));
            }
            println!(
                "{task} attempt {attempt} on {node}: {} call(s)",
                calls.len()
            );
            print_calls(&calls);
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

fn print_calls(calls: &[CallRecord]) {
    println!(
        "{:>5} {:<9} {:<18} {:<12} {:>12} {:>4}  DIGEST",
        "INDEX", "API", "ENGINE", "NODE", "DURATION_MS", "FWD"
    );
    for c in calls {
        let mut engine = c.engine.to_string();
        if c.emulated {
            engine.push_str(" EMULATED");
        }
        if let Some(k) = c.fallback_from {
            engine = format!("{engine} (<-{k})");
        }
        let check = c.check.map_or(String::new(), |k| {
            format!(
                "  check {} {:.1e} {}",
                match k.kind {
                    hetsched_common::program::CheckKind::Exact => "exact",
                    hetsched_common::program::CheckKind::Tolerance => "tolerance",
                },
                k.rel_err,
                if k.ok { "ok" } else { "FAILED" }
            )
        });
        println!(
            "{:>5} {:<9} {:<18} {:<12} {:>12.3} {:>4}  {}{check}",
            c.index,
            c.api.to_string(),
            engine,
            c.node,
            c.duration_ms,
            if c.forwarded { "yes" } else { "" },
            c.digest.get(..16).unwrap_or(&c.digest)
        );
    }
}

/// Arguments of `hetsched profile`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// The engines file (as `slave --engines`); none: the CPU engine only.
    #[arg(long, value_name = "FILE")]
    pub engines: Option<PathBuf>,
    /// CPU count of the modelled node (default: this machine's).
    #[arg(long)]
    pub cpus: Option<u32>,
    /// GPUs of the modelled node (real ones when detected, else emulated; default: 1 when
    /// the file declares a gpu engine).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Wall-clock budget of the whole profile.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub budget: Duration,
    /// Deadline of one plug-in call.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub call_timeout: Duration,
    /// Print the selection table as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// `profile`: times every API on each engine here and prints the selection table.
pub fn profile(a: ProfileArgs) -> anyhow::Result<()> {
    use hetsched_slave::engine::{profile, EngineSet, EnginesFile};
    let file = match &a.engines {
        Some(p) => EnginesFile::read(p).map_err(|e| exit::bad_input(e.to_string()))?,
        None => EnginesFile::default(),
    };
    let cpus = a
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let declares_gpu = file
        .engine
        .iter()
        .any(|e| e.kind == hetsched_common::EngineKind::Gpu);
    let wanted = a.gpus.unwrap_or(u32::from(declares_gpu));
    let gpus = hetsched_slave::gpu::detect(
        wanted,
        &hetsched_slave::gpu::NvmlProbe,
        &hetsched_slave::gpu::EmulatedProbe {
            count: wanted,
            model: hetsched_slave::gpu::EMULATED_MODEL.to_string(),
        },
    );
    let emulated = !gpus.is_empty() && gpus.iter().all(|g| g.emulated);
    let set = EngineSet::new(&file, cpus, gpus.len() as u32, emulated)
        .map_err(|e| exit::bad_input(e.to_string()))?;
    eprintln!(
        "profiling {} engine kind(s) within {:?}...",
        set.engines().len(),
        a.budget
    );
    let table = profile::profile(
        &set,
        profile::ProfileOptions {
            budget: a.budget,
            call_timeout: a.call_timeout,
            ..Default::default()
        },
    );
    if a.json {
        return super::print_json(&table);
    }
    print_table(&table);
    Ok(())
}

fn print_table(t: &SelectionTable) {
    println!(
        "{:<9} {:>6} {:>12}  RANKING (time per call)",
        "API", "BUCKET", "SCALE"
    );
    for r in &t.rows {
        let ranked: Vec<String> = r
            .ranked
            .iter()
            .map(|e| {
                format!(
                    "{}{} {:.3} ms",
                    e.engine,
                    if e.emulated { " EMULATED" } else { "" },
                    e.time_us as f64 / 1000.0
                )
            })
            .collect();
        println!(
            "{:<9} {:>6} {:>12}  {}",
            r.api.to_string(),
            format!("2^{}", r.bucket),
            format_bytes(1u64 << r.bucket.min(63)),
            ranked.join(" < ")
        );
    }
}

fn format_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Arguments of `hetsched profiles`.
#[derive(clap::Args, Debug)]
pub struct ProfilesArgs {
    #[command(flatten)]
    read: ReadFlags,
}

/// `profiles`: every slave's selection table and the task–engine relation.
pub fn profiles(masters: &[String], a: ProfilesArgs) -> anyhow::Result<()> {
    let a = a.read;
    let req = ClientRequest::Profiles { stale: a.stale() };
    match block_on(call(masters, req, a.local))?? {
        ClientResponse::Profiles(p) => {
            if a.json {
                return super::print_json(&p);
            }
            for n in &p.nodes {
                let engines: Vec<String> = n
                    .engines
                    .iter()
                    .map(|e| {
                        format!(
                            "{}x{}{}",
                            e.kind,
                            e.count,
                            if e.emulated { " EMULATED" } else { "" }
                        )
                    })
                    .collect();
                println!("{} ({}): engines {}", n.node, n.name, engines.join(", "));
                if n.table.is_empty() {
                    println!("  (not profiled: start the slave with --profile)");
                } else {
                    print_table(&n.table);
                }
                println!();
            }
            println!("task-engine relation (fastest first):");
            for r in &p.relations {
                let engines: Vec<String> = r
                    .engines
                    .iter()
                    .map(|e| format!("{} {:.3} ms", e.engine, e.total_us as f64 / 1000.0))
                    .collect();
                println!(
                    "  {}: {}",
                    r.kind,
                    if engines.is_empty() {
                        "(no profile covers it yet)".to_string()
                    } else {
                        engines.join(" < ")
                    }
                );
            }
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}
