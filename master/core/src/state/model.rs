//! The things the replicated state keeps: jobs, tasks, nodes (with their liveness, slave
//! queue, stopping attempts, drains, compression reserves, booked engine units and engine
//! profiles), and the partition a job runs in. Data only: the books and rules that change
//! them import this file, never the other way round.

use hetsched_common::priority::Principal;
use hetsched_common::program::{CallSummary, EngineDecl, SelectionTable};
use hetsched_common::{
    Attempt, EngineKind, GpuAlloc, JobId, JobSpec, NodeId, NodeResources, TaskId, TaskStatus,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A job as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Id.
    pub id: JobId,
    /// What was submitted.
    pub spec: JobSpec,
    /// Its tasks in index order.
    pub tasks: Vec<TaskId>,
    /// Leader's clock at submission (ms since the Unix epoch).
    pub submitted_ms: u64,
    /// Log index of the submission.
    pub submitted_index: u64,
    /// Leader's clock when its last task reached a final state (retention counts from here).
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Tasks not yet in a final state. Derived (rebuilt on restore), not serialised.
    #[serde(skip)]
    pub open: u32,
    /// Locality: `spec.nodes` resolved to ids at submission (empty: any node).
    #[serde(default)]
    pub candidates: Vec<NodeId>,
}

/// A task as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Id.
    pub id: TaskId,
    /// Its job.
    pub job: JobId,
    /// Index within the job.
    pub index: u32,
    /// State, node, attempt, exit code.
    pub status: TaskStatus,
    /// GPU devices held by the current attempt.
    pub gpus: GpuAlloc,
    /// S1 priority, decided at admission and never re-evaluated.
    #[serde(default)]
    pub priority: i64,
    /// The principal whose quota this task holds (it got that entry's priority), if any.
    #[serde(default)]
    pub quota: Option<Principal>,
    /// How many times it was preempted.
    #[serde(default)]
    pub preemptions: u32,
    /// Never chosen as a preemption victim (`--no-preempt` at an allowed priority).
    #[serde(default)]
    pub protected: bool,
    /// Failed attempts so far (each re-run consumes one of the job's retries).
    #[serde(default)]
    pub failures: u32,
    /// A re-run waits in the queue until this leader time (ms since the Unix epoch).
    #[serde(default)]
    pub not_before_ms: Option<u64>,
    /// Leader time at which the current attempt was reported started.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// The node of every attempt so far (where its output files are).
    #[serde(default)]
    pub attempt_nodes: BTreeMap<Attempt, NodeId>,
    /// A program task's calls in brief, as its slave reported them.
    #[serde(default)]
    pub calls: Option<CallSummary>,
    /// The current attempt's CPU allocation when changed live (S3.2 search, S3.6
    /// compression), millicores; `None`: what the job asks for.
    #[serde(default)]
    pub cpu_milli: Option<u64>,
    /// S3.2: where the current attempt's CPU-count search is (`None`: no `--class`).
    #[serde(default)]
    pub cpu_search: Option<CpuSearchPhase>,
    /// S3.6: the current attempt's cores were halved.
    #[serde(default)]
    pub compressed: bool,
    /// S0.1–2: the engine kind the scheduler chose for the current attempt of a program
    /// task (its load counts against that kind on its node).
    #[serde(default)]
    pub engine: Option<EngineKind>,
    /// S3: the current (or last) attempt was placed on borrowed capacity.
    #[serde(default)]
    pub borrowed: bool,
    /// S0.2: the engine unit the current attempt holds on its node (docs/DESIGN.md, S0.2).
    #[serde(default)]
    pub booked: Option<Booking>,
}

impl Task {
    /// Task `index` of job `job`, as admitted: pending, never assigned, at priority 0 with no
    /// quota (submit sets what admission decided).
    pub fn new(id: TaskId, job: JobId, index: u32) -> Self {
        Self {
            id,
            job,
            index,
            status: TaskStatus::new(),
            gpus: Vec::new(),
            protected: false,
            priority: 0,
            quota: None,
            preemptions: 0,
            failures: 0,
            not_before_ms: None,
            started_ms: None,
            attempt_nodes: BTreeMap::new(),
            calls: None,
            cpu_milli: None,
            cpu_search: None,
            compressed: false,
            engine: None,
            borrowed: false,
            booked: None,
        }
    }
}

/// Liveness of a node as committed in the log (heartbeats themselves are not logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeLiveness {
    /// Takes work.
    Up,
    /// Declared lost; its tasks went back to pending.
    Down,
}

/// A slave node as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Id.
    pub id: NodeId,
    /// The slave's registration key (registration is idempotent on it).
    pub key: u64,
    /// Name.
    pub name: String,
    /// Address masters dispatch to.
    pub addr: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Total resources.
    pub capacity: NodeResources,
    /// Free resources (capacity minus the tasks assigned or running there).
    pub free: NodeResources,
    /// Up or down.
    pub liveness: NodeLiveness,
    /// Tasks assigned or running there.
    pub tasks: BTreeSet<TaskId>,
    /// Partitions it serves (empty: only `default`).
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Preempted attempts still stopping there: their resources stay held (not `free`)
    /// until the slave reports them ended, so the node is never over-committed.
    #[serde(default)]
    pub stopping: Vec<Stopping>,
    /// Set while the node is draining (takes no new tasks).
    #[serde(default)]
    pub drain: Option<Drain>,
    /// S3.6: cores freed by compressions, held (not `free`) for a GPU task until it ends.
    #[serde(default)]
    pub compress_reserves: Vec<CompressReserve>,
    /// S0.3: tasks assigned beyond its free resources, in arrival order. They hold nothing
    /// of `free` (so the tasks held never exceed capacity) and are not in `tasks`; the head
    /// moves into `tasks` when its resources free up, any one when the slave reports it
    /// started and its resources are free (one started without room waits at the head).
    #[serde(default)]
    pub queued: Vec<TaskId>,
    /// S0.4: tasks stolen from other nodes' queues by this node.
    #[serde(default)]
    pub steals_in: u64,
    /// S0.4: tasks other nodes stole from this node's queue.
    #[serde(default)]
    pub steals_out: u64,
    /// S0.2: engine units booked by program tasks (running or stopping), by kind; never
    /// more than the node's engines of that kind.
    #[serde(default)]
    pub booked: BTreeMap<EngineKind, u32>,
}

/// A preempted attempt that has not stopped yet, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    /// The task.
    pub task: TaskId,
    /// Its attempt.
    pub attempt: Attempt,
    /// Its job (for its resources).
    pub job: JobId,
    /// Its GPU devices.
    pub gpus: GpuAlloc,
    /// Its CPU allocation when changed live (`None`: the job's).
    #[serde(default)]
    pub cpu_milli: Option<u64>,
    /// Its booked engine unit, held until it stops.
    #[serde(default)]
    pub booked: Option<Booking>,
}

/// The partition a job names, `default` when it names none.
pub fn partition_of(spec: &JobSpec) -> &str {
    if spec.partition.is_empty() {
        "default"
    } else {
        &spec.partition
    }
}

impl Node {
    /// Whether the node serves `partition`.
    pub fn serves(&self, partition: &str) -> bool {
        if self.partitions.is_empty() {
            partition == "default"
        } else {
            self.partitions.iter().any(|p| p == partition)
        }
    }

    /// Issue 52: whether its slave runs container tasks (an OCI runtime passed its start
    /// probe: label [`CONTAINER_RUNTIME_LABEL`](hetsched_common::protocol::CONTAINER_RUNTIME_LABEL)).
    pub fn runs_containers(&self) -> bool {
        self.labels
            .contains_key(hetsched_common::protocol::CONTAINER_RUNTIME_LABEL)
    }

    /// What `nodes --json` shows of its containers: its runtime, or why it has none (a
    /// slave that predates containers says nothing: "not reported").
    pub fn containers_info(&self) -> hetsched_common::protocol::ContainersInfo {
        use hetsched_common::protocol::{CONTAINER_RUNTIME_LABEL, CONTAINER_WHY_LABEL};
        let runtime = self.labels.get(CONTAINER_RUNTIME_LABEL).cloned();
        let why = match (&runtime, self.labels.get(CONTAINER_WHY_LABEL)) {
            (Some(_), _) => None,
            (None, Some(w)) => Some(w.clone()),
            (None, None) => Some("not reported (its slave predates container tasks)".into()),
        };
        hetsched_common::protocol::ContainersInfo {
            runtime,
            why,
            images: Vec::new(),
        }
    }

    /// Whether the node takes work.
    pub fn is_up(&self) -> bool {
        self.liveness == NodeLiveness::Up
    }

    /// Whether new tasks may be placed here: up and not draining.
    pub fn takes_work(&self) -> bool {
        self.is_up() && self.drain.is_none()
    }

    /// S3: the GPU pool its slave announced for the node's GPUs (label
    /// [`GPU_POOL_LABEL`](hetsched_common::protocol::GPU_POOL_LABEL), `slave --gpu-pool
    /// single|multi`); `None` without GPUs or when the slave left it to the scheduler
    /// (`auto`: pools split by the workload's demand, `sched::pool_split`).
    pub fn gpu_pool(&self) -> Option<hetsched_common::protocol::GpuPool> {
        if self.capacity.gpus.is_empty() {
            return None;
        }
        self.labels
            .get(hetsched_common::protocol::GPU_POOL_LABEL)
            .and_then(|l| l.parse().ok())
    }

    /// Whether every GPU on the node is emulated (and it has some).
    pub fn gpus_emulated(&self) -> bool {
        !self.capacity.gpus.is_empty() && self.capacity.gpus.iter().all(|g| g.emulated)
    }
}

/// What a slave declared of its engines and measured of them (S0.5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProfile {
    /// Engines.
    pub engines: Vec<EngineDecl>,
    /// Selection table.
    pub table: SelectionTable,
}

/// A node's drain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// Leader time the drain began.
    pub since_ms: u64,
    /// Leader time after which what still runs is stopped and re-queued; `None`: never.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
}

/// Where a GPU task's CPU-count search is (S3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuSearchPhase {
    /// The leader steps the count after each probe period.
    Probing,
    /// The best count was found and recorded for the task's class.
    Done,
}

impl CpuSearchPhase {
    /// `probing` or `done` (`tasks --json` `"cpu_search"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CpuSearchPhase::Probing => "probing",
            CpuSearchPhase::Done => "done",
        }
    }
}

/// Cores freed by a compression (S3.6), held on the node for one GPU task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressReserve {
    /// The GPU task they are held for.
    pub gpu_task: TaskId,
    /// The compressed CPU task they came from.
    pub from_task: TaskId,
    /// How much, millicores.
    pub cpu_milli: u64,
}

/// One engine unit a task holds (S0.2, `booking.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    /// Kind.
    pub kind: EngineKind,
    /// The GPU device (GPUs only).
    #[serde(default)]
    pub device: Option<u32>,
    /// Taken on top of the job's own request (given back on release); false when the job
    /// asked for a unit of the kind itself.
    #[serde(default)]
    pub extra: bool,
}
