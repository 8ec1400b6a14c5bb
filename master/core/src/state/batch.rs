//! S2 data-local batches in the replicated state (docs/DESIGN.md §S2, "In the cluster"): a
//! batch is planned by the leader off the apply path and committed in one `SubmitBatch`
//! entry, which makes one job per input job and one task per planned core, each task pinned
//! to its slave with its blocks. Kept beside the jobs (not in `Job`/`Task`) so that plain
//! jobs carry nothing of it and older snapshots load unchanged.
//!
//! Gang placement at apply (all pending tasks of a batch job or none) and the whole-gang
//! preemption are in `batch_gang.rs`; the listing views in `batch_views.rs`.

use super::command::Outcome;
use super::model::Job;
use super::ClusterState;
use hetsched_common::{JobId, JobSpec, NodeId, TaskId, TaskState};
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

impl ClusterState {
    /// Everything kept of batches.
    pub fn batch_book(&self) -> &BatchBook {
        &self.batch
    }

    /// A batch task's pin and blocks (`None`: not a batch task).
    pub fn batch_task(&self, task: TaskId) -> Option<&BatchTask> {
        self.batch.tasks.get(&task)
    }

    /// Whether `job` is a batch job (its tasks are a gang).
    pub fn is_gang(&self, job: JobId) -> bool {
        self.batch.jobs.contains_key(&job)
    }

    /// Applies a planned batch: every job is checked first, so the batch is submitted
    /// whole or not at all.
    pub(super) fn submit_batch(&mut self, index: u64, at_ms: u64, spec: BatchSpec) -> Outcome {
        if let Err(why) = self.check_batch(&spec) {
            return Outcome::Rejected(why);
        }
        self.batch.next += 1;
        let id = self.batch.next;
        let mut jobs = Vec::with_capacity(spec.jobs.len());
        let mut all_tasks = Vec::new();
        for (i, j) in spec.jobs.into_iter().enumerate() {
            let (job, tasks) = match self.submit(index, at_ms, j.spec) {
                Outcome::Submitted { job, tasks } => (job, tasks),
                // Checked above: cannot happen; what applied so far stays consistent.
                other => return other,
            };
            for (t, bt) in tasks.iter().zip(j.tasks) {
                self.batch.tasks.insert(*t, bt);
            }
            self.batch.jobs.insert(
                job,
                BatchJob {
                    batch: id,
                    index: i as u32,
                    planned_start_s: j.planned_start_s,
                    planned_finish_s: j.planned_finish_s,
                    speed: j.speed,
                    blocks: j.blocks,
                },
            );
            jobs.push(job);
            all_tasks.extend(tasks);
        }
        self.batch.batches.insert(
            id,
            Batch {
                id,
                submitted_ms: at_ms,
                planned_makespan_s: spec.planned_makespan_s,
                hosts: spec.hosts,
                host_cores: spec.host_cores,
                transfer_speed: spec.transfer_speed,
                alpha: spec.alpha,
                jobs: jobs.clone(),
                replans: 0,
            },
        );
        Outcome::BatchSubmitted {
            batch: id,
            jobs,
            tasks: all_tasks,
        }
    }

    fn check_batch(&self, spec: &BatchSpec) -> Result<(), String> {
        if spec.jobs.is_empty() {
            return Err("a batch needs at least one job".into());
        }
        if spec.host_cores.len() != spec.hosts.len() {
            return Err("a batch needs a core count per host".into());
        }
        for (i, j) in spec.jobs.iter().enumerate() {
            j.spec
                .validate()
                .map_err(|e| format!("batch job {i}: {e}"))?;
            if j.spec.no_preempt || !j.spec.nodes.is_empty() {
                return Err(format!(
                    "batch job {i}: pins its tasks itself (no locality, no --no-preempt)"
                ));
            }
            if j.tasks.is_empty() || j.tasks.len() != j.spec.count as usize {
                return Err(format!("batch job {i}: one task per planned core"));
            }
            self.check_tasks(j.blocks.len(), &j.tasks)
                .map_err(|e| format!("batch job {i}: {e}"))?;
        }
        Ok(())
    }

    /// Every pin and replica is a registered node, every block index within the job.
    fn check_tasks(&self, blocks: usize, tasks: &[BatchTask]) -> Result<(), String> {
        for t in tasks {
            if !self.nodes.contains_key(&t.node) {
                return Err(format!("{} is not registered", t.node));
            }
            for b in &t.blocks {
                if b.block as usize >= blocks || !self.nodes.contains_key(&b.read_from) {
                    return Err(format!(
                        "block {} (read from {}) is unknown",
                        b.block, b.read_from
                    ));
                }
            }
        }
        Ok(())
    }

    /// Re-pins pending tasks of a batch job with new blocks (a planned slave was lost):
    /// every named task must be a pending task of the job, else nothing changes.
    pub(super) fn replan_batch_job(
        &mut self,
        job: JobId,
        tasks: Vec<(TaskId, BatchTask)>,
    ) -> Outcome {
        let Some(bj) = self.batch.jobs.get(&job) else {
            return Outcome::Rejected(format!("{job} is not a batch job"));
        };
        let batch = bj.batch;
        let blocks = bj.blocks.len();
        let stale = tasks.iter().any(|(t, _)| {
            self.tasks
                .get(t)
                .is_none_or(|t| t.job != job || t.status.state != TaskState::Pending)
        });
        if tasks.is_empty() || stale {
            return Outcome::Ignored(format!("re-plan of {job} is stale"));
        }
        let new: Vec<BatchTask> = tasks.iter().map(|(_, b)| b.clone()).collect();
        if let Err(why) = self.check_tasks(blocks, &new) {
            return Outcome::Rejected(why);
        }
        let n = tasks.len() as u32;
        for (t, b) in tasks {
            self.batch.tasks.insert(t, b);
        }
        if let Some(b) = self.batch.batches.get_mut(&batch) {
            b.replans += 1;
        }
        Outcome::BatchReplanned { job, tasks: n }
    }

    /// A collected job leaves the batch book; a batch with no job left goes too.
    pub(super) fn batch_forget_job(&mut self, job: JobId, tasks: &[TaskId]) {
        for t in tasks {
            self.batch.tasks.remove(t);
        }
        let Some(bj) = self.batch.jobs.remove(&job) else {
            return;
        };
        let empty = self
            .batch
            .batches
            .get(&bj.batch)
            .is_some_and(|b| b.jobs.iter().all(|j| !self.batch.jobs.contains_key(j)));
        if empty {
            self.batch.batches.remove(&bj.batch);
        }
    }

    /// The environment of a task's attempt: its job's, plus `HETSCHED_BLOCKS` for a batch
    /// task (docs/CONTRACT.md: `[{"job_block", "size_mb", "read_from"}]`).
    pub fn task_env(&self, task: TaskId, job: &Job) -> BTreeMap<String, String> {
        let mut env = job.spec.env.clone();
        if let Some(blocks) = self.task_blocks(task) {
            let json = serde_json::to_string(&blocks).unwrap_or_else(|_| "[]".into());
            env.insert(hetsched_common::protocol::BLOCKS_ENV.to_string(), json);
        }
        env
    }

    /// A batch task's blocks as `HETSCHED_BLOCKS` lists them.
    pub fn task_blocks(&self, task: TaskId) -> Option<Vec<hetsched_common::protocol::BlockRef>> {
        let bt = self.batch.tasks.get(&task)?;
        let job = self.tasks.get(&task)?.job;
        let bj = self.batch.jobs.get(&job)?;
        Some(
            bt.blocks
                .iter()
                .map(|b| hetsched_common::protocol::BlockRef {
                    job_block: b.block,
                    size_mb: bj.blocks.get(b.block as usize).map_or(0.0, |x| x.size_mb.0),
                    read_from: self
                        .nodes
                        .get(&b.read_from)
                        .map_or_else(|| b.read_from.to_string(), |n| n.name.clone()),
                })
                .collect(),
        )
    }
}
