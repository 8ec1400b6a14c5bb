//! One probe of the binary search (docs/DESIGN.md §S2.3): can the jobs be packed so that all
//! finish by a given makespan `M`? And the candidate core sets the local search reuses.
//!
//! Jobs go in order of estimated time, longest first. For each core count `e` the job
//! may use, a few core sets are tried ([`Packer::core_sets`]): the `e` cores free earliest,
//! and, for each of the next distinct free times `t` at which `e` cores are free, the `e`
//! cores the weight λ picks among those free by `t` — λ favours hosts holding the job's
//! data, so a job may wait for cores where its data is. Each set gets the job's blocks
//! (largest first, where they end soonest, transfers counted) and is trimmed. Among the
//! sets that finish by `M`, the job takes the one using the fewest core-seconds (each
//! core's time from when it is free to the job's end: decay, transfers and waiting all
//! cost), which leaves the most room for the jobs after it. A job that cannot finish by
//! `M` on any set makes `M` infeasible.
//!
//! Each job is trimmed as soon as it is placed (the patent's "first moment"), so the
//! feasibility test and the jobs after it see the shorter time; the critical chain is
//! trimmed again once all jobs are placed (the "second moment", `second.rs`).

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
    /// The hosts holding a replica of some block of each job, ascending.
    data_hosts: Vec<Vec<usize>>,
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
            data_hosts: (0..n)
                .map(|j| {
                    let on = data_on_hosts(inst, j);
                    (0..inst.hosts()).filter(|&h| on[h] > 0.0).collect()
                })
                .collect(),
            bound: bound_on
                .iter()
                .map(|b| b.iter().copied().fold(f64::INFINITY, f64::min))
                .collect(),
            bound_on,
        }
    }

    /// The instance packed.
    pub(crate) fn instance(&self) -> &'a Instance {
        self.inst
    }

    /// `job`'s blocks, largest first.
    pub(crate) fn blocks_of(&self, job: usize) -> &[usize] {
        &self.blocks[job]
    }

    /// The job order of every probe (longest estimate first).
    pub(crate) fn lpt_order(&self) -> &[usize] {
        &self.order
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
            let cand = self.place_job(&timeline, job, m)?;
            timeline.commit(self.inst, &cand.work);
        }
        timeline.into_schedule()
    }

    /// The core λ picks next for `job`, among cores that are not yet the job's and could
    /// still finish it by `m` (free by `m` minus the job's shortest possible time).
    ///
    /// On one host φ and β are the same for every core and t falls as the free time grows,
    /// so each host's best core is its earliest free one not yet taken; only those are
    /// weighed, which is the same choice as weighing every core, in O(hosts).
    #[cfg(test)]
    pub(crate) fn pick_core(
        &self,
        timeline: &Timeline,
        job: usize,
        chosen: &[usize],
        per_host: &[usize],
        m: f64,
    ) -> Option<usize> {
        let hosts: Vec<usize> = (0..per_host.len()).collect();
        self.pick_core_by(timeline, job, chosen, per_host, (m, f64::INFINITY), &hosts)
    }

    /// [`Self::pick_core`] among the cores free by `cap` only (the job is to start by
    /// `cap`), on the hosts `hosts` only.
    fn pick_core_by(
        &self,
        timeline: &Timeline,
        job: usize,
        chosen: &[usize],
        per_host: &[usize],
        (m, cap): (f64, f64),
        hosts: &[usize],
    ) -> Option<usize> {
        let mut best: Option<(f64, f64, usize)> = None;
        for &host in hosts {
            let taken_here = per_host[host];
            let Some(c) = timeline.by_avail(host).find(|c| !chosen.contains(c)) else {
                continue;
            };
            let avail = timeline.avail(c);
            if avail > cap || avail + self.bound[job] > m {
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

    /// Extends `seq`, the cores λ picks one by one for `job` among the cores of `hosts`
    /// free by `cap`, to `len` cores if there are that many (`per_host` counts `seq` per
    /// host). Each pick depends only on the ones before, so sequences grow on demand.
    fn extend_by_weight(
        &self,
        timeline: &Timeline,
        job: usize,
        (m, cap): (f64, f64),
        hosts: &[usize],
        (seq, per_host): (&mut Vec<usize>, &mut Vec<usize>),
        len: usize,
    ) {
        if per_host.is_empty() {
            per_host.resize(self.inst.hosts(), 0);
        }
        while seq.len() < len {
            let Some(c) = self.pick_core_by(timeline, job, seq, per_host, (m, cap), hosts) else {
                break;
            };
            seq.push(c);
            per_host[self.inst.host_of(c)] += 1;
        }
    }

    /// The most cores `job` may use: the cap, and no more than its blocks.
    pub(crate) fn most(&self, job: usize) -> usize {
        self.inst.max_cores().min(self.blocks[job].len())
    }

    /// `job` placed on `cores`: blocks largest first where they end soonest, trimmed, and
    /// timed against the timeline.
    fn try_cores(&self, timeline: &Timeline, job: usize, cores: &[usize]) -> Cand {
        let work = settle(
            self.inst,
            place_blocks(self.inst, job, cores, &self.blocks[job]),
        );
        let start = timeline.start_of(work.slots.iter().map(|s| s.core));
        let finish = start + work.duration();
        let area = work
            .slots
            .iter()
            .map(|s| finish - timeline.avail(s.core))
            .sum();
        Cand {
            work,
            start,
            finish,
            area,
        }
    }

    /// The core sets worth trying for `job` on `e` cores, for each `e` in `1..=most`,
    /// start-time aware (docs/DESIGN.md §S2.3), computed lazily by [`CoreSets::of`]:
    /// * the `e` cores free earliest, by (free time, host, core) — the job starts soonest;
    /// * for each of the [`WAITS`] earliest distinct free times `t` at which `e` cores are
    ///   free, the `e` cores λ picks among those free by `t` — where the job's data is. A
    ///   later `t` lets the job wait for cores that hold its data.
    pub(crate) fn core_sets<'t>(
        &'t self,
        timeline: &'t Timeline,
        job: usize,
        m: f64,
    ) -> CoreSets<'t, 'a> {
        let inst = self.inst;
        let most = self.most(job);
        // The earliest free cores of the cluster: enough for every `e` and the waits after
        // it in all but clusters where many cores share a free time.
        let early: Vec<(f64, usize)> = timeline
            .earliest()
            .take(most * (WAITS + 2))
            .map(|c| (timeline.avail(c), c))
            .collect();
        // λ weighs the hosts holding the job's data and the hosts of those earliest cores:
        // on any other host every core is free later than one of the latter, and none of
        // the job's data is there, so λ ranks it below them (up to φ).
        let mut hosts = self.data_hosts[job].clone();
        hosts.extend(early.iter().map(|&(_, c)| inst.host_of(c)));
        hosts.sort_unstable();
        hosts.dedup();
        let mut times: Vec<f64> = early.iter().map(|&(t, _)| t).collect();
        times.dedup();
        CoreSets {
            packer: self,
            timeline,
            job,
            m,
            most: most.min(early.len()),
            early,
            times,
            hosts,
            by_cap: Vec::new(),
        }
    }

    /// Places `job` to finish by `m` using the fewest core-seconds — its cores' time from
    /// when each is free to the job's end, so waiting counts — among the candidate core
    /// sets of every core count; `None` if none finishes by `m`. Core-seconds count
    /// transfers (a remote block lengthens its core) and decay, so the core count is
    /// chosen with both in view: the fewest resources that meet `m` leave the most room
    /// for the jobs after it.
    fn place_job(&self, timeline: &Timeline, job: usize, m: f64) -> Option<Cand> {
        let mut sets = self.core_sets(timeline, job, m);
        let mut best: Option<Cand> = None;
        for e in 1..=sets.most {
            let floor = self.bound_on[job][e];
            if best.as_ref().is_some_and(|b| b.area <= e as f64 * floor) {
                continue;
            }
            for cores in &sets.of(e) {
                if timeline.start_of(cores.iter().copied()) + floor > m {
                    continue;
                }
                let c = self.try_cores(timeline, job, cores);
                if c.finish > m {
                    continue;
                }
                let better = best.as_ref().is_none_or(|b| {
                    c.area
                        .total_cmp(&b.area)
                        .then(c.finish.total_cmp(&b.finish))
                        .is_lt()
                });
                if better {
                    best = Some(c);
                }
            }
        }
        best
    }

    /// Places `job` on (about) `e` cores, the candidate of rank `rank` by (finish, core-
    /// seconds) among [`Self::core_sets`] — rank 0 ends soonest, a higher rank moves the
    /// job to other cores. Falls back to fewer cores when fewer are ever free.
    pub(crate) fn place_on(&self, timeline: &Timeline, job: usize, e: usize, rank: usize) -> Cand {
        // More cores than are ever free, or than the job may use, fall back to the most.
        let e = e.clamp(1, self.most(job).min(self.inst.total_cores()));
        let list = self.core_sets(timeline, job, f64::INFINITY).of(e);
        let mut cands: Vec<Cand> = list
            .iter()
            .map(|cores| self.try_cores(timeline, job, cores))
            .collect();
        cands.sort_by(|a, b| {
            a.finish
                .total_cmp(&b.finish)
                .then(a.area.total_cmp(&b.area))
        });
        let r = rank.min(cands.len() - 1);
        cands.swap_remove(r)
    }
}

/// The candidate core sets of one job against one timeline, built on demand per core
/// count (a probe skips most counts, and the local search needs one).
pub(crate) struct CoreSets<'t, 'a> {
    packer: &'t Packer<'a>,
    timeline: &'t Timeline,
    job: usize,
    m: f64,
    /// The largest core count with sets.
    pub most: usize,
    /// The earliest free cores, (free time, core), in (free time, host, core) order.
    early: Vec<(f64, usize)>,
    /// Their distinct free times, ascending.
    times: Vec<f64>,
    /// The hosts λ weighs.
    hosts: Vec<usize>,
    /// λ's pick order among the cores free by each cap seen so far, as far as needed,
    /// and its cores per host.
    by_cap: Vec<(f64, Vec<usize>, Vec<usize>)>,
}

impl CoreSets<'_, '_> {
    /// The distinct core sets for `e` cores (`1 ≤ e ≤ most`), earliest-free first.
    pub fn of(&mut self, e: usize) -> Vec<Vec<usize>> {
        let early = &self.early;
        let mut list: Vec<Vec<usize>> = vec![early[..e].iter().map(|&(_, c)| c).collect()];
        let first = self.times.partition_point(|&t| t < early[e - 1].0);
        for &cap in self.times.iter().skip(first).take(WAITS) {
            let pos = match self.by_cap.iter().position(|(t, ..)| *t == cap) {
                Some(p) => p,
                None => {
                    self.by_cap.push((cap, Vec::new(), Vec::new()));
                    self.by_cap.len() - 1
                }
            };
            let (_, seq, per_host) = &mut self.by_cap[pos];
            self.packer.extend_by_weight(
                self.timeline,
                self.job,
                (self.m, cap),
                &self.hosts,
                (seq, per_host),
                e,
            );
            let seq = &self.by_cap[pos].1;
            if seq.len() >= e {
                let mut set = seq[..e].to_vec();
                set.sort_unstable();
                if !list.iter().any(|l| {
                    let mut l = l.clone();
                    l.sort_unstable();
                    l == set
                }) {
                    list.push(set);
                }
            }
        }
        list
    }
}

/// How many distinct later start times a job may wait until for cores holding its data.
pub(crate) const WAITS: usize = 2;

/// A job placed against a timeline: its work, when it can start and end, and the
/// core-seconds it takes (from each core's free time to the job's end).
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub work: JobWork,
    pub start: f64,
    pub finish: f64,
    pub area: f64,
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
