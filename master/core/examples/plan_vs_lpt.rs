//! The S2 planner's own schedule against the uniform-LPT baseline and the lower bound, on
//! generated inputs of a few shapes, seeds 1..=N (BENCHMARKS.md, "Planner vs uniform_lpt"):
//!
//! ```text
//! cargo run --release -p hetsched-master-core --example plan_vs_lpt -- [SEEDS] [--per-seed]
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
//! Prints a markdown table: per shape, over the seeds where the planner's search found a
//! schedule of its own, the mean of planner / lower bound and of uniform_lpt / lower bound,
//! the mean and worst planner / uniform_lpt, and on how many seeds the planner's own makespan
//! is longer than uniform_lpt's (or equal, to 1e-9); then over all seeds the mean of what
//! `plan` returns (the best of planner and baselines) / lower bound. With `--per-seed`, also
//! one row per seed of the `course` shape.

use hetsched_common::rng::SplitMix64;
use hetsched_master_core::plan::makespan::{
    generate, plan, BatchJob, Block, GenParams, Instance, InstanceError,
};
use std::process::ExitCode;

/// The shapes measured, by name.
const SHAPES: [&str; 5] = ["course", "one-host", "10x8", "skewed", "one-holder"];

fn course(seed: u64) -> GenParams {
    GenParams {
        cores: (1, 4),
        replicas: 1,
        transfer_speed: 500.0,
        alpha: 0.05,
        ..GenParams::new(20, 4, seed)
    }
}

fn instance(shape: &str, seed: u64) -> Result<Instance, InstanceError> {
    match shape {
        "one-host" => generate(&GenParams {
            hosts: 1,
            cores: (2, 8),
            ..course(seed)
        }),
        "10x8" => generate(&GenParams {
            hosts: 10,
            cores: (8, 8),
            ..course(seed)
        }),
        "skewed" => {
            let base = generate(&course(seed))?;
            let mut rng = SplitMix64::new(seed ^ 0x5EED);
            let jobs = map_blocks(&base, |b| Block {
                size: if rng.below(10) == 0 {
                    b.size * 16.0
                } else {
                    b.size
                },
                replicas: b.replicas.clone(),
            });
            rebuild(&base, jobs)
        }
        "one-holder" => {
            let base = generate(&course(seed))?;
            let jobs = map_blocks(&base, |b| Block {
                size: b.size,
                replicas: vec![0],
            });
            rebuild(&base, jobs)
        }
        _ => generate(&course(seed)),
    }
}

fn map_blocks(inst: &Instance, mut f: impl FnMut(&Block) -> Block) -> Vec<BatchJob> {
    inst.jobs()
        .iter()
        .map(|j| BatchJob {
            speed: j.speed,
            blocks: j.blocks.iter().map(&mut f).collect(),
        })
        .collect()
}

fn rebuild(base: &Instance, jobs: Vec<BatchJob>) -> Result<Instance, InstanceError> {
    Instance::new(
        base.cores_per_host().to_vec(),
        base.transfer_speed(),
        base.alpha(),
        jobs,
    )
}

/// One seed's result.
struct Row {
    cores: usize,
    lower: f64,
    /// The planner's own makespan, if its search found a schedule.
    planner: Option<f64>,
    uniform_lpt: f64,
    /// What `plan` returns: the best of the planner and every baseline.
    chosen: f64,
}

fn measure(shape: &str, seed: u64) -> Result<Row, String> {
    let inst = instance(shape, seed).map_err(|e| format!("{shape} seed {seed}: {e}"))?;
    let p = plan(&inst).map_err(|e| format!("{shape} seed {seed}: {e}"))?;
    Ok(Row {
        cores: inst.total_cores(),
        lower: p.lower_bound,
        planner: p.planner_makespan,
        uniform_lpt: p.baselines.uniform_lpt,
        chosen: p.makespan,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let per_seed = args.iter().any(|a| a == "--per-seed");
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
        "| shape | cores | seeds with a planner schedule | planner / LB | uniform_lpt / LB \
         | planner / uniform_lpt (mean, worst) | planner loses / ties | chosen / LB (all seeds) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for shape in SHAPES {
        let rows = (1..=seeds)
            .map(|s| measure(shape, s))
            .collect::<Result<Vec<_>, _>>()?;
        let (lo_cores, hi_cores) = rows.iter().fold((usize::MAX, 0), |(lo, hi), r| {
            (lo.min(r.cores), hi.max(r.cores))
        });
        // (lower bound, planner, uniform_lpt) on the seeds where the planner has a schedule.
        let own: Vec<(f64, f64, f64)> = rows
            .iter()
            .filter_map(|r| r.planner.map(|p| (r.lower, p, r.uniform_lpt)))
            .collect();
        let n = own.len().max(1) as f64;
        let mean = |f: &dyn Fn(&(f64, f64, f64)) -> f64| own.iter().map(f).sum::<f64>() / n;
        let worst = own.iter().map(|&(_, p, u)| p / u).fold(0.0, f64::max);
        let loses = own
            .iter()
            .filter(|&&(_, p, u)| p > u * (1.0 + 1e-9))
            .count();
        let ties = own
            .iter()
            .filter(|&&(_, p, u)| (p - u).abs() <= u * 1e-9)
            .count();
        let chosen = rows.iter().map(|r| r.chosen / r.lower).sum::<f64>() / rows.len() as f64;
        println!(
            "| {shape} | {lo_cores}–{hi_cores} | {} / {} | {:.3} | {:.3} | {:.3}, {:.3} | {loses} / {ties} | {chosen:.3} |",
            own.len(),
            rows.len(),
            mean(&|&(lb, p, _)| p / lb),
            mean(&|&(lb, _, u)| u / lb),
            mean(&|&(_, p, u)| p / u),
            worst,
        );
    }
    if per_seed {
        println!();
        println!("| seed | cores | lower bound (s) | planner (s) | uniform_lpt (s) | planner / uniform_lpt |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        for seed in 1..=seeds {
            let r = measure("course", seed)?;
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
