//! One probe of the binary search (docs/DESIGN.md §S2 step 3): can the jobs be packed so that all
//! finish by a given makespan `M`?
//!
//! Jobs go in order of estimated time, longest first. Each starts on one core; while it
//! cannot finish by `M` it gets one more core (the one with the largest weight λ), its blocks
//! are placed afresh (g(e) changed every cost) and trimmed. The fewest cores that do
//! leave the most room for the jobs after it, and a job that cannot finish by `M` on its
//! allowed cores makes `M` infeasible.
//!
//! We trim as soon as a job is placed (the patent's "first moment") rather than after all
//! jobs (its preferred "second moment"): a job's trimmed result is the same either way, and
//! trimming first lets the feasibility test and the jobs after it see the shorter time. The
//! patent chose later only to save planning time, which with ≤ 10 cores per job is small.

use super::baseline::{data_on_hosts, largest_first};
use super::bounds::job_bounds_by_cores;
use super::model::Instance;
use super::schedule::Schedule;
use super::trim::trim;
use super::work::{place_blocks, JobWork, Timeline};

/// Share of a job's data that every host gets in β, so hosts without its data still rank
/// by φ and t instead of all scoring zero (docs/DESIGN.md's ε).
pub const DATA_EPSILON: f64 = 1e-3;

/// The core weight λ = φ·β·t (docs/DESIGN.md §S2, "Decisions"):
/// * φ = 1 − cores(i,k) / (cores_i + 1): hosts already holding many of this job's cores
///   score lower, which spreads a job over the hosts that hold its data;
/// * β = (data(i,k) + ε) / data_i: the share of the job's data on the core's host;
/// * t = max(0, 1 − avail_j / M): cores free early score higher.
pub fn core_weight(
    cores_on_host: usize,
    cores_of_job: usize,
    data_on_host: f64,
    data: f64,
    avail: f64,
    makespan: f64,
) -> f64 {
    let phi = 1.0 - cores_on_host as f64 / (cores_of_job as f64 + 1.0);
    let beta = (data_on_host + DATA_EPSILON * data) / data;
    let t = (1.0 - avail / makespan).max(0.0);
    phi * beta * t
}

/// Per-instance facts every probe reuses.
pub(crate) struct Packer<'a> {
    inst: &'a Instance,
    /// Jobs by estimated time, longest first (ties by index, for determinism).
    order: Vec<usize>,
    /// Each job's blocks, largest first.
    blocks: Vec<Vec<usize>>,
    /// Each job's data per host.
    on_host: Vec<Vec<f64>>,
    /// Each job's total data.
    data: Vec<f64>,
    /// A lower bound on each job's duration.
    bound: Vec<f64>,
    /// A lower bound on each job's duration with `e` cores (index `e`).
    bound_on: Vec<Vec<f64>>,
}

impl<'a> Packer<'a> {
    pub fn new(inst: &'a Instance) -> Self {
        let n = inst.jobs().len();
        let est: Vec<f64> = inst.jobs().iter().map(|j| j.estimate()).collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| est[b].total_cmp(&est[a]).then(a.cmp(&b)));
        let bound_on: Vec<Vec<f64>> = (0..n).map(|j| job_bounds_by_cores(inst, j)).collect();
        Self {
            inst,
            order,
            blocks: (0..n).map(|j| largest_first(inst, j)).collect(),
            on_host: (0..n).map(|j| data_on_hosts(inst, j)).collect(),
            data: inst.jobs().iter().map(|j| j.data()).collect(),
            bound: bound_on
                .iter()
                .map(|b| b.iter().copied().fold(f64::INFINITY, f64::min))
                .collect(),
            bound_on,
        }
    }

    /// The job order of every probe.
    #[cfg(test)]
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Packs all jobs to finish by `m`, or `None` if this greedy cannot.
    pub fn pack(&self, m: f64) -> Option<Schedule> {
        let mut timeline = Timeline::new(self.inst);
        for &job in &self.order {
            let work = self.place_job(&timeline, job, m)?;
            timeline.commit(self.inst, &work);
        }
        timeline.into_schedule()
    }

    /// The core λ picks next for `job`, among cores that are not yet the job's and could
    /// still finish it by `m` (free by `m` minus the job's shortest possible time).
    ///
    /// On one host φ and β are the same for every core and t falls as the free time grows,
    /// so each host's best core is its earliest free one not yet taken; only those are
    /// weighed, which is the same choice as weighing every core, in O(hosts).
    pub(crate) fn pick_core(
        &self,
        timeline: &Timeline,
        job: usize,
        chosen: &[usize],
        per_host: &[usize],
        m: f64,
    ) -> Option<usize> {
        let mut best: Option<(f64, f64, usize)> = None;
        for (host, &taken_here) in per_host.iter().enumerate() {
            let Some(c) = timeline.by_avail(host).find(|c| !chosen.contains(c)) else {
                continue;
            };
            let avail = timeline.avail(c);
            if avail + self.bound[job] > m {
                continue;
            }
            let w = core_weight(
                taken_here,
                chosen.len(),
                self.on_host[job][host],
                self.data[job],
                avail,
                m,
            );
            // Largest λ; ties to the core free earlier, then the lower id.
            let better = match best {
                None => true,
                Some((bw, ba, bc)) => w
                    .total_cmp(&bw)
                    .then(ba.total_cmp(&avail))
                    .then(bc.cmp(&c))
                    .is_gt(),
            };
            if better {
                best = Some((w, avail, c));
            }
        }
        best.map(|(_, _, c)| c)
    }

    /// Places `job` with the fewest cores that finish it by `m`.
    fn place_job(&self, timeline: &Timeline, job: usize, m: f64) -> Option<JobWork> {
        let inst = self.inst;
        let most = inst.max_cores().min(self.blocks[job].len());
        let mut chosen = Vec::with_capacity(most);
        let mut per_host = vec![0; inst.hosts()];
        for e in 1..=most {
            let c = self.pick_core(timeline, job, &chosen, &per_host, m)?;
            chosen.push(c);
            per_host[inst.host_of(c)] += 1;
            // Skip the placement when even a perfect split could not make it.
            if timeline.start_of(chosen.iter().copied()) + self.bound_on[job][e] > m {
                continue;
            }
            let work = settle(inst, place_blocks(inst, job, &chosen, &self.blocks[job]));
            let start = timeline.start_of(work.slots.iter().map(|s| s.core));
            if start + work.duration() <= m {
                return Some(work);
            }
        }
        None
    }
}

/// Trims a placed job and drops cores it left empty, until neither changes anything.
/// Both only shorten the job, so this ends within `e` rounds.
pub(crate) fn settle(inst: &Instance, mut work: JobWork) -> JobWork {
    loop {
        trim(inst, &mut work);
        if !work.drop_empty(inst) {
            return work;
        }
    }
}
