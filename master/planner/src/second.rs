//! Critical-path trimming once every job is placed — the seed's "second moment"
//! (docs/DESIGN.md §S2.5).
//!
//! At placement each job is trimmed on its own, with the seed's threshold. Once the whole
//! schedule exists it is known which jobs make the makespan: the critical chain, from the
//! job that ends last back through the job whose end its start waited for on a shared
//! core. Each job on that chain is then shortened where the finished schedule leaves room:
//! trimmed to no threshold at all, or given an extra core that sits idle for the whole of
//! its run (its blocks are placed afresh on the larger set). After a change the schedule is
//! compacted — every job, in start order on the same cores, starts as soon as its cores
//! are free — which never starts a job later, and the change is kept only if the makespan
//! falls (or stays while the sum of finish times falls). Rounds repeat until nothing helps,
//! at most [`ROUNDS`] changes and [`TRIES`] jobs tried.

use super::improve::{Built, Placed};
use super::model::Instance;
use super::pack::{settle, Packer};
use super::trim::trim_step;
use super::work::{place_blocks, JobWork};

/// The most accepted changes (each costs one pass over the critical chain).
const ROUNDS: usize = 64;

/// The most jobs tried in all (each try places the job on up to 1 + [`EXTRA_HOSTS`] core
/// sets and compacts the schedule), so that long chains stay cheap.
const TRIES: usize = 256;

/// The most hosts whose idle core a critical job may try as an extra core.
const EXTRA_HOSTS: usize = 16;

/// Relative tolerance for "ends when the other starts".
const TOUCH: f64 = 1e-9;

/// Trims the critical chain of `built` until nothing shortens it; returns the result and
/// how many changes were kept.
pub(crate) fn trim_critical(packer: &Packer, mut built: Built) -> (Built, usize) {
    let inst = packer.instance();
    let mut kept = 0;
    let mut tries = 0;
    for _ in 0..ROUNDS {
        let mut changed = false;
        for job in critical_chain(inst, &built) {
            if tries == TRIES {
                return (built, kept);
            }
            tries += 1;
            if let Some(next) = shorten(packer, &built, job) {
                built = next;
                kept += 1;
                changed = true;
                break;
            }
        }
        if !changed {
            break;
        }
    }
    (built, kept)
}

/// The jobs of the critical chain, last first.
pub(crate) fn critical_chain(inst: &Instance, built: &Built) -> Vec<usize> {
    let n = built.jobs.len();
    let Some(mut j) = (0..n).max_by(|&a, &b| {
        built.jobs[a]
            .finish()
            .total_cmp(&built.jobs[b].finish())
            .then(b.cmp(&a))
    }) else {
        return Vec::new();
    };
    let mut chain = vec![j];
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); inst.total_cores()];
    for (k, p) in built.jobs.iter().enumerate() {
        for s in &p.work.slots {
            holders[s.core].push(k);
        }
    }
    while chain.len() < n {
        let start = built.jobs[j].start;
        let tol = TOUCH * start.max(1.0);
        let pred = built.jobs[j]
            .work
            .slots
            .iter()
            .flat_map(|s| holders[s.core].iter().copied())
            .find(|&k| k != j && (built.jobs[k].finish() - start).abs() <= tol);
        match pred {
            Some(k) if !chain.contains(&k) => {
                chain.push(k);
                j = k;
            }
            _ => break,
        }
    }
    chain
}

/// Every job at the same cores and in the same order per core, started as soon as its
/// cores are free. No job starts later than before if no job got longer.
pub(crate) fn compact(inst: &Instance, jobs: Vec<Placed>) -> Built {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].start.total_cmp(&jobs[b].start).then(a.cmp(&b)));
    let mut avail = vec![0.0f64; inst.total_cores()];
    let mut jobs = jobs;
    for j in order {
        let p = &mut jobs[j];
        let start = p
            .work
            .slots
            .iter()
            .map(|s| avail[s.core])
            .fold(0.0, f64::max);
        p.start = start;
        let end = p.finish();
        for s in &p.work.slots {
            avail[s.core] = end;
        }
    }
    Built::from_jobs(jobs)
}

/// Trims `work` with no threshold, dropping cores left empty.
fn trim_fully(inst: &Instance, mut work: JobWork) -> JobWork {
    let cap = 64 + 8 * inst.jobs()[work.job].blocks.len();
    for _ in 0..cap {
        if trim_step(inst, &mut work, 0.0).is_none() {
            break;
        }
    }
    work.drop_empty(inst);
    work
}

/// The best shorter form of `job` the finished schedule leaves room for, applied and
/// compacted, if it beats `built`.
fn shorten(packer: &Packer, built: &Built, job: usize) -> Option<Built> {
    let inst = packer.instance();
    let p = &built.jobs[job];
    let old = p.work.duration();
    let mut best: Option<JobWork> = None;
    let mut consider = |w: JobWork| {
        let d = w.duration();
        if d < old * (1.0 - 1e-9) && best.as_ref().is_none_or(|b| d < b.duration()) {
            best = Some(w);
        }
    };
    consider(trim_fully(inst, p.work.clone()));
    // An extra core idle over the job's whole current run stays idle over the shorter one.
    let cores: Vec<usize> = p.work.slots.iter().map(|s| s.core).collect();
    if cores.len() < packer.most(job) {
        let (from, to) = (p.start, p.finish());
        let mut busy = vec![false; inst.total_cores()];
        for (k, q) in built.jobs.iter().enumerate() {
            let (s, f) = (q.start, q.finish());
            if k != job && s < to && f > from {
                for sl in &q.work.slots {
                    busy[sl.core] = true;
                }
            }
        }
        // One idle core per host is enough: they are interchangeable for this job. Hosts
        // holding its data first, at most EXTRA_HOSTS of them, to bound the time per try.
        let has_data = |h: usize| {
            inst.jobs()[job]
                .blocks
                .iter()
                .any(|b| b.replicas.contains(&h))
        };
        let mut tried_host = vec![false; inst.hosts()];
        let mut extra: Vec<(bool, usize)> = Vec::new();
        for (c, &taken) in busy.iter().enumerate() {
            let h = inst.host_of(c);
            if taken || cores.contains(&c) || tried_host[h] {
                continue;
            }
            tried_host[h] = true;
            extra.push((!has_data(h), c));
        }
        extra.sort_unstable();
        for &(_, c) in extra.iter().take(EXTRA_HOSTS) {
            let mut set = cores.clone();
            set.push(c);
            let w = settle(inst, place_blocks(inst, job, &set, packer.blocks_of(job)));
            consider(trim_fully(inst, w));
        }
    }
    let work = best?;
    let mut jobs = built.jobs.clone();
    jobs[job].work = work;
    let next = compact(inst, jobs);
    next.beats(built).then_some(next)
}
