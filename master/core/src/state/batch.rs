//! S2 data-local batches in the replicated state (docs/DESIGN.md §S2, "In the cluster"): a
//! batch is planned by the leader off the apply path and committed in one `SubmitBatch`
//! entry, which makes one job per input job and one task per planned core, each task pinned
//! to its slave with its blocks. Kept beside the jobs (not in `Job`/`Task`) so that plain
//! jobs carry nothing of it and older snapshots load unchanged.
//!
//! Submitting a batch (checked whole, then one job per input job) is a submit rule
//! (`submit.rs`); gang placement at apply (all pending tasks of a batch job or none) and the
//! whole-gang preemption are plan rules (`plan.rs`); the listing views are in `views.rs`.

use hetsched_common::{JobId, JobSpec, NodeId, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A finite float that may sit in the replicated state (which is `Eq`): every value comes
/// from a validated planner input or output, never NaN.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Real(pub f64);

// NaN never reaches the state (see above), so equality is reflexive.
impl Eq for Real {}

/// One block of a batch job, as the input gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchBlock {
    /// Size, MB.
    pub size_mb: Real,
    /// Hosts holding a replica (indices into the batch's hosts).
    pub replicas: Vec<u32>,
}

/// One block a task processes: its index in the job and the host whose replica it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskBlock {
    /// Index in the job's blocks.
    pub block: u32,
    /// The slave whose replica is read.
    pub read_from: NodeId,
}

/// One task (planned core) of a batch job: where it runs and what it processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchTask {
    /// The slave it is pinned to.
    pub node: NodeId,
    /// Its blocks.
    pub blocks: Vec<TaskBlock>,
}

/// One job of a batch as the leader planned it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchJobSpec {
    /// The job (`count` = the number of planned cores).
    pub spec: JobSpec,
    /// Planned start and finish, seconds after submission.
    pub planned_start_s: Real,
    /// Planned finish.
    pub planned_finish_s: Real,
    /// Computation speed, MB/s.
    pub speed: Real,
    /// Its blocks.
    pub blocks: Vec<BatchBlock>,
    /// One per planned core, in task index order.
    pub tasks: Vec<BatchTask>,
}

/// A planned batch: what `SubmitBatch` carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSpec {
    /// The plan's makespan, seconds.
    pub planned_makespan_s: Real,
    /// The slave of each host of the input.
    pub hosts: Vec<NodeId>,
    /// Cores of each host the plan used.
    pub host_cores: Vec<u32>,
    /// Transfer speed between hosts, MB/s (may be infinite: single-host inputs).
    pub transfer_speed: Real,
    /// Multi-core decay.
    pub alpha: Real,
    /// Its jobs, in the input's order.
    pub jobs: Vec<BatchJobSpec>,
}

/// A batch as the state keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Id (display `batch-N`).
    pub id: u64,
    /// Leader's clock at submission.
    pub submitted_ms: u64,
    /// The plan's makespan, seconds.
    pub planned_makespan_s: Real,
    /// Host → slave.
    pub hosts: Vec<NodeId>,
    /// Cores of each host the plan used.
    pub host_cores: Vec<u32>,
    /// Transfer speed, MB/s.
    pub transfer_speed: Real,
    /// Multi-core decay.
    pub alpha: Real,
    /// Its jobs, in the input's order.
    pub jobs: Vec<JobId>,
    /// Re-plans after a planned slave was lost.
    pub replans: u32,
}

/// A batch job's planning data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchJob {
    /// Its batch.
    pub batch: u64,
    /// Index in the input.
    pub index: u32,
    /// Planned start, seconds after the batch's submission.
    pub planned_start_s: Real,
    /// Planned finish.
    pub planned_finish_s: Real,
    /// Speed, MB/s.
    pub speed: Real,
    /// Its blocks.
    pub blocks: Vec<BatchBlock>,
}

/// Everything the state keeps of batches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchBook {
    /// Batches by id.
    pub batches: BTreeMap<u64, Batch>,
    /// Batch jobs.
    pub jobs: BTreeMap<JobId, BatchJob>,
    /// Batch tasks: pin and blocks.
    pub tasks: BTreeMap<TaskId, BatchTask>,
    /// Last batch id handed out.
    pub next: u64,
}

impl BatchBook {
    /// Whether `job` is a batch job (its tasks are a gang).
    pub fn is_gang(&self, job: JobId) -> bool {
        self.jobs.contains_key(&job)
    }

    /// Hands out the next batch id.
    pub(super) fn allocate_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Records job `job` (with `tasks`, in index order) as job `index` of batch `batch`, as
    /// `planned` (whose job spec went to the job book).
    pub(super) fn add_job(
        &mut self,
        batch: u64,
        index: u32,
        job: JobId,
        tasks: &[TaskId],
        planned: BatchJobSpec,
    ) {
        for (t, bt) in tasks.iter().zip(planned.tasks) {
            self.tasks.insert(*t, bt);
        }
        self.jobs.insert(
            job,
            BatchJob {
                batch,
                index,
                planned_start_s: planned.planned_start_s,
                planned_finish_s: planned.planned_finish_s,
                speed: planned.speed,
                blocks: planned.blocks,
            },
        );
    }

    /// Records batch `id` of `jobs`, submitted at `at_ms` as `spec` plans it (its jobs
    /// recorded with [`add_job`](Self::add_job)).
    pub(super) fn add_batch(&mut self, id: u64, at_ms: u64, spec: BatchSpec, jobs: Vec<JobId>) {
        self.batches.insert(
            id,
            Batch {
                id,
                submitted_ms: at_ms,
                planned_makespan_s: spec.planned_makespan_s,
                hosts: spec.hosts,
                host_cores: spec.host_cores,
                transfer_speed: spec.transfer_speed,
                alpha: spec.alpha,
                jobs,
                replans: 0,
            },
        );
    }

    /// Re-pins tasks of batch job `job` (checked by the caller) and counts a re-plan of its
    /// batch; returns how many tasks.
    pub(super) fn repin(&mut self, job: JobId, tasks: Vec<(TaskId, BatchTask)>) -> u32 {
        let n = tasks.len() as u32;
        for (t, b) in tasks {
            self.tasks.insert(t, b);
        }
        let batch = self.jobs.get(&job).map(|bj| bj.batch);
        if let Some(b) = batch.and_then(|b| self.batches.get_mut(&b)) {
            b.replans += 1;
        }
        n
    }

    /// A collected job leaves the batch book; a batch with no job left goes too.
    pub(super) fn forget_job(&mut self, job: JobId, tasks: &[TaskId]) {
        for t in tasks {
            self.tasks.remove(t);
        }
        let Some(bj) = self.jobs.remove(&job) else {
            return;
        };
        let empty = self
            .batches
            .get(&bj.batch)
            .is_some_and(|b| b.jobs.iter().all(|j| !self.jobs.contains_key(j)));
        if empty {
            self.batches.remove(&bj.batch);
        }
    }
}
