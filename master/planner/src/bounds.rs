//! The lower bound (docs/DESIGN.md §S2): no valid schedule finishes before it.
//!
//! `max( max over jobs of the job's best time on ≤ 10 cores, Σ over jobs of its work / T,
//! the capacity term )`.
//!
//! A job's exact best time is a partition problem, so we bound it from below. With `e`
//! cores the job's cores are busy, in total, at least its execution `data / (speed·g(e))`
//! plus the transfers no placement can avoid: its cores sit on at most `e` hosts, which
//! hold at most the `e` largest shares of its data (an overcount where a block has replicas
//! on several of them), so at least the rest crosses the network once. Its longest core
//! carries at least an `e`-th of that, and at least its largest block. The work term uses
//! the least total busy time over `e`, which is at least `data / speed` (g ≤ 1): with all
//! transfers free it is the naive `Σ data / speed / T`, and otherwise larger, never
//! smaller. The cores of T together can only be busy T times as long as the makespan.
//! The capacity term ([`capacity_bound`]) adds that a host's data can be read locally only
//! as fast as that host's own cores work.

use super::model::Instance;

/// The most MB of `job` that cores on `e` hosts could read locally: the sum of the `e`
/// largest shares of its data on hosts that have cores, capped at its data. Index `e`.
fn local_at_most(inst: &Instance, job: usize) -> Vec<f64> {
    let j = &inst.jobs()[job];
    let mut share = vec![0.0; inst.hosts()];
    for b in &j.blocks {
        for &h in &b.replicas {
            share[h] += b.size;
        }
    }
    let mut usable: Vec<f64> = share
        .into_iter()
        .zip(inst.cores_per_host())
        .filter(|&(_, &cores)| cores > 0)
        .map(|(s, _)| s)
        .collect();
    usable.sort_by(|a, b| b.total_cmp(a));
    let data = j.data();
    let mut out = vec![0.0];
    let mut sum = 0.0;
    for e in 1..=inst.max_cores() {
        sum += usable.get(e - 1).copied().unwrap_or(0.0);
        out.push(f64::min(sum, data));
    }
    out
}

/// Least total busy time of `job`'s cores with `e` cores: execution plus unavoidable
/// transfers.
fn busy_on(inst: &Instance, job: usize, e: usize, local: &[f64]) -> f64 {
    let j = &inst.jobs()[job];
    let data = j.data();
    data / (j.speed * inst.decay(e)) + inst.transfer_time((data - local[e]).max(0.0))
}

/// Lower bounds on job `job`'s duration with each number of cores: entry `e` for `e`
/// cores, `1 ≤ e ≤ max_cores` (entry 0 is unused).
pub(crate) fn job_bounds_by_cores(inst: &Instance, job: usize) -> Vec<f64> {
    let local = local_at_most(inst, job);
    (0..=inst.max_cores())
        .map(|e| match e {
            0 => f64::INFINITY,
            e => job_bound_with(inst, job, e, &local),
        })
        .collect()
}

fn job_bound_with(inst: &Instance, job: usize, e: usize, local: &[f64]) -> f64 {
    let j = &inst.jobs()[job];
    let largest = j.blocks.iter().map(|b| b.size).fold(0.0, f64::max);
    (busy_on(inst, job, e, local) / e as f64).max(largest / (j.speed * inst.decay(e)))
}

/// A lower bound on job `job`'s duration on any allowed number of cores.
pub fn job_bound(inst: &Instance, job: usize) -> f64 {
    let local = local_at_most(inst, job);
    (1..=inst.max_cores())
        .map(|e| job_bound_with(inst, job, e, &local))
        .fold(f64::INFINITY, f64::min)
}

/// The lower bound on the makespan of any valid schedule of `inst`.
pub fn lower_bound(inst: &Instance) -> f64 {
    let mut longest_job: f64 = 0.0;
    let mut work = 0.0;
    for job in 0..inst.jobs().len() {
        let local = local_at_most(inst, job);
        let (mut best_time, mut least_busy) = (f64::INFINITY, f64::INFINITY);
        for e in 1..=inst.max_cores() {
            best_time = best_time.min(job_bound_with(inst, job, e, &local));
            least_busy = least_busy.min(busy_on(inst, job, e, &local));
        }
        longest_job = longest_job.max(best_time);
        work += least_busy;
    }
    longest_job
        .max(work / inst.total_cores() as f64)
        .max(capacity_bound(inst))
}

/// The least `M` for which the cores could be busy long enough, counting that a host can
/// read locally only as much as its own cores can process in `M`.
///
/// A block whose only replica is on host `h` is read locally only by `h`'s cores, and
/// they are busy at most `cores(h)·M`, its execution taking at least `size / speed` (g ≤ 1);
/// every other such block crosses the network (`size / s_t` more). Per host, the blocks
/// kept local are best chosen as a fractional knapsack — most transfer saved per second
/// of execution, i.e. the fastest jobs' blocks first. Blocks with several replicas are
/// counted as local for free (a relaxation, so the bound stays valid). Then the least
/// total busy time must fit in `T·M`; it falls as `M` grows, so `M` is found by bisection.
pub(crate) fn capacity_bound(inst: &Instance) -> f64 {
    let t = inst.total_cores() as f64;
    // Per host: (speed, MB) of the single-replica data there, fastest first.
    let mut single: Vec<Vec<(f64, f64)>> = vec![Vec::new(); inst.hosts()];
    let mut exec = 0.0;
    for j in inst.jobs() {
        exec += j.data() / j.speed;
        for b in &j.blocks {
            if let [h] = b.replicas[..] {
                single[h].push((j.speed, b.size));
            }
        }
    }
    for list in &mut single {
        list.sort_by(|a, b| b.0.total_cmp(&a.0));
    }
    let busy = |m: f64| -> f64 {
        let mut remote = 0.0;
        for (h, list) in single.iter().enumerate() {
            let mut room = inst.cores_per_host()[h] as f64 * m;
            for &(speed, size) in list {
                let local = size.min(room * speed);
                room -= local / speed;
                remote += size - local;
            }
        }
        exec + inst.transfer_time(remote)
    };
    // busy(M) ≤ busy(0), so M = busy(0) / T always fits.
    let (mut lo, mut hi) = (0.0, busy(0.0) / t);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if busy(mid) <= t * mid {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    lo
}
