//! Writes a random S2 planning instance (our JSON format) to stdout, for the planner
//! benchmark in docs/bench-planner.md:
//!
//! ```text
//! cargo run --release -p hetsched-master-core --example plan_gen -- JOBS HOSTS [SEED]
//! ```
//!
//! The shape is `GenParams::new`: 2–8 cores per host, 4–40 blocks of 32–256 MB per job with
//! 3 replicas, job speeds 20–80 MB/s, 125 MB/s between hosts, α = 0.05.

use hetsched_planner::{generate, to_json, GenParams};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: Option<u64>| -> Result<u64, String> {
        match args.get(i) {
            Some(s) => s.parse().map_err(|_| format!("not a whole number: {s:?}")),
            None => default.ok_or_else(|| "usage: plan_gen JOBS HOSTS [SEED]".to_string()),
        }
    };
    let parsed = (|| Ok::<_, String>((num(0, None)?, num(1, None)?, num(2, Some(1))?)))();
    let (jobs, hosts, seed) = match parsed {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match generate(&GenParams::new(jobs as usize, hosts as usize, seed)) {
        Ok(inst) => {
            println!("{}", to_json(&inst));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
