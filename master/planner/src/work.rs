//! The planner's working form of a job on its cores, shared by the planner and the
//! baselines: block placement and the timeline of when each core is free.

use super::model::Instance;
use super::schedule::{BlockRead, CoreWork, JobPlan, Schedule};
use std::collections::BTreeSet;

/// One core of a job being planned.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Slot {
    /// Global core id.
    pub core: usize,
    /// Blocks in processing order.
    pub blocks: Vec<BlockRead>,
    /// The core's time under the job's current core count.
    pub time: f64,
}

/// A job's cores and blocks, before it gets a start time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JobWork {
    pub job: usize,
    pub slots: Vec<Slot>,
}

impl JobWork {
    /// The job's duration: its longest core.
    pub fn duration(&self) -> f64 {
        self.slots.iter().map(|s| s.time).fold(0.0, f64::max)
    }

    /// Recomputes every core's time (needed whenever the core count changes g(e)).
    pub fn recompute(&mut self, inst: &Instance) {
        let e = self.slots.len();
        for s in &mut self.slots {
            let host = inst.host_of(s.core);
            s.time = s
                .blocks
                .iter()
                .map(|r| inst.block_time(self.job, r.block, e, host, r.replica))
                .sum();
        }
    }

    /// Drops cores left without blocks: they only add decay. Every remaining core gets
    /// faster (g(e − 1) > g(e)), so the job never gets longer. Returns whether any went.
    pub fn drop_empty(&mut self, inst: &Instance) -> bool {
        let before = self.slots.len();
        self.slots.retain(|s| !s.blocks.is_empty());
        let dropped = self.slots.len() != before;
        if dropped {
            self.recompute(inst);
        }
        dropped
    }

    /// The job's plan once it has a start time.
    pub fn to_plan(&self, inst: &Instance, start: f64) -> JobPlan {
        JobPlan {
            start,
            cores: self
                .slots
                .iter()
                .map(|s| CoreWork {
                    core: inst.core_ref(s.core),
                    blocks: s.blocks.clone(),
                })
                .collect(),
        }
    }
}

/// Places `job`'s blocks on `cores`, taking blocks in `order` (the planner passes largest
/// first, as in LPT, so the small blocks fill the gaps at the end). Each block goes to the
/// core where the core's time after it — transfer + execution added to what it already
/// has — is least; on a tie, a core holding a local replica, then the less loaded core, then
/// the first. Because a remote read adds its transfer time, local replicas win unless their
/// cores are loaded (docs/DESIGN.md §S2 step 3; the patent's "least impact on the job's time").
pub(crate) fn place_blocks(
    inst: &Instance,
    job: usize,
    cores: &[usize],
    order: &[usize],
) -> JobWork {
    let e = cores.len();
    let mut slots: Vec<Slot> = cores
        .iter()
        .map(|&core| Slot {
            core,
            blocks: Vec::new(),
            time: 0.0,
        })
        .collect();
    for &block in order {
        // (finish, remote, load, slot index, replica, cost)
        let mut best: Option<(f64, bool, f64, usize, usize, f64)> = None;
        for (i, s) in slots.iter().enumerate() {
            let host = inst.host_of(s.core);
            let replica = inst.best_replica(job, block, host);
            let cost = inst.block_time(job, block, e, host, replica);
            let cand = (s.time + cost, replica != host, s.time, i, replica, cost);
            let better = match &best {
                None => true,
                Some(b) => cand
                    .0
                    .total_cmp(&b.0)
                    .then(cand.1.cmp(&b.1))
                    .then(cand.2.total_cmp(&b.2))
                    .then(cand.3.cmp(&b.3))
                    .is_lt(),
            };
            if better {
                best = Some(cand);
            }
        }
        if let Some((_, _, _, i, replica, cost)) = best {
            slots[i].blocks.push(BlockRead { block, replica });
            slots[i].time += cost;
        }
    }
    JobWork { job, slots }
}

/// When each core is next free, and the plans committed so far. Jobs are appended: a job
/// starts when the last of its cores is free, holds them all until its longest core ends.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    avail: Vec<f64>,
    /// Each host's cores ordered by (free time, id), so the planner finds a host's earliest
    /// free cores without scanning every core of the cluster. Free times are ≥ 0, where
    /// the bits of an f64 order like its value.
    by_host: Vec<BTreeSet<(u64, usize)>>,
    /// All cores ordered by (free time, id) — (free time, host, core), ids running host by
    /// host — for the planner's earliest cores in O(log T).
    all: BTreeSet<(u64, usize)>,
    plans: Vec<Option<JobPlan>>,
}

impl Timeline {
    pub fn new(inst: &Instance) -> Self {
        let mut by_host = vec![BTreeSet::new(); inst.hosts()];
        for c in 0..inst.total_cores() {
            by_host[inst.host_of(c)].insert((0f64.to_bits(), c));
        }
        Self {
            avail: vec![0.0; inst.total_cores()],
            by_host,
            all: (0..inst.total_cores())
                .map(|c| (0f64.to_bits(), c))
                .collect(),
            plans: vec![None; inst.jobs().len()],
        }
    }

    /// When core `c` is next free.
    pub fn avail(&self, c: usize) -> f64 {
        self.avail[c]
    }

    /// Sets when core `c` (on `host`) is next free.
    pub fn set_avail(&mut self, host: usize, c: usize, t: f64) {
        self.by_host[host].remove(&(self.avail[c].to_bits(), c));
        self.by_host[host].insert((t.to_bits(), c));
        self.all.remove(&(self.avail[c].to_bits(), c));
        self.all.insert((t.to_bits(), c));
        self.avail[c] = t;
    }

    /// Host `h`'s cores, earliest free first (ties by id).
    pub fn by_avail(&self, h: usize) -> impl Iterator<Item = usize> + '_ {
        self.by_host[h].iter().map(|&(_, c)| c)
    }

    /// All cores, earliest free first (ties by host, then core).
    pub fn earliest(&self) -> impl Iterator<Item = usize> + '_ {
        self.all.iter().map(|&(_, c)| c)
    }

    /// The earliest time all of `cores` are free.
    pub fn start_of(&self, cores: impl IntoIterator<Item = usize>) -> f64 {
        cores.into_iter().map(|c| self.avail[c]).fold(0.0, f64::max)
    }

    /// Commits a job at the earliest start its cores allow; returns its finish time.
    pub fn commit(&mut self, inst: &Instance, work: &JobWork) -> f64 {
        let start = self.start_of(work.slots.iter().map(|s| s.core));
        let end = start + work.duration();
        for s in &work.slots {
            self.set_avail(inst.host_of(s.core), s.core, end);
        }
        self.plans[work.job] = Some(work.to_plan(inst, start));
        end
    }

    /// The schedule, if every job was committed.
    pub fn into_schedule(self) -> Option<Schedule> {
        let jobs = self.plans.into_iter().collect::<Option<Vec<_>>>()?;
        Some(Schedule { jobs })
    }
}
