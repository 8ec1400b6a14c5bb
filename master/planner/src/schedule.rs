//! Schedules and the validator, which recomputes a schedule's makespan from the model
//! alone, so that the planner's own bookkeeping is never trusted (docs/DESIGN.md §S2).

use super::model::{CoreRef, Instance};
use serde::Serialize;
use thiserror::Error;

/// One block a core processes, and the replica it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BlockRead {
    /// Block index within the job.
    pub block: usize,
    /// Host whose replica is read (the core's own host means no transfer).
    pub replica: usize,
}

/// The work of one core for one job, in processing order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoreWork {
    /// The core.
    pub core: CoreRef,
    /// Its blocks, in order.
    pub blocks: Vec<BlockRead>,
}

/// Where and when one job runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobPlan {
    /// Start time, seconds; all the job's cores start together.
    pub start: f64,
    /// The job's cores (1 to 10) and their blocks.
    pub cores: Vec<CoreWork>,
}

/// A schedule: entry `i` places job `i` of the instance.
#[derive(Clone, Debug, PartialEq, Default, Serialize)]
pub struct Schedule {
    /// One plan per job, in the instance's job order.
    pub jobs: Vec<JobPlan>,
}

/// A schedule's timing as the model computes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Finish time of each job: start + its longest core.
    pub finish: Vec<f64>,
    /// Time of each core of each job (same shape as the schedule).
    pub core_times: Vec<Vec<f64>>,
    /// The largest finish time.
    pub makespan: f64,
}

/// Why a schedule is invalid.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ScheduleError {
    /// The schedule does not have one entry per job.
    #[error("schedule has {got} jobs, the instance {expected}")]
    JobCount {
        /// Jobs in the instance.
        expected: usize,
        /// Entries in the schedule.
        got: usize,
    },
    /// A job's start is negative or not finite.
    #[error("job {job}: start time {start} is not a finite time >= 0")]
    BadStart {
        /// Job index.
        job: usize,
        /// The start given.
        start: f64,
    },
    /// A job has no cores.
    #[error("job {job} has no cores")]
    NoCores {
        /// Job index.
        job: usize,
    },
    /// A job has more cores than the model allows.
    #[error("job {job} has {cores} cores, at most {max} are allowed")]
    TooManyCores {
        /// Job index.
        job: usize,
        /// Cores given.
        cores: usize,
        /// The cap (ten, or fewer where g would not stay positive or the cluster is smaller).
        max: usize,
    },
    /// A core that does not exist.
    #[error("job {job}: core {core:?} does not exist")]
    NoSuchCore {
        /// Job index.
        job: usize,
        /// The core named.
        core: CoreRef,
    },
    /// A core listed twice for one job.
    #[error("job {job}: core {core:?} is listed twice")]
    CoreTwice {
        /// Job index.
        job: usize,
        /// The core.
        core: CoreRef,
    },
    /// A block index past the job's blocks.
    #[error("job {job}: block {block} does not exist")]
    NoSuchBlock {
        /// Job index.
        job: usize,
        /// Block index given.
        block: usize,
    },
    /// A block processed twice.
    #[error("job {job}: block {block} is processed twice")]
    BlockTwice {
        /// Job index.
        job: usize,
        /// Block index.
        block: usize,
    },
    /// A block never processed.
    #[error("job {job}: block {block} is never processed")]
    BlockMissing {
        /// Job index.
        job: usize,
        /// Block index.
        block: usize,
    },
    /// A read from a host that holds no replica of the block.
    #[error("job {job}, block {block}: host {host} holds no replica of it")]
    NoSuchReplica {
        /// Job index.
        job: usize,
        /// Block index.
        block: usize,
        /// Host named as the replica.
        host: usize,
    },
    /// Two jobs hold one core at the same time.
    #[error("core {core:?} is used by jobs {first} and {second} at once")]
    CoreOverlap {
        /// The core.
        core: CoreRef,
        /// The job that starts first.
        first: usize,
        /// The job that starts while the first still holds the core.
        second: usize,
    },
}

/// Checks `schedule` against `inst` and recomputes its timing from the model.
pub fn validate(inst: &Instance, schedule: &Schedule) -> Result<Evaluation, ScheduleError> {
    let jobs = inst.jobs();
    if schedule.jobs.len() != jobs.len() {
        return Err(ScheduleError::JobCount {
            expected: jobs.len(),
            got: schedule.jobs.len(),
        });
    }
    let mut finish = Vec::with_capacity(jobs.len());
    let mut core_times = Vec::with_capacity(jobs.len());
    // (start, finish, job) per global core id, for the overlap check.
    let mut holds: Vec<Vec<(f64, f64, usize)>> = vec![Vec::new(); inst.total_cores()];
    for (j, plan) in schedule.jobs.iter().enumerate() {
        let ids = check_cores(inst, j, plan)?;
        let times = block_times(inst, j, plan)?;
        let end = plan.start + times.iter().copied().fold(0.0, f64::max);
        for &id in &ids {
            holds[id].push((plan.start, end, j));
        }
        finish.push(end);
        core_times.push(times);
    }
    check_overlaps(inst, &mut holds)?;
    let makespan = finish.iter().copied().fold(0.0, f64::max);
    Ok(Evaluation {
        finish,
        core_times,
        makespan,
    })
}

/// Job `j`'s start and cores: a start in time, at least one core and at most the most a job
/// may use, each one that exists and is named once. Returns their global ids.
fn check_cores(inst: &Instance, j: usize, plan: &JobPlan) -> Result<Vec<usize>, ScheduleError> {
    if !(plan.start.is_finite() && plan.start >= 0.0) {
        return Err(ScheduleError::BadStart {
            job: j,
            start: plan.start,
        });
    }
    let e = plan.cores.len();
    if e == 0 {
        return Err(ScheduleError::NoCores { job: j });
    }
    if e > inst.max_cores() {
        return Err(ScheduleError::TooManyCores {
            job: j,
            cores: e,
            max: inst.max_cores(),
        });
    }
    let mut ids = Vec::with_capacity(e);
    for w in &plan.cores {
        let id = inst.core_id(w.core).ok_or(ScheduleError::NoSuchCore {
            job: j,
            core: w.core,
        })?;
        if ids.contains(&id) {
            return Err(ScheduleError::CoreTwice {
                job: j,
                core: w.core,
            });
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Each core's busy time in job `j`: every block read exactly once, from a host that holds
/// a replica of it.
fn block_times(inst: &Instance, j: usize, plan: &JobPlan) -> Result<Vec<f64>, ScheduleError> {
    let blocks = &inst.jobs()[j].blocks;
    let e = plan.cores.len();
    let mut seen = vec![false; blocks.len()];
    let mut times = Vec::with_capacity(e);
    for w in &plan.cores {
        let mut t = 0.0;
        for r in &w.blocks {
            let block = blocks.get(r.block).ok_or(ScheduleError::NoSuchBlock {
                job: j,
                block: r.block,
            })?;
            if std::mem::replace(&mut seen[r.block], true) {
                return Err(ScheduleError::BlockTwice {
                    job: j,
                    block: r.block,
                });
            }
            if !block.replicas.contains(&r.replica) {
                return Err(ScheduleError::NoSuchReplica {
                    job: j,
                    block: r.block,
                    host: r.replica,
                });
            }
            t += inst.block_time(j, r.block, e, w.core.host, r.replica);
        }
        times.push(t);
    }
    if let Some(b) = seen.iter().position(|s| !s) {
        return Err(ScheduleError::BlockMissing { job: j, block: b });
    }
    Ok(times)
}

/// No core held by two jobs at once.
fn check_overlaps(
    inst: &Instance,
    holds: &mut [Vec<(f64, f64, usize)>],
) -> Result<(), ScheduleError> {
    for (id, list) in holds.iter_mut().enumerate() {
        list.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));
        for pair in list.windows(2) {
            let (_, end, first) = pair[0];
            let (start, _, second) = pair[1];
            // A relative tolerance: the planner starts a job exactly when its cores' previous
            // job ends, and the two sums may differ in the last bits.
            if start < end - OVERLAP_TOLERANCE * end.max(1.0) {
                return Err(ScheduleError::CoreOverlap {
                    core: inst.core_ref(id),
                    first,
                    second,
                });
            }
        }
    }
    Ok(())
}

/// Relative slack of the overlap check.
const OVERLAP_TOLERANCE: f64 = 1e-9;
