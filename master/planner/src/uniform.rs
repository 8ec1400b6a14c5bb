//! The uniform-cores LPT baseline (docs/DESIGN.md §S2, "Baselines"): every job gets the same
//! number of cores `k`, jobs go longest first onto the `k` cores free earliest, and the best
//! `k` is kept. A plain list schedule whose only search is over `k`: a yardstick for the
//! planner that is harder to beat than round-robin or capacity-weighted.
//!
//! For each `k` in `1..=max_cores` (ten, fewer on a small cluster or with a large α; see
//! [`Instance::max_cores`]):
//! * jobs by estimated time (Σ block size / speed), longest first, ties by input order;
//! * a job gets the `min(k, its blocks)` cores that become free earliest, taken in the order
//!   (free time, host, core) — like the other baselines, a job gets no more cores than it
//!   has blocks, since a core without a block only adds decay;
//! * it starts when all of them are free;
//! * its blocks go largest first, each to the core where (that core's load so far + the
//!   block's execution + its transfer if no replica is on the core's host) is least —
//!   [`place_blocks`], the weighted baseline's rule and tie-breaks, costs from the model's
//!   own `block_time` with g(e) for the job's core count;
//! * it holds its cores until its longest core ends.
//!
//! The `k` with the least makespan wins (ties: the smaller `k`).

use super::baseline::largest_first;
use super::model::Instance;
use super::schedule::Schedule;
use super::work::{place_blocks, Timeline};
use std::collections::BTreeSet;

/// The uniform-cores LPT baseline: the best schedule over `k = 1..=max_cores`.
pub fn uniform_lpt(inst: &Instance) -> Schedule {
    let jobs = Prepared::new(inst);
    let mut best: Option<(Schedule, f64)> = None;
    for k in 1..=inst.max_cores() {
        let (s, ms) = jobs.with_cores(k);
        if best.as_ref().is_none_or(|(_, b)| ms < *b) {
            best = Some((s, ms));
        }
    }
    // `max_cores` is at least one, so `best` is set.
    best.map(|(s, _)| s).unwrap_or_default()
}

/// The baseline's schedule for one `k` (1 ≤ k ≤ `max_cores`), and its makespan.
#[cfg(test)]
pub(crate) fn uniform_lpt_with(inst: &Instance, k: usize) -> (Schedule, f64) {
    Prepared::new(inst).with_cores(k)
}

/// What every `k` reuses: the job order and each job's blocks, largest first.
struct Prepared<'a> {
    inst: &'a Instance,
    order: Vec<usize>,
    blocks: Vec<Vec<usize>>,
}

impl<'a> Prepared<'a> {
    fn new(inst: &'a Instance) -> Self {
        let n = inst.jobs().len();
        let est: Vec<f64> = inst.jobs().iter().map(|j| j.estimate()).collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| est[b].total_cmp(&est[a]).then(a.cmp(&b)));
        Self {
            inst,
            order,
            blocks: (0..n).map(|j| largest_first(inst, j)).collect(),
        }
    }

    fn with_cores(&self, k: usize) -> (Schedule, f64) {
        let inst = self.inst;
        let mut timeline = Timeline::new(inst);
        // (free time as bits, global core id): free times are ≥ 0, where an f64's bits order
        // like its value, and global ids run host by host, so this is (free time, host, core).
        let mut free: BTreeSet<(u64, usize)> = (0..inst.total_cores())
            .map(|c| (0f64.to_bits(), c))
            .collect();
        let mut makespan: f64 = 0.0;
        for &j in &self.order {
            let e = k.min(inst.jobs()[j].blocks.len()).min(free.len());
            let cores: Vec<usize> = (0..e)
                .filter_map(|_| free.pop_first().map(|(_, c)| c))
                .collect();
            let work = place_blocks(inst, j, &cores, &self.blocks[j]);
            let end = timeline.commit(inst, &work);
            free.extend(cores.iter().map(|&c| (end.to_bits(), c)));
            makespan = makespan.max(end);
        }
        // Every job was committed above, so this never falls back.
        (timeline.into_schedule().unwrap_or_default(), makespan)
    }
}
