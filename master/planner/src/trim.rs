//! Critical-path trimming (docs/DESIGN.md §S2 step 5): within one job, move and swap blocks off
//! its critical core — the core with the longest time — onto the other cores.
//!
//! Every accepted step makes the critical core strictly shorter and leaves every core it
//! touches strictly below the old critical time, so the job never gets longer. It also makes
//! the job's core times, sorted descending, strictly smaller lexicographically; there are
//! finitely many assignments, so trimming ends. A step cap guards against a bug anyway.

use super::model::Instance;
use super::schedule::BlockRead;
use super::work::JobWork;

/// What one trimming step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A block moved from the critical core to another.
    Move,
    /// A critical block traded places with a smaller one on another core.
    Swap,
}

/// How many moves and swaps trimming made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TrimStats {
    pub moves: usize,
    pub swaps: usize,
}

/// Relative margin a step must gain, so float noise can never count as progress.
const GAIN: f64 = 1e-12;

/// The patent's stopping threshold: half the estimated time (size / speed) of the job's
/// smallest block — below that no block move can help much.
pub(crate) fn threshold(inst: &Instance, job: usize) -> f64 {
    let j = &inst.jobs()[job];
    let smallest = j
        .blocks
        .iter()
        .map(|b| b.size)
        .fold(f64::INFINITY, f64::min);
    smallest / (2.0 * j.speed)
}

/// Trims `work` until no move or swap shortens its critical core.
pub(crate) fn trim(inst: &Instance, work: &mut JobWork) -> TrimStats {
    let th = threshold(inst, work.job);
    let cap = 64 + 8 * inst.jobs()[work.job].blocks.len();
    let mut stats = TrimStats::default();
    for _ in 0..cap {
        match trim_step(inst, work, th) {
            Some(Step::Move) => stats.moves += 1,
            Some(Step::Swap) => stats.swaps += 1,
            None => break,
        }
    }
    stats
}

/// One step: the first move that shortens the critical core, else the first swap; `None`
/// when the critical and the shortest core are within `th` or nothing helps.
pub(crate) fn trim_step(inst: &Instance, work: &mut JobWork, th: f64) -> Option<Step> {
    let c = Critical::of(inst, work, th)?;
    if c.try_move(inst, work, th) {
        return Some(Step::Move);
    }
    if c.try_swap(inst, work, th) {
        return Some(Step::Swap);
    }
    None
}

/// A job's critical core (the longest) and what a step may do about it.
struct Critical {
    /// Each core's time.
    times: Vec<f64>,
    /// The critical core and its time.
    crit: usize,
    ct: f64,
    /// A step must bring both cores it touches under this.
    limit: f64,
    /// The critical core's host.
    host_c: usize,
    /// Non-critical cores, least loaded first: they have the most room.
    targets: Vec<usize>,
    /// The critical core's block positions, smallest block first: small blocks fill gaps
    /// without making the target the new critical core.
    crit_pos: Vec<usize>,
}

impl Critical {
    /// `None` with fewer than two cores or when the critical and the shortest core are
    /// within `th`.
    fn of(inst: &Instance, work: &JobWork, th: f64) -> Option<Self> {
        let e = work.slots.len();
        if e < 2 {
            return None;
        }
        let job = work.job;
        let times: Vec<f64> = work.slots.iter().map(|s| s.time).collect();
        let crit = (0..e).fold(0, |m, i| if times[i] > times[m] { i } else { m });
        let ct = times[crit];
        let shortest = times.iter().copied().fold(f64::INFINITY, f64::min);
        if ct - shortest <= th {
            return None;
        }
        let size = |b: usize| inst.jobs()[job].blocks[b].size;
        let mut targets: Vec<usize> = (0..e).filter(|&i| i != crit).collect();
        targets.sort_by(|&a, &b| times[a].total_cmp(&times[b]).then(a.cmp(&b)));
        let mut crit_pos: Vec<usize> = (0..work.slots[crit].blocks.len()).collect();
        crit_pos.sort_by(|&a, &b| {
            let (ba, bb) = (
                work.slots[crit].blocks[a].block,
                work.slots[crit].blocks[b].block,
            );
            size(ba).total_cmp(&size(bb)).then(ba.cmp(&bb))
        });
        Some(Self {
            crit,
            ct,
            limit: ct - GAIN * ct,
            host_c: inst.host_of(work.slots[crit].core),
            times,
            targets,
            crit_pos,
        })
    }

    /// Moves the first critical block that fits on a target under the limit.
    fn try_move(&self, inst: &Instance, work: &mut JobWork, th: f64) -> bool {
        let (job, e, crit) = (work.job, work.slots.len(), self.crit);
        for &t in &self.targets {
            if self.ct - self.times[t] <= th {
                break;
            }
            let host_t = inst.host_of(work.slots[t].core);
            for &p in &self.crit_pos {
                let r = work.slots[crit].blocks[p];
                let out = inst.block_time(job, r.block, e, self.host_c, r.replica);
                let replica = inst.best_replica(job, r.block, host_t);
                let inn = inst.block_time(job, r.block, e, host_t, replica);
                if (self.ct - out).max(self.times[t] + inn) < self.limit {
                    work.slots[crit].blocks.remove(p);
                    work.slots[t].blocks.push(BlockRead {
                        block: r.block,
                        replica,
                    });
                    work.recompute(inst);
                    return true;
                }
            }
        }
        false
    }

    /// Swaps the first pair of blocks (critical, target) that brings both under the limit.
    fn try_swap(&self, inst: &Instance, work: &mut JobWork, th: f64) -> bool {
        let (job, e, crit) = (work.job, work.slots.len(), self.crit);
        let size = |b: usize| inst.jobs()[job].blocks[b].size;
        for &t in &self.targets {
            if self.ct - self.times[t] <= th {
                break;
            }
            let host_t = inst.host_of(work.slots[t].core);
            // The other core's blocks, largest first: trade a big critical block for the
            // largest smaller one that still helps.
            let mut t_pos: Vec<usize> = (0..work.slots[t].blocks.len()).collect();
            t_pos.sort_by(|&a, &b| {
                let (ba, bb) = (work.slots[t].blocks[a].block, work.slots[t].blocks[b].block);
                size(bb).total_cmp(&size(ba)).then(ba.cmp(&bb))
            });
            for &p in &self.crit_pos {
                let a = work.slots[crit].blocks[p];
                let a_out = inst.block_time(job, a.block, e, self.host_c, a.replica);
                let a_rep = inst.best_replica(job, a.block, host_t);
                let a_in = inst.block_time(job, a.block, e, host_t, a_rep);
                for &q in &t_pos {
                    let b = work.slots[t].blocks[q];
                    let b_out = inst.block_time(job, b.block, e, host_t, b.replica);
                    let b_rep = inst.best_replica(job, b.block, self.host_c);
                    let b_in = inst.block_time(job, b.block, e, self.host_c, b_rep);
                    let new_c = self.ct - a_out + b_in;
                    let new_t = self.times[t] - b_out + a_in;
                    if new_c.max(new_t) < self.limit {
                        work.slots[crit].blocks[p] = BlockRead {
                            block: b.block,
                            replica: b_rep,
                        };
                        work.slots[t].blocks[q] = BlockRead {
                            block: a.block,
                            replica: a_rep,
                        };
                        work.recompute(inst);
                        return true;
                    }
                }
            }
        }
        false
    }
}
