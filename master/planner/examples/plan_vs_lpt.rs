//! The S2 planner's own schedule against the uniform-LPT baseline and the lower bound, on
//! generated inputs of a few shapes, seeds 1..=N (BENCHMARKS.md#planner-vs-uniform-lpt):
//!
//! ```text
//! cargo run --release -p hetsched-master-core --example plan_vs_lpt -- [SEEDS] [--per-seed]
//! cargo run --release -p hetsched-master-core --example plan_vs_lpt -- --scale
//! ```
//!
//! Shapes, 20 jobs each, blocks as `GenParams::new` (4–40 per job, 32–256 MB, job speeds
//! 20–80 MB/s), α = 0.05, s_t = 500 MB/s, one replica per block on a random host unless
//! said otherwise:
//! * `course`: 4 hosts of 1–4 cores (the course's second task);
//! * `one-host`: 1 host of 2–8 cores;
//! * `10x8`: 10 hosts of 8 cores;
//! * `skewed`: as `course`, but one block in ten is 16 times larger (512–4096 MB);
//! * `one-holder`: as `course`, but every block's only replica is on host 0.
//!
//! (`Shape` in the library.) Prints a markdown table: per shape, the mean and worst of
//! planner / lower bound, uniform_lpt / lower bound and planner / uniform_lpt, on how many
//! seeds the planner's own makespan is longer than uniform_lpt's (or equal, to 1e-9), and
//! the wall time of `plan` (planner and baselines together), mean and max. With
//! `--per-seed`, also one row per seed of the `course` shape. `--scale` plans large
//! generated inputs instead and prints their plan times.

use hetsched_planner::{generate, plan, GenParams, Shape};
use std::process::ExitCode;
use std::time::Instant;

/// One seed's result.
struct Row {
    cores: usize,
    lower: f64,
    /// The planner's own makespan, if its search found a schedule.
    planner: Option<f64>,
    uniform_lpt: f64,
    /// Wall time of `plan` (planner and baselines), seconds.
    secs: f64,
}

fn measure(shape: Shape, seed: u64) -> Result<Row, String> {
    let name = shape.name();
    let inst = shape
        .instance(seed)
        .map_err(|e| format!("{name} seed {seed}: {e}"))?;
    let t0 = Instant::now();
    let p = plan(&inst).map_err(|e| format!("{name} seed {seed}: {e}"))?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(Row {
        cores: inst.total_cores(),
        lower: p.lower_bound,
        planner: p.planner_makespan,
        uniform_lpt: p.baselines.uniform_lpt,
        secs,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let per_seed = args.iter().any(|a| a == "--per-seed");
    if args.iter().any(|a| a == "--scale") {
        return match scale() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let seeds = match args.iter().find(|a| !a.starts_with("--")) {
        None => 20,
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("usage: plan_vs_lpt [SEEDS] [--per-seed]");
                return ExitCode::from(2);
            }
        },
    };
    match run(seeds, per_seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(seeds: u64, per_seed: bool) -> Result<(), String> {
    println!(
        "| shape | cores | planner / LB (mean, worst) | uniform_lpt / LB (mean, worst) \
         | planner / uniform_lpt (mean, worst) | planner loses / ties | plan time (mean, max) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for shape in Shape::ALL {
        let rows = (1..=seeds)
            .map(|s| measure(shape, s))
            .collect::<Result<Vec<_>, _>>()?;
        let (lo_cores, hi_cores) = rows.iter().fold((usize::MAX, 0), |(lo, hi), r| {
            (lo.min(r.cores), hi.max(r.cores))
        });
        // The planner always has a schedule of its own; a missing one would be a bug.
        let own: Vec<(f64, f64, f64)> = rows
            .iter()
            .map(|r| {
                r.planner
                    .map(|p| (r.lower, p, r.uniform_lpt))
                    .ok_or_else(|| format!("{}: the planner has no schedule", shape.name()))
            })
            .collect::<Result<_, _>>()?;
        let n = own.len() as f64;
        let stat = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
            let mean = own.iter().map(f).sum::<f64>() / n;
            let worst = own.iter().map(f).fold(0.0, f64::max);
            format!("{mean:.3}, {worst:.3}")
        };
        let loses = own
            .iter()
            .filter(|&&(_, p, u)| p > u * (1.0 + 1e-9))
            .count();
        let ties = own
            .iter()
            .filter(|&&(_, p, u)| (p - u).abs() <= u * 1e-9)
            .count();
        let mean_ms = rows.iter().map(|r| r.secs).sum::<f64>() / n * 1e3;
        let max_ms = rows.iter().map(|r| r.secs).fold(0.0, f64::max) * 1e3;
        println!(
            "| {} | {lo_cores}–{hi_cores} | {} | {} | {} | {loses} / {ties} | {mean_ms:.0} ms, {max_ms:.0} ms |",
            shape.name(),
            stat(&|&(lb, p, _)| p / lb),
            stat(&|&(lb, _, u)| u / lb),
            stat(&|&(_, p, u)| p / u),
        );
    }
    if per_seed {
        println!();
        println!("| seed | cores | lower bound (s) | planner (s) | uniform_lpt (s) | planner / uniform_lpt |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        for seed in 1..=seeds {
            let r = measure(Shape::Course, seed)?;
            let (p, ratio) = match r.planner {
                Some(p) => (format!("{p:.2}"), format!("{:.4}", p / r.uniform_lpt)),
                None => ("-".into(), "-".into()),
            };
            println!(
                "| {seed} | {} | {:.2} | {p} | {:.2} | {ratio} |",
                r.cores, r.lower, r.uniform_lpt
            );
        }
    }
    Ok(())
}

/// `--scale`: plan time and quality on large generated inputs (`plan_gen JOBS HOSTS 7`'s
/// instances: `GenParams::new`, seed 7), to show the planner stays bounded in time.
fn scale() -> Result<(), String> {
    println!("| jobs | hosts | cores | planner / LB | uniform_lpt / LB | plan time |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for (jobs, hosts) in [(200, 30), (1000, 100), (3000, 300), (10000, 1000)] {
        let inst = generate(&GenParams::new(jobs, hosts, 7)).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let p = plan(&inst).map_err(|e| e.to_string())?;
        let secs = t0.elapsed().as_secs_f64();
        let own = p.planner_makespan.ok_or("the planner has no schedule")?;
        println!(
            "| {jobs} | {hosts} | {} | {:.3} | {:.3} | {:.0} ms |",
            inst.total_cores(),
            own / p.lower_bound,
            p.baselines.uniform_lpt / p.lower_bound,
            secs * 1e3
        );
    }
    Ok(())
}
