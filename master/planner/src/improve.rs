//! The local search over whole schedules (docs/DESIGN.md §S2.6), after the binary search.
//!
//! A schedule is described by a [`Genome`]: the order in which jobs are placed, each job's
//! core count, and which of its candidate core sets it takes (rank 0 = the one that ends
//! soonest). [`Packer::build`] turns a genome into a schedule, placing jobs one by one
//! against the timeline, each on the candidate sets of [`Packer::core_sets`] (start-time
//! and data aware). The search moves one job's cores (its rank), changes one job's core
//! count, or reorders two jobs, and keeps a change when the makespan falls, or stays while
//! the sum of job finish times falls (so that it can cross plateaus). Neighbours are tried
//! in an order shuffled by a fixed seed, so the search is deterministic; it stops at a
//! local optimum or after [`PLACEMENT_BUDGET`] job placements.

use super::model::Instance;
use super::pack::{Cand, Packer};
use super::schedule::{JobPlan, Schedule};
use super::work::{JobWork, Timeline};
use hetsched_common::rng::SplitMix64;

/// The most job placements one local search makes (a schedule built from position p of
/// the order costs `jobs − p`): bounds planning time whatever the input's size — ample
/// for 20 jobs, a handful of schedules for thousands.
pub(crate) const PLACEMENT_BUDGET: usize = 20_000;

/// The most timelines kept for rebuilding from a position (memory: each holds every core).
const SNAPSHOTS: usize = 64;

/// The seed of the neighbour order.
pub(crate) const SEARCH_SEED: u64 = 0x005E_ED0F_5CED;

/// How many candidate core sets a job's rank ranges over.
const RANKS: usize = 3;

/// What the local search varies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Genome {
    /// Jobs in placement order.
    pub order: Vec<usize>,
    /// Core count per job (by job index).
    pub cores: Vec<usize>,
    /// Rank of the core set taken, per job.
    pub rank: Vec<usize>,
}

/// A job placed at a start time.
#[derive(Clone, Debug)]
pub(crate) struct Placed {
    pub work: JobWork,
    pub start: f64,
}

impl Placed {
    pub fn finish(&self) -> f64 {
        self.start + self.work.duration()
    }
}

/// A built schedule, per job, with its makespan and sum of finish times.
#[derive(Clone, Debug)]
pub(crate) struct Built {
    pub jobs: Vec<Placed>,
    pub makespan: f64,
    pub sum_finish: f64,
}

impl Built {
    pub fn from_jobs(jobs: Vec<Placed>) -> Self {
        let makespan = jobs.iter().map(Placed::finish).fold(0.0, f64::max);
        let sum_finish = jobs.iter().map(Placed::finish).sum();
        Self {
            jobs,
            makespan,
            sum_finish,
        }
    }

    /// Whether `self` is strictly better than `other`: a shorter makespan, or the same
    /// makespan with a smaller sum of finish times (relative tolerance 1e-9 on each).
    pub fn beats(&self, other: &Built) -> bool {
        let tol = 1e-9 * other.makespan.max(1.0);
        if self.makespan < other.makespan - tol {
            return true;
        }
        self.makespan <= other.makespan + tol
            && self.sum_finish < other.sum_finish - 1e-9 * other.sum_finish.max(1.0)
    }

    pub fn to_schedule(&self, inst: &Instance) -> Schedule {
        Schedule {
            jobs: self
                .jobs
                .iter()
                .map(|p| p.work.to_plan(inst, p.start))
                .collect(),
        }
    }

    /// A schedule read back into the planner's form (the validator has passed it).
    pub fn from_schedule(inst: &Instance, s: &Schedule) -> Option<Self> {
        let jobs = s
            .jobs
            .iter()
            .enumerate()
            .map(|(job, plan): (usize, &JobPlan)| {
                let slots = plan
                    .cores
                    .iter()
                    .map(|w| {
                        Some(super::work::Slot {
                            core: inst.core_id(w.core)?,
                            blocks: w.blocks.clone(),
                            time: 0.0,
                        })
                    })
                    .collect::<Option<Vec<_>>>()?;
                let mut work = JobWork { job, slots };
                work.recompute(inst);
                Some(Placed {
                    work,
                    start: plan.start,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self::from_jobs(jobs))
    }

    /// The genome that describes this schedule: jobs by start time, their core counts,
    /// rank 0.
    pub fn genome(&self) -> Genome {
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            self.jobs[a]
                .start
                .total_cmp(&self.jobs[b].start)
                .then(a.cmp(&b))
        });
        Genome {
            order,
            cores: self.jobs.iter().map(|p| p.work.slots.len()).collect(),
            rank: vec![0; self.jobs.len()],
        }
    }
}

impl Packer<'_> {
    /// The schedule a genome describes: jobs in its order, each placed by
    /// [`Packer::place_on`] at the earliest start its cores allow; with the timeline before
    /// each position of the order, so that a genome that differs only from some position on
    /// can be built from there.
    pub(crate) fn build_traced(&self, g: &Genome) -> (Built, Vec<Timeline>) {
        let inst = self.instance();
        let stride = stride(g.order.len());
        let mut timeline = Timeline::new(inst);
        let mut before = Vec::new();
        let mut jobs: Vec<Option<Placed>> = vec![None; inst.jobs().len()];
        for (pos, &job) in g.order.iter().enumerate() {
            if pos % stride == 0 {
                before.push(timeline.clone());
            }
            let Cand { work, start, .. } = self.place_on(&timeline, job, g.cores[job], g.rank[job]);
            timeline.commit(inst, &work);
            jobs[job] = Some(Placed { work, start });
        }
        // Every job is in the order exactly once, so every entry is set.
        (
            Built::from_jobs(jobs.into_iter().flatten().collect()),
            before,
        )
    }

    /// Builds `g`, which agrees with the genome of `base` on the jobs and genes of the
    /// order's first `from` positions, from the last timeline kept at or before `from`;
    /// returns it and how many jobs were placed.
    fn build_from(
        &self,
        g: &Genome,
        from: usize,
        base: &Built,
        before: &[Timeline],
    ) -> (Built, usize) {
        let inst = self.instance();
        let stride = stride(g.order.len());
        let kept = (from / stride).min(before.len().saturating_sub(1));
        let from = kept * stride;
        let mut timeline = before[kept].clone();
        let mut jobs: Vec<Option<Placed>> = vec![None; inst.jobs().len()];
        for &job in &g.order[..from] {
            jobs[job] = Some(base.jobs[job].clone());
        }
        for &job in &g.order[from..] {
            let Cand { work, start, .. } = self.place_on(&timeline, job, g.cores[job], g.rank[job]);
            timeline.commit(inst, &work);
            jobs[job] = Some(Placed { work, start });
        }
        let placed = g.order.len() - from;
        (
            Built::from_jobs(jobs.into_iter().flatten().collect()),
            placed,
        )
    }
}

/// Timelines are kept before every `stride`-th position: at most [`SNAPSHOTS`] of them.
fn stride(jobs: usize) -> usize {
    jobs.div_ceil(SNAPSHOTS).max(1)
}

/// One change to a genome.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// Job's core count up or down by one.
    Cores(usize, bool),
    /// Job's core-set rank up or down by one.
    Rank(usize, bool),
    /// Swap the jobs at two positions of the order.
    Swap(usize, usize),
}

/// The genome after `mv`, and the first position of the order it changes.
fn apply(g: &Genome, mv: Move, most: impl Fn(usize) -> usize) -> Option<(Genome, usize)> {
    let at = |j: usize| g.order.iter().position(|&k| k == j).unwrap_or(0);
    let from = match mv {
        Move::Cores(j, _) | Move::Rank(j, _) => at(j),
        Move::Swap(a, b) => a.min(b),
    };
    let mut g = g.clone();
    match mv {
        Move::Cores(j, up) => {
            let e = g.cores[j];
            g.cores[j] = match up {
                true if e < most(j) => e + 1,
                false if e > 1 => e - 1,
                _ => return None,
            };
        }
        Move::Rank(j, up) => {
            let r = g.rank[j];
            g.rank[j] = match up {
                true if r + 1 < RANKS => r + 1,
                false if r > 0 => r - 1,
                _ => return None,
            };
        }
        Move::Swap(a, b) => g.order.swap(a, b),
    }
    Some((g, from))
}

/// First-improvement local search from `start`, within `budget` job placements; returns
/// the best genome, its schedule, and how many placements it made.
pub(crate) fn local_search(
    packer: &Packer,
    start: Genome,
    budget: usize,
) -> (Genome, Built, usize) {
    let n = start.order.len();
    let mut moves = Vec::with_capacity(6 * n);
    for j in 0..n {
        for up in [true, false] {
            moves.push(Move::Cores(j, up));
            moves.push(Move::Rank(j, up));
        }
    }
    for i in 0..n {
        for d in [1, 2] {
            if i + d < n {
                moves.push(Move::Swap(i, i + d));
            }
        }
    }
    let mut rng = SplitMix64::new(SEARCH_SEED);
    let mut g = start;
    let (mut best, mut before) = packer.build_traced(&g);
    let mut evals = n;
    while evals < budget {
        // Fisher–Yates with the fixed seed.
        for i in (1..moves.len()).rev() {
            let k = rng.below(i as u64 + 1) as usize;
            moves.swap(i, k);
        }
        let mut improved = false;
        for &mv in &moves {
            if evals >= budget {
                break;
            }
            let Some((g2, from)) = apply(&g, mv, |j| packer.most(j)) else {
                continue;
            };
            let (b2, placed) = packer.build_from(&g2, from, &best, &before);
            evals += placed;
            if b2.beats(&best) {
                (best, before) = packer.build_traced(&g2);
                evals += n;
                g = g2;
                improved = true;
                break;
            }
        }
        if !improved {
            break;
        }
    }
    (g, best, evals)
}
