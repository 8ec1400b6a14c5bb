//! Model check of the replicated state machine: long seeded random sequences of every kind of
//! command (plans of the real scheduler, fresh and stale, and bogus ones; slave reports late,
//! out of order, duplicated and stale; steals, CPU changes, drains, GC, priority
//! configurations, ...) go through `ClusterState::apply`, and after every entry the
//! invariants of `model_check/invariants.rs` are checked: no node over capacity and every
//! free vector equal to a recomputation, attempts only grow, final tasks never run again,
//! acknowledged submissions are kept until collected, derived counts agree, snapshot →
//! restore gives the same state and hash, and refused commands change nothing.
//!
//! The snapshot round trip (a serialisation and a deserialisation of the whole state) costs
//! several times all the other checks together in a debug build, so the CI runs do it after
//! every [`ROUND_TRIP_EVERY`]-th entry and every other check after every entry; replays of a
//! failing or regression log check it after every entry too.
//!
//! A failure prints its seed and a shrunk log. Environment: `MODEL_CHECK_SEED=<seed>` runs one
//! seed (in each scenario), `MODEL_CHECK_STEPS=<n>` sets the commands per seed,
//! `MODEL_CHECK_ROUND_TRIP_EVERY=<n>` the round-trip period (1: every entry). Shrunk failures
//! are kept as named regression tests (`model_check/regressions.rs`); the `forge` feature (a
//! dev-dependency of the crate on itself) lets `model_check/forged.rs` show that every check
//! fires on a corrupted state.

#[path = "model_check/driver.rs"]
mod driver;
#[path = "model_check/fixture.rs"]
mod fixture;
#[path = "model_check/forged.rs"]
mod forged;
#[path = "model_check/gen.rs"]
mod gen;
#[path = "model_check/invariants.rs"]
mod invariants;
#[path = "model_check/regressions.rs"]
mod regressions;

use driver::{Run, Scenario, Stats};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::multiqueue::Ordering;
use std::time::Instant;

/// Seeds per scenario in CI, and commands per seed: 4 scenarios × 5 × 5,000 = 100,000.
const SEEDS: u64 = 5;
const STEPS: u64 = 5_000;
/// The snapshot round trip is checked after every this many entries in the CI runs.
const ROUND_TRIP_EVERY: u64 = 3;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn run_scenario(name: &str, base_seed: u64, scenario: Scenario) {
    let steps = env_u64("MODEL_CHECK_STEPS").unwrap_or(STEPS);
    let round_trip_every = env_u64("MODEL_CHECK_ROUND_TRIP_EVERY").unwrap_or(ROUND_TRIP_EVERY);
    let seeds: Vec<u64> = match env_u64("MODEL_CHECK_SEED") {
        Some(seed) => vec![seed],
        None => (0..SEEDS).map(|i| base_seed + i).collect(),
    };
    let started = Instant::now();
    let mut total = Stats::default();
    for seed in seeds {
        let mut run = Run::new(seed, scenario).round_trip_every(round_trip_every);
        run.run(steps);
        total.merge(&run.stats);
    }
    eprintln!(
        "model check {name}: {} commands in {:.1?} (round trip every {round_trip_every}; fresh plans {}, preempted {}, most tasks {}); outcomes {:?}",
        total.commands,
        started.elapsed(),
        total.fresh_plans,
        total.preempted,
        total.max_tasks,
        total.outcomes
    );
}

#[test]
fn model_check_first_fit_with_preemption() {
    run_scenario(
        "first-fit",
        0x5EED_0000,
        Scenario {
            policy: PolicyKind::FirstFit,
            queue_depth: 0,
            ordering: Ordering::Submission,
            pools: false,
        },
    );
}

#[test]
fn model_check_best_fit_with_slave_queues_and_steals() {
    run_scenario(
        "best-fit+queues",
        0x5EED_1000,
        Scenario {
            policy: PolicyKind::BestFit,
            queue_depth: 2,
            ordering: Ordering::Submission,
            pools: false,
        },
    );
}

#[test]
fn model_check_frag_with_pools_and_take_back() {
    run_scenario(
        "frag+pools",
        0x5EED_2000,
        Scenario {
            policy: PolicyKind::Frag,
            queue_depth: 1,
            ordering: Ordering::Pipeline,
            pools: true,
        },
    );
}

#[test]
fn model_check_random_drf() {
    run_scenario(
        "random+drf",
        0x5EED_3000,
        Scenario {
            policy: PolicyKind::Random,
            queue_depth: 3,
            ordering: Ordering::Drf,
            pools: false,
        },
    );
}
