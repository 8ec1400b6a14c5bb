//! S3.2: the search of a GPU task's best CPU count, as a pure type.
//!
//! Start at a count (the class's recorded best, adjusted by the task's hints), measure the
//! mean GPU utilisation over a probe period, then step −1 while utilisation improves by more
//! than ε; when the first step down does not improve, step +1 from the start while it
//! improves. The count with the best utilisation where improvement stopped is the task's
//! CPU config. Counts stay within `[min, max]`.
//!
//! ```text
//!   measure(start) ─▶ down: start−1, start−2, … while u > best + ε
//!                      │ first step down did not improve
//!                      ▼
//!                     up:   start+1, start+2, … while u > best + ε   ─▶ done(best)
//! ```
//!
//! The caller (the leader's duties core) feeds one mean per probe period with
//! [`CpuSearch::measured`] and applies the [`SearchStep`] it returns.

/// What to do after a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchStep {
    /// Run the next probe period at this many CPUs.
    Try(u32),
    /// The search is over: this count is the task's CPU config.
    Done(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Down,
    Up,
    Finished,
}

/// One task's search.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuSearch {
    start: u32,
    min: u32,
    max: u32,
    epsilon: f64,
    /// The count being measured now.
    current: u32,
    /// Best count and its utilisation so far (`None` before the first measurement).
    best: Option<(u32, f64)>,
    dir: Direction,
}

impl CpuSearch {
    /// A search starting at `start` (clamped into `[min, max]`), stepping while utilisation
    /// improves by more than `epsilon` (percentage points).
    pub fn new(start: u32, min: u32, max: u32, epsilon: f64) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        let start = start.clamp(min, max);
        Self {
            start,
            min,
            max,
            epsilon: if epsilon.is_finite() {
                epsilon.max(0.0)
            } else {
                0.0
            },
            current: start,
            best: None,
            dir: Direction::Down,
        }
    }

    /// The count to measure now.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// The best count so far.
    pub fn best(&self) -> Option<u32> {
        self.best.map(|(c, _)| c)
    }

    /// Whether the search ended.
    pub fn is_done(&self) -> bool {
        self.dir == Direction::Finished
    }

    /// The mean utilisation at [`current`](Self::current) was `util`: the next step.
    pub fn measured(&mut self, util: f64) -> SearchStep {
        let util = if util.is_finite() { util } else { 0.0 };
        let Some((best_count, best_util)) = self.best else {
            self.best = Some((self.current, util));
            return self.step_from(self.current);
        };
        if self.dir == Direction::Finished {
            return SearchStep::Done(best_count);
        }
        if util > best_util + self.epsilon {
            self.best = Some((self.current, util));
            return self.step_from(self.current);
        }
        // No improvement in this direction.
        match self.dir {
            Direction::Down if best_count == self.start => {
                // Fewer CPUs never helped: try more, from the start.
                self.dir = Direction::Up;
                self.step_from(self.start)
            }
            _ => self.finish(best_count),
        }
    }

    /// The next count in the current direction from `from`, switching to up or finishing at
    /// the bounds.
    fn step_from(&mut self, from: u32) -> SearchStep {
        let best = self.best.map(|(c, _)| c).unwrap_or(from);
        if self.dir == Direction::Down {
            if from > self.min {
                self.current = from - 1;
                return SearchStep::Try(self.current);
            }
            if best != self.start {
                // Improved all the way down to the bound.
                return self.finish(best);
            }
            self.dir = Direction::Up;
        }
        if self.dir == Direction::Up && from < self.max {
            self.current = from + 1;
            return SearchStep::Try(self.current);
        }
        self.finish(best)
    }

    fn finish(&mut self, best: u32) -> SearchStep {
        self.dir = Direction::Finished;
        self.current = best;
        SearchStep::Done(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against `curve` (utilisation by CPU count); returns the final count and
    /// the counts measured in order.
    fn run(mut s: CpuSearch, curve: impl Fn(u32) -> f64) -> (u32, Vec<u32>) {
        let mut tried = vec![s.current()];
        for _ in 0..64 {
            match s.measured(curve(s.current())) {
                SearchStep::Try(c) => tried.push(c),
                SearchStep::Done(c) => return (c, tried),
            }
        }
        panic!("search did not end: tried {tried:?}");
    }

    /// A peaked curve: best at `peak`, falling 10 points per CPU away from it.
    fn peaked(peak: u32) -> impl Fn(u32) -> f64 {
        move |c| 90.0 - 10.0 * (f64::from(c) - f64::from(peak)).abs()
    }

    #[test]
    fn converges_down_to_a_peak_below_the_start() {
        let (best, tried) = run(CpuSearch::new(6, 1, 8, 1.0), peaked(3));
        assert_eq!(best, 3);
        assert_eq!(tried, vec![6, 5, 4, 3, 2]);
    }

    #[test]
    fn converges_up_to_a_peak_above_the_start() {
        let (best, tried) = run(CpuSearch::new(2, 1, 8, 1.0), peaked(5));
        assert_eq!(best, 5);
        assert_eq!(tried, vec![2, 1, 3, 4, 5, 6]);
    }

    #[test]
    fn stays_at_the_start_when_it_is_best() {
        let (best, tried) = run(CpuSearch::new(4, 1, 8, 1.0), peaked(4));
        assert_eq!(best, 4);
        assert_eq!(tried, vec![4, 3, 5]);
    }

    #[test]
    fn improvements_within_epsilon_do_not_count() {
        // Each CPU less adds only 0.5 points: below ε = 2, so the search keeps the start.
        let (best, _) = run(CpuSearch::new(4, 1, 8, 2.0), |c| 80.0 - 0.5 * f64::from(c));
        assert_eq!(best, 4);
    }

    #[test]
    fn respects_the_bounds() {
        // Always better with fewer: stops at the lower bound.
        let (best, tried) = run(CpuSearch::new(3, 1, 8, 1.0), |c| {
            100.0 - f64::from(c) * 10.0
        });
        assert_eq!(best, 1);
        assert_eq!(tried, vec![3, 2, 1]);
        // Always better with more: stops at the upper bound.
        let (best, tried) = run(CpuSearch::new(3, 1, 5, 1.0), |c| f64::from(c) * 10.0);
        assert_eq!(best, 5);
        assert_eq!(tried, vec![3, 2, 4, 5]);
        // A start outside the bounds is clamped; a one-count range is done at once.
        assert_eq!(CpuSearch::new(9, 1, 4, 1.0).current(), 4);
        let (best, tried) = run(CpuSearch::new(2, 2, 2, 1.0), |_| 50.0);
        assert_eq!((best, tried), (2, vec![2]));
    }

    #[test]
    fn bad_measurements_never_panic() {
        let mut s = CpuSearch::new(3, 0, 0, f64::NAN);
        assert_eq!(s.current(), 1);
        assert!(matches!(s.measured(f64::NAN), SearchStep::Done(1)));
        assert!(s.is_done());
        assert_eq!(s.measured(10.0), SearchStep::Done(1));
    }
}
