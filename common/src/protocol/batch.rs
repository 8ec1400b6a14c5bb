//! S2 data-local batches in the cluster (docs/DESIGN.md §S2, docs/CONTRACT.md "Batch jobs"):
//! what `submit-batch` sends, and what `submit-batch --json` and `batch --json` print.
//!
//! The client sends the batch file's text as it is: the leader parses and plans it against
//! the live cluster (its up slaves and their free CPUs), so the CLI needs no view of the
//! cluster and a file is read the same however it reaches the leader.

use crate::{JobId, NodeId, TaskId};
use serde::{Deserialize, Serialize};

/// Name of the environment variable carrying a batch task's blocks (docs/CONTRACT.md).
pub const BLOCKS_ENV: &str = "HETSCHED_BLOCKS";

/// One block a batch task processes, as `HETSCHED_BLOCKS` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockRef {
    /// The block's index within its job (from 0, in the input's order).
    pub job_block: u32,
    /// Its size, MB.
    pub size_mb: f64,
    /// The slave (by name) holding the replica the plan reads.
    pub read_from: String,
}

/// `submit-batch FILE [-- CMD...]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSubmit {
    /// The batch file's text: the course's plain-text format or the JSON format with
    /// replicas (plus `hosts`, and per job `command` and `name`).
    pub file: String,
    /// The command of every job that names none (`-- CMD...`); empty: none given.
    #[serde(default)]
    pub command: Vec<String>,
    /// Submitting user.
    #[serde(default)]
    pub user: String,
}

/// `submit-batch --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchSubmitted {
    /// The batch (display form `batch-N`).
    pub batch_id: u64,
    /// Its jobs, in the input's order.
    pub jobs: Vec<JobId>,
    /// How many tasks (planned cores) it made.
    pub tasks: u32,
    /// The plan's makespan, seconds.
    pub planned_makespan_s: f64,
}

/// `batch BATCH --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// The batch.
    pub batch_id: u64,
    /// The plan's makespan, seconds.
    pub planned_makespan_s: f64,
    /// From submission to the last job's end, seconds; `None` while a job is open.
    pub actual_makespan_s: Option<f64>,
    /// Leader's clock at submission, ms since the Unix epoch.
    pub submitted_ms: u64,
    /// How many times a job of it was re-planned after a planned slave was lost.
    #[serde(default)]
    pub replans: u32,
    /// Its jobs, in the input's order.
    pub jobs: Vec<BatchJobInfo>,
}

/// One job of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchJobInfo {
    /// The job.
    pub job_id: JobId,
    /// Its index in the input (from 0).
    pub index: u32,
    /// Job state, as `jobs` shows it.
    pub state: String,
    /// Planned start, seconds after submission.
    pub planned_start_s: f64,
    /// Planned finish, seconds after submission.
    pub planned_finish_s: f64,
    /// When its last task ended, seconds after submission (`None` while open).
    pub actual_finish_s: Option<f64>,
    /// Its tasks: one per planned core.
    pub tasks: Vec<BatchTaskInfo>,
}

/// One task (planned core) of a batch job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchTaskInfo {
    /// The task.
    pub task_id: TaskId,
    /// The slave it is pinned to.
    pub node: NodeId,
    /// Its blocks (what `HETSCHED_BLOCKS` holds).
    pub blocks: Vec<BlockRef>,
}
