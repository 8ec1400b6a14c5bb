//! What listings show: the JSON (and table) views of the cluster status, jobs, tasks,
//! nodes, members and profiles, as `status`, `jobs`, `tasks`, `nodes`, `members` and
//! `profiles` print them with `--json`.

use crate::program::{CallSummary, EngineDecl, EngineTotal, SelectionTable, TaskKind};
use crate::{
    Attempt, EngineKind, JobId, MasterId, NodeId, NodeResources, TaskId, TaskReason, TaskState,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `hetsched profiles`: every slave's selection table (S0.5) and the task–engine relation
/// (S0.1) of every program kind submitted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfilesInfo {
    /// One per slave that sent a profile.
    pub nodes: Vec<NodeProfileInfo>,
    /// One per task kind.
    pub relations: Vec<RelationInfo>,
}

/// One slave's engines and selection table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProfileInfo {
    /// Node.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Its engines.
    pub engines: Vec<EngineDecl>,
    /// Its selection table.
    pub table: SelectionTable,
}

/// The task–engine relation of one task kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationInfo {
    /// The kind, as text (`gemm@2^20x1+sort@2^13x2`).
    pub kind: String,
    /// The kind's parts.
    pub parts: TaskKind,
    /// Engines by total time, fastest first.
    pub engines: Vec<EngineTotal>,
}

/// One engine kind of a node as listed (`nodes --json` `"engines"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// Kind.
    pub kind: EngineKind,
    /// Units (CPU: cores; GPU: devices).
    pub count: u32,
    /// Units not held by tasks (CPU: whole free cores; GPU: wholly free devices).
    pub free: u32,
    /// True when emulated.
    pub emulated: bool,
}

/// One master in the Raft configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Id.
    pub id: MasterId,
    /// Cluster address, if known.
    pub addr: Option<String>,
    /// Voter (or learner).
    pub voter: bool,
    /// Whether it is the leader.
    pub leader: bool,
    /// Highest log index known replicated there (leader's view).
    pub match_index: Option<u64>,
}

/// `hetsched status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    /// Master that answered.
    pub master_id: MasterId,
    /// Leader it believes in.
    pub leader: Option<MasterId>,
    /// Leader's cluster address.
    pub leader_addr: Option<String>,
    /// Raft term.
    pub term: u64,
    /// Raft role of the answering master (`leader`, `follower`, `candidate`, `pre-candidate`).
    pub role: String,
    /// Last log index applied to the state machine.
    pub applied_index: u64,
    /// Hash of the state machine's canonical serialisation (hex).
    pub state_hash: String,
    /// True when answered from local state without confirming leadership.
    pub stale: bool,
    /// Node counts.
    pub nodes: NodeCounts,
    /// Number of jobs.
    pub jobs: u64,
    /// Task counts by state (lowercase state name → count; every state present).
    pub tasks: BTreeMap<String, u64>,
    /// Log work of the answering master.
    #[serde(default)]
    pub raft: RaftCounters,
    /// Size of the serialised replicated state, bytes.
    #[serde(default)]
    pub state_bytes: u64,
    /// Size of the answering master's last snapshot file, bytes (0: none yet).
    #[serde(default)]
    pub snapshot_bytes: u64,
    /// S3: pending tasks per queue (`cpu`, `gpu-single`, `gpu-multi`; every queue present).
    #[serde(default)]
    pub queues: BTreeMap<String, u64>,
    /// S3.2 class history: each task class's best CPU count as last recorded (cores; only
    /// classes with a record).
    #[serde(default)]
    pub cpu_config: BTreeMap<String, f64>,
    /// The answering master runs `--insecure`: no TLS, no authentication (shown loudly by
    /// `status` and the dashboard).
    #[serde(default)]
    pub insecure: bool,
    /// Waiting tasks by reason (docs/CONTRACT.md, "Waiting reasons"; only reasons with a
    /// task).
    #[serde(default)]
    pub waiting: BTreeMap<String, u64>,
    /// The answering master's open-file limits and descriptors in use (`None` where they
    /// cannot be read).
    #[serde(default)]
    pub open_files: Option<OpenFiles>,
    /// Issue 54: the heartbeat period slaves are asked for, ms (0: their own, 400 ms by
    /// default; longer past `master --max-heartbeats-per-sec`).
    #[serde(default)]
    pub heartbeat_ms: u64,
}

/// A process's open-file limits (`RLIMIT_NOFILE`) and the descriptors it has open. Masters
/// and slaves raise the soft limit to the hard one at start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFiles {
    /// The soft limit: what `accept` and `open` run into.
    pub soft: u64,
    /// The hard limit: how far the process may raise the soft one (an operator raises it
    /// with `ulimit -Hn` as root, `LimitNOFILE=` in systemd, or limits.conf).
    pub hard: u64,
    /// Descriptors open now (`None` where `/proc/self/fd` cannot be read).
    pub open: Option<u64>,
}

/// Log-work counters of one master (for benchmarks and operators).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftCounters {
    /// Commit index.
    #[serde(default)]
    pub commit_index: u64,
    /// First index still in the log (earlier entries are compacted into the snapshot).
    #[serde(default)]
    pub first_index: u64,
    /// Proposals accepted as leader.
    #[serde(default)]
    pub proposals: u64,
    /// Entries made durable.
    #[serde(default)]
    pub entries_persisted: u64,
    /// Log flushes (fsyncs).
    #[serde(default)]
    pub flushes: u64,
    /// Snapshots taken.
    #[serde(default)]
    pub snapshots: u64,
}

/// Node counts by liveness.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCounts {
    /// Registered nodes.
    pub total: u64,
    /// Up.
    pub up: u64,
    /// Down.
    pub down: u64,
    /// Draining (up or down).
    #[serde(default)]
    pub draining: u64,
}

/// One job as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Id.
    pub id: JobId,
    /// Name.
    pub name: String,
    /// User.
    pub user: String,
    /// Partition.
    pub partition: String,
    /// `pending` (nothing started), `running`, `succeeded` (all), `failed` (some failed, all
    /// final), `cancelled`.
    pub state: String,
    /// Number of tasks.
    pub tasks: u32,
    /// Task counts by state.
    pub task_states: BTreeMap<String, u32>,
    /// Leader's clock at submission, ms since the Unix epoch.
    pub submitted_ms: u64,
    /// S2: the batch the job belongs to (`None`: not a batch job).
    #[serde(default)]
    pub batch_id: Option<u64>,
    /// S2: planned start, seconds after the batch's submission.
    #[serde(default)]
    pub planned_start_s: Option<f64>,
    /// S2: planned finish, seconds after the batch's submission.
    #[serde(default)]
    pub planned_finish_s: Option<f64>,
    /// S2: when its last task ended, seconds after the batch's submission.
    #[serde(default)]
    pub actual_finish_s: Option<f64>,
    /// Issue 51: the jobs it starts after once each succeeded (spec key `after`).
    #[serde(default)]
    pub after: Vec<JobId>,
    /// The jobs it starts after once each ended (`after_any`).
    #[serde(default)]
    pub after_any: Vec<JobId>,
    /// The jobs it starts after once each failed or was cancelled (`after_fail`).
    #[serde(default)]
    pub after_fail: Vec<JobId>,
    /// The job whose task *i* its task *i* follows (`after_each`).
    #[serde(default)]
    pub after_each: Option<JobId>,
    /// `all` or `any`: how its dependencies combine.
    #[serde(default)]
    pub after_mode: crate::AfterMode,
    /// At most one singleton job of its user and name under way at a time.
    #[serde(default)]
    pub singleton: bool,
    /// At most this many of its tasks assigned or running at once.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// The open jobs that follow it (their dependencies name it), ascending.
    #[serde(default)]
    pub dependents: Vec<JobId>,
    /// Issue 51: the flow the job is a step of (`None`: not a flow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_id: Option<u64>,
}

/// One task as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// Id (= `HETSCHED_TASK_ID`).
    pub id: TaskId,
    /// Job.
    pub job_id: JobId,
    /// Index within the job (= `HETSCHED_TASK_INDEX`).
    pub index: u32,
    /// State.
    pub state: TaskState,
    /// Node of the current or last attempt.
    pub node: Option<NodeId>,
    /// Current attempt (0 = never assigned).
    pub attempt: Attempt,
    /// Exit code once finished.
    pub exit_code: Option<i32>,
    /// S1 priority (decided at admission).
    #[serde(default)]
    pub priority: i64,
    /// Submitting user.
    #[serde(default)]
    pub user: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Times preempted.
    #[serde(default)]
    pub preemptions: u32,
    /// Why the last attempt ended, when not by a normal exit (docs/CONTRACT.md reasons).
    #[serde(default)]
    pub reason: Option<TaskReason>,
    /// One human line beside `reason` (which job a `dependency` end followed, which image
    /// step failed); `null` when there is nothing to add.
    #[serde(default)]
    pub reason_detail: Option<String>,
    /// Failed attempts so far (each retry consumes one).
    #[serde(default)]
    pub failures: u32,
    /// Pending for a retry: not started before this leader time, ms since the Unix epoch.
    #[serde(default)]
    pub not_before_ms: Option<u64>,
    /// Cores the task holds now (float, as users write them): what it asked for, unless
    /// the CPU-count search (S3.2) or compression (S3.6) changed it live.
    #[serde(default)]
    pub cpus: f64,
    /// S3.2 CPU-count search of a GPU task: `probing` while it runs, `done` once its count
    /// is recorded for its class; `None` for tasks without `--class`.
    #[serde(default)]
    pub cpu_search: Option<String>,
    /// S3.6: the task's cores were halved because it contended with a GPU task.
    #[serde(default)]
    pub compressed: bool,
    /// A program task's calls in brief (once its slave reported them).
    #[serde(default)]
    pub calls: Option<CallSummary>,
    /// S3 queue: `cpu`, `gpu-single` (< 4 GPUs) or `gpu-multi`.
    #[serde(default)]
    pub queue: String,
    /// S3: the current (or last) attempt runs on borrowed capacity: a CPU task on a GPU
    /// node's reserved CPUs, a GPU task on CPU-pool CPUs or on the other GPU pool's GPUs.
    #[serde(default)]
    pub borrowed: bool,
    /// Why it waits, as the scheduler stage that stopped it said (pending tasks, and tasks
    /// in a slave's local queue); `None` otherwise or before the leader's first plan.
    #[serde(default)]
    pub waiting: Option<super::WaitingInfo>,
}

/// One node as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Id.
    pub id: NodeId,
    /// Name.
    pub name: String,
    /// Address the master dispatches to.
    pub addr: String,
    /// `up` or `down`.
    pub state: String,
    /// Capacity.
    pub capacity: NodeResources,
    /// Free now.
    pub free: NodeResources,
    /// Tasks assigned or running there.
    pub tasks: u32,
    /// True when its GPUs are emulated.
    pub gpus_emulated: bool,
    /// Partitions it serves.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Draining: takes no new tasks.
    #[serde(default)]
    pub draining: bool,
    /// When a drain stops and re-queues what still runs there, ms since the Unix epoch.
    #[serde(default)]
    pub drain_deadline_ms: Option<u64>,
    /// Resource isolation of its tasks: `"v1"` or `"v2"` (cgroups), or `"none"`.
    #[serde(default = "cgroup_none")]
    pub cgroup: String,
    /// Its engines: CPU and GPU always listed, others when declared.
    #[serde(default)]
    pub engines: Vec<EngineInfo>,
    /// Which probes its slave samples with (`nodes --json` `"probes"`).
    #[serde(default)]
    pub probes: ProbesInfo,
    /// Tasks assigned beyond its free resources, waiting in its local queue (S0.3).
    #[serde(default)]
    pub queued: u32,
    /// Tasks it took from other slaves' queues (S0.4 work stealing).
    #[serde(default)]
    pub steals_in: u64,
    /// Tasks other slaves took from its queue.
    #[serde(default)]
    pub steals_out: u64,
    /// S3 GPU pool of its GPUs: `single` or `multi` (`None`: no GPUs).
    #[serde(default)]
    pub gpu_pool: Option<String>,
    /// S0.6: its links to peers as its forwarded calls measured them (round trip, bytes per
    /// second, smoothed per peer), from its heartbeats to the leader; empty before any
    /// forwarded call, and in a follower's answer.
    #[serde(default)]
    pub links: Vec<super::LinkEstimate>,
    /// S3.6: its memory bandwidth, MB/s, as its slave measured it at first start (or was
    /// told by `--membw-total`); `None` from slaves that predate it.
    #[serde(default)]
    pub membw_total_mbps: Option<u64>,
    /// How: `triad` (measured by the triad's own rate), `resctrl` (MBM counted during the
    /// triad) or `flag` (`--membw-total`).
    #[serde(default)]
    pub membw_total_source: Option<String>,
    /// Issue 52: whether it runs container tasks (`nodes --json` `"containers"`).
    #[serde(default)]
    pub containers: ContainersInfo,
}

/// A node's containers: its OCI runtime (`None`: it runs none, and `why`), and the images
/// its store holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainersInfo {
    /// The runtime that passed the slave's start probe (`runc`, `crun`); `None`: none did.
    pub runtime: Option<String>,
    /// Why it runs none (each runtime tried, and what failed); absent when it runs them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The images unpacked in its store.
    #[serde(default)]
    pub images: Vec<ImageInfo>,
}

/// One image in a slave's store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// The reference it was asked by.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its manifest's digest (`sha256:...`).
    pub digest: String,
    /// Its unpacked size, MiB.
    pub size_mib: u64,
}

/// The probes a slave samples its tasks with: `gpu` `"nvml"` or `"emulated"`, `membw`
/// `"resctrl"` or `"emulated"` (`"none"` from slaves that predate the probes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbesInfo {
    /// GPU utilisation probe.
    pub gpu: String,
    /// Memory-bandwidth probe.
    pub membw: String,
}

impl Default for ProbesInfo {
    fn default() -> Self {
        Self {
            gpu: "none".into(),
            membw: "none".into(),
        }
    }
}

fn cgroup_none() -> String {
    "none".into()
}
