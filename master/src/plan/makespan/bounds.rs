//! The lower bound (SEEDS.md §S2; issue 5): no schedule can finish before it.
//!
//! `max( max over jobs of the job's best time on ≤ 10 cores, Σ data / speed over jobs / T )`.
//! A job's exact best time is a partition problem, so we bound it from below: with `e`
//! cores, its longest core does at least an `e`-th of the job's work and at least its
//! largest block, both at the decayed speed, and transfers are left out (every block might
//! be read locally). The second term holds because a core processes a block no faster than
//! `size / speed` (g ≤ 1), so the cluster's total busy time is at least Σ data / speed,
//! shared by T cores.

use super::model::Instance;

/// A lower bound on job `job`'s duration with `e` cores.
pub(crate) fn job_bound_on(inst: &Instance, job: usize, e: usize) -> f64 {
    let j = &inst.jobs()[job];
    let largest = j.blocks.iter().map(|b| b.size).fold(0.0, f64::max);
    let speed = j.speed * inst.decay(e);
    (j.data() / (e as f64 * speed)).max(largest / speed)
}

/// A lower bound on job `job`'s duration on any allowed number of cores.
pub fn job_bound(inst: &Instance, job: usize) -> f64 {
    (1..=inst.max_cores())
        .map(|e| job_bound_on(inst, job, e))
        .fold(f64::INFINITY, f64::min)
}

/// The lower bound on the makespan of any valid schedule of `inst`.
pub fn lower_bound(inst: &Instance) -> f64 {
    let longest_job = (0..inst.jobs().len())
        .map(|j| job_bound(inst, j))
        .fold(0.0, f64::max);
    let work: f64 = inst.jobs().iter().map(|j| j.estimate()).sum();
    longest_job.max(work / inst.total_cores() as f64)
}
