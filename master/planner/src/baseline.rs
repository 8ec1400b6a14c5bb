//! The baselines the planner must beat (docs/DESIGN.md §S2, "Baselines"; the patent's 轮转法 and
//! 加权法). Both take the jobs in input order and start each job as soon as all its cores
//! are free; neither searches.
//!
//! * **Round-robin** hands every job the same share of cores, `clamp(T / jobs, 1, 10)` (no
//!   more than its blocks), taken in turn from a cursor that cycles over all cores host by
//!   host; the job's blocks are dealt to its cores in turn, each reading a local replica if
//!   its core's host has one, else the first listed.
//! * **Capacity-weighted** gives each job cores in proportion to its share of the work
//!   (`data / speed`), takes the cores that are free earliest (ties: the host holding more
//!   of the job's data), and spreads the blocks by capacity: largest first, each to the core
//!   that would finish it first, transfers included.

use super::model::Instance;
use super::schedule::{BlockRead, Schedule};
use super::work::{place_blocks, JobWork, Slot, Timeline};

/// Round-robin baseline.
pub fn round_robin(inst: &Instance) -> Schedule {
    let t = inst.total_cores();
    let share = (t / inst.jobs().len()).clamp(1, inst.max_cores());
    let mut timeline = Timeline::new(inst);
    let mut cursor = 0;
    for (j, job) in inst.jobs().iter().enumerate() {
        let e = share.min(job.blocks.len());
        let mut slots: Vec<Slot> = (0..e)
            .map(|k| Slot {
                core: (cursor + k) % t,
                blocks: Vec::new(),
                time: 0.0,
            })
            .collect();
        cursor = (cursor + e) % t;
        for b in 0..job.blocks.len() {
            let slot = &mut slots[b % e];
            let replica = inst.best_replica(j, b, inst.host_of(slot.core));
            slot.blocks.push(BlockRead { block: b, replica });
        }
        let mut work = JobWork { job: j, slots };
        work.recompute(inst);
        timeline.commit(inst, &work);
    }
    finish(timeline)
}

/// Capacity-weighted baseline.
pub fn weighted(inst: &Instance) -> Schedule {
    let t = inst.total_cores();
    let total: f64 = inst.jobs().iter().map(|j| j.estimate()).sum();
    let mut timeline = Timeline::new(inst);
    for (j, job) in inst.jobs().iter().enumerate() {
        let share = (t as f64 * job.estimate() / total).round() as usize;
        let e = share.clamp(1, inst.max_cores().min(job.blocks.len()));
        let on_host = data_on_hosts(inst, j);
        let order = |&a: &usize, &b: &usize| {
            timeline
                .avail(a)
                .total_cmp(&timeline.avail(b))
                .then(on_host[inst.host_of(b)].total_cmp(&on_host[inst.host_of(a)]))
                .then(a.cmp(&b))
        };
        let mut cores: Vec<usize> = (0..t).collect();
        // The e first in a total order: select them in O(T), then sort only those.
        if e < t {
            cores.select_nth_unstable_by(e, order);
            cores.truncate(e);
        }
        cores.sort_by(order);
        let work = place_blocks(inst, j, &cores, &largest_first(inst, j));
        timeline.commit(inst, &work);
    }
    finish(timeline)
}

/// MB of job `job` with a replica on each host (a block with two replicas counts twice).
pub(crate) fn data_on_hosts(inst: &Instance, job: usize) -> Vec<f64> {
    let mut on = vec![0.0; inst.hosts()];
    for b in &inst.jobs()[job].blocks {
        for &h in &b.replicas {
            on[h] += b.size;
        }
    }
    on
}

/// The job's block indices, largest first (ties by index).
pub(crate) fn largest_first(inst: &Instance, job: usize) -> Vec<usize> {
    let blocks = &inst.jobs()[job].blocks;
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by(|&a, &b| blocks[b].size.total_cmp(&blocks[a].size).then(a.cmp(&b)));
    order
}

fn finish(timeline: Timeline) -> Schedule {
    // Every job was committed above, so this never falls back.
    timeline.into_schedule().unwrap_or_default()
}
