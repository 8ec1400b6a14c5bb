//! `hetsched plan-batch` — the S2 makespan planner on a file.
//!
//! All I/O and the clock live here; the planner (`master::plan::makespan`) is pure.

use anyhow::Context;
use hetsched_master_core::plan::makespan::{self, BatchPlan, Instance, Schedule};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

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
    /// Print the planner's own schedule, even where a baseline's is shorter (fails if no
    /// probe of its search was feasible).
    #[arg(long)]
    pub planner_only: bool,
}

/// The `--json` line. The documented keys first; `schedule` lists one entry per job in
/// input order. `makespan`, `chosen` and `schedule` describe the schedule printed: the
/// chosen one, or with `--planner-only` the planner's own.
#[derive(Serialize)]
struct JsonOut<'a> {
    makespan: f64,
    /// The planner's own makespan (null if no probe of its search was feasible).
    planner_makespan: Option<f64>,
    lower_bound: f64,
    baselines: JsonBaselines,
    chosen: &'static str,
    plan_ms: f64,
    /// Same as `planner_makespan` (the older key, kept for scripts that read it).
    planner: Option<f64>,
    probes: u32,
    jobs: usize,
    cores: usize,
    schedule: &'a [makespan::JobPlan],
}

#[derive(Serialize)]
struct JsonBaselines {
    round_robin: f64,
    weighted: f64,
    uniform_lpt: f64,
}

/// Runs the planner.
pub fn run(args: Args) -> anyhow::Result<()> {
    let path = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("reading {path}"))?;
    let inst = makespan::parse(&text).with_context(|| format!("{path}: not a valid input"))?;

    let started = Instant::now();
    let plan = makespan::plan(&inst)?;
    let plan_ms = started.elapsed().as_secs_f64() * 1e3;
    let shown = if args.planner_only {
        let (Some(schedule), Some(ms)) = (&plan.planner_schedule, plan.planner_makespan) else {
            anyhow::bail!("{path}: the planner found no schedule of its own (no probe of its search was feasible); drop --planner-only for the best baseline's");
        };
        Shown {
            schedule,
            makespan: ms,
            chosen: makespan::Chosen::Planner.as_str(),
        }
    } else {
        Shown {
            schedule: &plan.schedule,
            makespan: plan.makespan,
            chosen: plan.chosen.as_str(),
        }
    };

    // Writes go through one locked handle and return errors (a closed pipe ends the command
    // with an error, not a panic as `println!` would).
    let mut out = std::io::stdout().lock();
    if !args.json {
        print_schedule(&mut out, &inst, shown.schedule)?;
    }
    if args.compare || !args.json {
        print_summary(&mut out, &inst, &plan, &shown, plan_ms, args.compare)?;
    }
    if args.json {
        let line = JsonOut {
            makespan: shown.makespan,
            planner_makespan: plan.planner_makespan,
            lower_bound: plan.lower_bound,
            baselines: JsonBaselines {
                round_robin: plan.baselines.round_robin,
                weighted: plan.baselines.weighted,
                uniform_lpt: plan.baselines.uniform_lpt,
            },
            chosen: shown.chosen,
            plan_ms,
            planner: plan.planner_makespan,
            probes: plan.probes,
            jobs: inst.jobs().len(),
            cores: inst.total_cores(),
            schedule: &shown.schedule.jobs,
        };
        // One compact line, the last of stdout.
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// The schedule printed and its makespan: the chosen one, or the planner's own.
struct Shown<'a> {
    schedule: &'a Schedule,
    makespan: f64,
    chosen: &'static str,
}

/// One line per job: start, finish, and per core its blocks as `block@replica-host`.
fn print_schedule(
    out: &mut impl Write,
    inst: &Instance,
    schedule: &Schedule,
) -> anyhow::Result<()> {
    let eval = makespan::validate(inst, schedule)?;
    writeln!(
        out,
        "{:>5} {:>12} {:>12} {:>5}  blocks per core (block@host read)",
        "job", "start (s)", "finish (s)", "cores"
    )?;
    for (j, job) in schedule.jobs.iter().enumerate() {
        let cores: Vec<String> = job
            .cores
            .iter()
            .map(|w| {
                let blocks: Vec<String> = w
                    .blocks
                    .iter()
                    .map(|r| format!("{}@h{}", r.block, r.replica))
                    .collect();
                format!("h{}.c{}: {}", w.core.host, w.core.core, blocks.join(" "))
            })
            .collect();
        writeln!(
            out,
            "{:>5} {:>12.3} {:>12.3} {:>5}  {}",
            j,
            job.start,
            eval.finish[j],
            job.cores.len(),
            cores.join(" | ")
        )?;
    }
    Ok(())
}

fn print_summary(
    out: &mut impl Write,
    inst: &Instance,
    plan: &BatchPlan,
    shown: &Shown<'_>,
    plan_ms: f64,
    compare: bool,
) -> std::io::Result<()> {
    if compare {
        let ratio = |ms: f64| ms / plan.lower_bound;
        writeln!(
            out,
            "{:<12} {:>14} {:>14}",
            "schedule", "makespan (s)", "/ lower bound"
        )?;
        match plan.planner_makespan {
            Some(ms) => writeln!(out, "{:<12} {:>14.3} {:>14.3}", "planner", ms, ratio(ms))?,
            None => writeln!(out, "{:<12} {:>14} {:>14}", "planner", "-", "-")?,
        }
        let b = plan.baselines;
        writeln!(
            out,
            "{:<12} {:>14.3} {:>14.3}",
            "round_robin",
            b.round_robin,
            ratio(b.round_robin)
        )?;
        writeln!(
            out,
            "{:<12} {:>14.3} {:>14.3}",
            "weighted",
            b.weighted,
            ratio(b.weighted)
        )?;
        writeln!(
            out,
            "{:<12} {:>14.3} {:>14.3}",
            "uniform_lpt",
            b.uniform_lpt,
            ratio(b.uniform_lpt)
        )?;
        writeln!(
            out,
            "{:<12} {:>14.3} {:>14.3}",
            "lower bound", plan.lower_bound, 1.0
        )?;
    }
    // With --planner-only a baseline may have done better: say so.
    let best = if shown.chosen == plan.chosen.as_str() {
        String::new()
    } else {
        format!(
            "; the best schedule is {}'s, {:.3} s",
            plan.chosen.as_str(),
            plan.makespan
        )
    };
    writeln!(
        out,
        "makespan {:.3} s, chosen {} ({} jobs on {} cores, {} probes, planned in {:.1} ms){best}",
        shown.makespan,
        shown.chosen,
        inst.jobs().len(),
        inst.total_cores(),
        plan.probes,
        plan_ms
    )?;
    Ok(())
}
