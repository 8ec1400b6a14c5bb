//! The delay between tries of a reconnect or retry loop: doubling from a floor to a cap, with
//! jitter, so that peers that lost the same master or slave at the same moment do not all
//! come back in the same millisecond (and do not keep meeting each other at every retry).
//!
//! One type for every such loop (raft transport, leader search, the master's senders, the
//! slave's link and announcer, listener binds). The task retry delay of a failed task is not
//! one of them: it is computed in the replicated state's apply and stays deterministic.
//!
//! Jitter is "equal jitter": a try waits a random time in `[step / 2, step]`, then the step
//! doubles up to the cap. Half the step is kept so that a loop never spins at a tiny delay,
//! and the other half spreads the tries.

use crate::rng::{clock_seed, SplitMix64};
use std::time::Duration;

/// Doubling delays with jitter between a floor and a cap.
#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    step: Duration,
    rng: SplitMix64,
}

impl Backoff {
    /// Delays from `min` doubling to `max` (a `max` below `min` is raised to `min`), with
    /// jitter seeded from the clock and the process id.
    pub fn new(min: Duration, max: Duration) -> Self {
        let seed = clock_seed() ^ u64::from(std::process::id()).rotate_left(32);
        Self::seeded(min, max, seed)
    }

    /// As [`new`](Self::new) with the jitter's seed given (tests).
    pub fn seeded(min: Duration, max: Duration, seed: u64) -> Self {
        Self {
            min,
            max: max.max(min),
            step: min,
            rng: SplitMix64::new(seed),
        }
    }

    /// How long to wait before the next try; each call doubles the step (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = step.saturating_mul(2).min(self.max);
        let half = step / 2;
        let spread = (step - half).as_micros().min(u128::from(u64::MAX)) as u64;
        half + Duration::from_micros(self.rng.range(0, spread))
    }

    /// Back to the floor (after a success).
    pub fn reset(&mut self) {
        self.step = self.min;
    }

    /// The step the next delay is drawn from (for logs).
    pub fn step(&self) -> Duration {
        self.step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_to_the_cap_within_their_jitter() {
        let seed = clock_seed();
        let mut b = Backoff::seeded(50 * MS, 2000 * MS, seed);
        let mut step = 50 * MS;
        for _ in 0..12 {
            let d = b.next_delay();
            assert!(
                d >= step / 2 && d <= step,
                "seed {seed}: {d:?} outside {step:?}"
            );
            step = (step * 2).min(2000 * MS);
        }
        assert_eq!(b.step(), 2000 * MS, "seed {seed}");
        b.reset();
        assert_eq!(b.step(), 50 * MS);
        let d = b.next_delay();
        assert!(d >= 25 * MS && d <= 50 * MS, "seed {seed}: {d:?}");
    }

    #[test]
    fn two_loops_seeded_apart_do_not_retry_in_step() {
        let mut a = Backoff::seeded(100 * MS, 10_000 * MS, 1);
        let mut b = Backoff::seeded(100 * MS, 10_000 * MS, 2);
        let same = (0..10).filter(|_| a.next_delay() == b.next_delay()).count();
        assert!(same < 10, "jitter drew the same delays for different seeds");
    }

    #[test]
    fn a_cap_below_the_floor_is_the_floor() {
        let mut b = Backoff::seeded(100 * MS, 10 * MS, 7);
        for _ in 0..3 {
            let d = b.next_delay();
            assert!(d >= 50 * MS && d <= 100 * MS, "{d:?}");
        }
    }
}
