//! The binary search on the makespan (docs/DESIGN.md §S2 step 4), on a grid of whole ticks so
//! that it ends for certain despite floating point.
//!
//! As in the patent, the probe is `ceil((lower + upper) / 2)`; an infeasible probe raises
//! the lower end, a feasible one lowers the upper end, and the search stops when a probe
//! repeats. While `upper − lower ≥ 2` the probe lies strictly inside, so the interval
//! shrinks to at most `ceil(d / 2)`; once `d ≤ 1` the probe is `upper`, which is probed once
//! and then repeats. So at most `ceil(log2 d) + 1` probes, whatever the oracle answers — it
//! need not be monotone (the greedy packing is not).

/// Ticks between the lower bound and the upper bound's end of the grid: the makespan is
/// searched to `upper / GRID_TICKS` (≈ 6e-5 of it), in at most 15 probes.
pub const GRID_TICKS: u64 = 1 << 14;

/// What a search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchOutcome {
    /// The smallest tick the oracle accepted, if any.
    pub best: Option<u64>,
    /// How many probes the oracle was asked.
    pub probes: u32,
}

/// Binary search on ticks `lower..=upper` with the patent's stopping rule.
pub fn bisect(
    mut lower: u64,
    mut upper: u64,
    mut feasible: impl FnMut(u64) -> bool,
) -> SearchOutcome {
    if lower > upper {
        std::mem::swap(&mut lower, &mut upper);
    }
    let mut last = None;
    let mut best: Option<u64> = None;
    let mut probes = 0;
    loop {
        // ceil((lower + upper) / 2) without overflow.
        let mid = lower + (upper - lower).div_ceil(2);
        if last == Some(mid) {
            break;
        }
        last = Some(mid);
        probes += 1;
        if feasible(mid) {
            upper = mid;
            best = Some(best.map_or(mid, |b| b.min(mid)));
        } else {
            lower = mid;
        }
    }
    SearchOutcome { best, probes }
}

/// The most probes [`bisect`] makes on `lower..=upper`: `ceil(log2(d)) + 1`, `d = upper − lower`
/// (one probe when `d = 0`).
pub fn max_probes(lower: u64, upper: u64) -> u32 {
    let d = upper.abs_diff(lower);
    if d <= 1 {
        1
    } else {
        // ceil(log2 d) = bits of (d − 1).
        (64 - (d - 1).leading_zeros()) + 1
    }
}
