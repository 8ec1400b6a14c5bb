//! The S2 planner's own schedule against the uniform-LPT baseline on every generated shape
//! (docs/DESIGN.md §S2): on each input the planner's makespan is at most uniform-LPT's, and
//! every schedule it emits — its own and the chosen one — passes the validator at the
//! makespan reported for it.
//!
//! Seeds: `PLANNER_SEED` (default 1; `clock` for one from the clock) picks the first seed; `PLANNER_SEEDS`
//! (default 6) how many consecutive seeds each shape gets. Each failure names its shape and
//! seed, so it can be replayed with `plan_vs_lpt` or these variables.

use hetsched_common::rng::clock_seed;
use hetsched_planner::{plan, uniform_lpt, validate, Shape};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The seeds to run, from the environment; printed.
fn seeds() -> std::ops::Range<u64> {
    let first = match std::env::var("PLANNER_SEED").as_deref() {
        Ok("clock") => clock_seed() % 1_000_000_000,
        Ok(v) => v.parse().expect("PLANNER_SEED is a number or `clock`"),
        Err(_) => 1,
    };
    let count: u64 = std::env::var("PLANNER_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    println!("PLANNER_SEED={first} PLANNER_SEEDS={count}");
    first..first + count
}

/// Plans every seed of `shape`; asserts that every schedule validates and that the
/// planner's own makespan is at most uniform-LPT's on every seed.
fn check_shape(shape: Shape) {
    let mut failures = Vec::new();
    for seed in seeds() {
        let name = shape.name();
        let inst = shape.instance(seed).expect("generated shapes are valid");
        let p = plan(&inst).expect("plan");
        let lpt = validate(&inst, &uniform_lpt(&inst))
            .expect("uniform-LPT validates")
            .makespan;
        assert!(close(lpt, p.baselines.uniform_lpt), "{name} seed {seed}");
        let own = p
            .planner_schedule
            .as_ref()
            .unwrap_or_else(|| panic!("{name} seed {seed}: no planner schedule"));
        let own_ms = validate(&inst, own)
            .unwrap_or_else(|e| panic!("{name} seed {seed}: planner schedule: {e}"))
            .makespan;
        assert_eq!(Some(own_ms), p.planner_makespan, "{name} seed {seed}");
        let chosen = validate(&inst, &p.schedule)
            .unwrap_or_else(|e| panic!("{name} seed {seed}: chosen schedule: {e}"))
            .makespan;
        assert!(close(chosen, p.makespan), "{name} seed {seed}");
        assert!(own_ms >= p.lower_bound * (1.0 - 1e-9), "{name} seed {seed}");
        if own_ms > lpt * (1.0 + 1e-9) {
            failures.push(format!(
                "{name} seed {seed}: planner {own_ms:.3} > uniform_lpt {lpt:.3}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the planner lost:\n{}",
        failures.join("\n")
    );
}

#[test]
fn course_shape() {
    check_shape(Shape::Course);
}

#[test]
fn one_host() {
    check_shape(Shape::OneHost);
}

#[test]
fn ten_hosts_of_eight_cores() {
    check_shape(Shape::TenByEight);
}

#[test]
fn skewed_block_sizes() {
    check_shape(Shape::Skewed);
}

#[test]
fn all_data_on_one_host() {
    check_shape(Shape::OneHolder);
}
