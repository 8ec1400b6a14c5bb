//! Why a task waits, and `explain`'s answer (docs/CONTRACT.md, "Waiting reasons").
//!
//! The scheduler stage that stopped a task names one reason from a closed list
//! ([`WAIT_REASONS`]) with a free-text detail; the leader keeps the latest reasons outside
//! the log and attaches them to listings (`tasks --json` `"waiting"`). `explain` adds each
//! node's verdict, what preemption could free and the task's place in its queue.

use crate::{NodeId, TaskId};
use serde::{Deserialize, Serialize};

/// Every waiting reason, as `tasks --json` `"waiting": {"reason"}` names it.
pub const WAIT_REASONS: [&str; 14] = [
    "resources",
    "quota",
    "priority",
    "fair-share",
    "pool",
    "engine",
    "locality",
    "drained",
    "reserved",
    "gang",
    "backoff",
    "blocked",
    "dependency",
    "throttle",
];

/// Why a waiting task waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingInfo {
    /// One of [`WAIT_REASONS`].
    pub reason: String,
    /// What the stage found, in words (dimension and node counts, the quota, ...).
    pub detail: String,
}

impl WaitingInfo {
    /// A reason with its detail.
    pub fn new(reason: &str, detail: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            detail: detail.into(),
        }
    }
}

/// Whether `name` is a waiting reason (for `--reason` filters).
pub fn is_wait_reason(name: &str) -> bool {
    WAIT_REASONS.contains(&name)
}

/// One node's verdict on a task (`explain --json` `"nodes"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// The node's id.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// `fits`, or the check that failed: `down`, `drained`, `partition`, `locality`,
    /// `containers` (a container job, issue 52), `cpus`, `mem`, `gpus`, `gpu-model`, `engine`,
    /// `reserved`.
    pub verdict: String,
    /// By how much, in words.
    pub detail: String,
}

/// What preemption could do for a task (`explain --json` `"preemption"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionVerdict {
    /// Whether stopping lower-priority work would make room now.
    pub possible: bool,
    /// The node it would make room on.
    pub node: Option<NodeId>,
    /// The tasks it would stop.
    pub victims: Vec<TaskId>,
    /// Why it would or would not happen.
    pub detail: String,
}

/// `explain TASK --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainInfo {
    /// The task.
    pub task: TaskId,
    /// Its state (`pending`, `assigned`, ...).
    #[serde(default)]
    pub state: String,
    /// Why it waits (`None`: it does not wait).
    pub waiting: Option<WaitingInfo>,
    /// One verdict per registered node.
    pub nodes: Vec<NodeVerdict>,
    /// What preemption could free.
    pub preemption: PreemptionVerdict,
    /// Its place in the scheduler's queue order (1: next), or in its slave's local queue;
    /// `None` when it does not wait.
    pub queue_position: Option<u64>,
    /// Its job.
    #[serde(default)]
    pub job_id: Option<crate::JobId>,
    /// When its job was submitted, ms since the Unix epoch (leader clock).
    #[serde(default)]
    pub submitted_ms: Option<u64>,
    /// When its current attempt started, ms since the Unix epoch (`None`: not running).
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// Every attempt so far and the node it went to, oldest first.
    #[serde(default)]
    pub attempts: Vec<AttemptInfo>,
    /// Issue 51: each job it follows, with that job's state and whether it is met.
    #[serde(default)]
    pub dependencies: Vec<DependencyInfo>,
}

/// One dependency of a task (`explain --json` `"dependencies"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyInfo {
    /// The spec key: `after`, `after_any`, `after_fail` or `after_each`.
    pub kind: String,
    /// The job it follows.
    pub job: crate::JobId,
    /// That job's state (for `after_each`, the state of its task with the same index).
    pub state: String,
    /// `met`, `waiting` or `never` (can no longer be met).
    pub status: String,
}

/// One attempt of a task (`explain --json` `"attempts"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptInfo {
    /// The attempt (from 1).
    pub attempt: u32,
    /// The node it went to.
    pub node: NodeId,
}

/// Resources in the units users write (`cpus` cores, `mem` MiB, `gpus` devices).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Amounts {
    /// Cores.
    pub cpus: f64,
    /// MiB.
    pub mem: u64,
    /// GPU devices (fractions add up).
    pub gpus: f64,
}

/// A quota's limits (`None`: that dimension is not limited).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuotaLimits {
    /// Cores.
    pub cpus: Option<f64>,
    /// MiB.
    pub mem: Option<u64>,
    /// GPU devices.
    pub gpus: Option<f64>,
}

/// One user's standing in one partition (`usage --json`, the dashboard's quota view).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserUsage {
    /// The user.
    pub user: String,
    /// The partition.
    pub partition: String,
    /// The priority its tasks get within quota (S1).
    pub priority: i64,
    /// Whose quota applies (`user:NAME` or `group:NAME`; `None`: no entry).
    pub quota_of: Option<String>,
    /// The quota's limits (`None`: no entry, or an entry without limits).
    pub quota: Option<QuotaLimits>,
    /// What its non-final tasks hold against the quota (S1 accounting).
    pub quota_used: Amounts,
    /// What its tasks hold on nodes now.
    pub held: Amounts,
    /// DRF (S3): its largest share of the up nodes' capacity over cpus, mem and gpus, 0–1.
    pub dominant_share: f64,
    /// Its waiting tasks (pending, or in a slave's local queue).
    pub waiting: u64,
}

/// One sample of the leader's last hour (the dashboard's plots).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistorySample {
    /// Leader time, ms since the Unix epoch.
    pub t_ms: u64,
    /// Pending tasks per S3 queue (`cpu`, `gpu-single`, `gpu-multi`).
    pub queues: std::collections::BTreeMap<String, u64>,
    /// Tasks waiting in slaves' local queues.
    pub queued: u64,
    /// Share of the up nodes' cores held, 0–1.
    pub cpu_alloc: f64,
    /// Share of the up nodes' GPU capacity held, 0–1 (0 without GPUs).
    pub gpu_alloc: f64,
}

/// `GET /v1/usage`: users against their quotas, and the last hour (leader-local; empty
/// history on a master that has not led).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageInfo {
    /// One entry per user and partition with live tasks or a priority entry.
    pub users: Vec<UserUsage>,
    /// Samples every 10 s over the last hour, oldest first.
    pub history: Vec<HistorySample>,
}
