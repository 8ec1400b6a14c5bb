//! Every message that crosses a socket, grouped by who talks to whom.
//!
//! Named-field MessagePack (`rmp_serde::to_vec_named`) with `#[serde(default)]` on fields
//! added after version 1, so a newer peer's extra fields are ignored and an older peer's
//! missing ones take their defaults.

use crate::program::{
    Api, ApiCall, CallRecord, CallSummary, EngineDecl, EngineTotal, SelectionTable, TaskKind,
};
use crate::{
    Attempt, ClientRequestId, EngineKind, GpuAlloc, JobId, JobSpec, MasterId, NodeId,
    NodeResources, ResourceRequest, TaskId, TaskReason, TaskState,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The body of one frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Raft messages between masters, each the protobuf bytes of one `raft::eraftpb::Message`.
    /// One-way: no reply.
    Raft {
        /// Sending master.
        from: MasterId,
        /// Encoded raft messages.
        msgs: Vec<serde_bytes::ByteBuf>,
    },
    /// Client (CLI) → master.
    Client(ClientRequest),
    /// Master → client.
    ClientReply(ClientResponse),
    /// Slave → master.
    Slave(SlaveRequest),
    /// Master → slave, replying to a [`SlaveRequest`].
    SlaveReply(SlaveResponse),
    /// Master → slave: work to do.
    ToSlave(SlaveCommand),
    /// Slave → master, replying to a [`SlaveCommand`].
    ToSlaveReply(SlaveCommandReply),
    /// Any request may be answered with an error.
    Error(ErrorReply),
    /// Slave → slave: one API call forwarded to a peer (S0.6).
    Peer(PeerRequest),
    /// Slave → slave, replying to a [`PeerRequest`].
    PeerReply(PeerReply),
}

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What went wrong, for programs.
    pub kind: ErrorKind,
    /// What went wrong, for people.
    pub message: String,
}

impl ErrorReply {
    /// Shorthand.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Error classes a peer can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// The frame could not be decoded.
    Malformed,
    /// The frame exceeded the size cap.
    TooLarge,
    /// The protocol version is not spoken here.
    WrongVersion,
    /// This master is not the leader; retry at `leader_addr` when known.
    NotLeader {
        /// The leader this master believes in, if any.
        leader: Option<MasterId>,
        /// Its cluster address, if known.
        leader_addr: Option<String>,
    },
    /// The request is invalid (bad spec, unknown job).
    Invalid,
    /// The node is not registered (the slave should register again).
    UnknownNode,
    /// The request was not a kind this endpoint serves.
    Unsupported,
    /// The outcome is unknown (leadership changed before the command applied): retrying
    /// with the same client request id is safe.
    Unknown,
    /// Temporarily unable to serve (no leader, shutting down); retry later.
    Unavailable,
    /// A bug on the serving side.
    Internal,
    /// No such job, task, node or batch (a garbage-collected one says "collected").
    NotFound,
    /// The request is served only on another port (the admin listener, CONTRACT.md).
    Forbidden,
    /// Admission back-pressure: the pending queue is at its cap or the user is over the
    /// submit rate. Nothing was done; retry later (exit 5, "busy, retry").
    Busy,
}

/// Requests of the CLI and other clients to a master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Submit a job (idempotent on `request`).
    Submit {
        /// Client request id (a retried submit with the same id makes no second job).
        request: ClientRequestId,
        /// The job.
        spec: JobSpec,
    },
    /// Cancel every unfinished task of a job.
    Cancel {
        /// Client request id.
        request: ClientRequestId,
        /// The job.
        job: JobId,
    },
    /// Cluster status.
    Status {
        /// Answer from this master's applied state without a redirect or read barrier.
        #[serde(default)]
        stale: bool,
    },
    /// Jobs.
    Jobs {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
        /// Which jobs (newest first).
        #[serde(default)]
        filter: ListFilter,
    },
    /// Tasks, optionally of one job.
    Tasks {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
        /// Only this job's tasks.
        #[serde(default)]
        job: Option<JobId>,
        /// Which tasks (newest first).
        #[serde(default)]
        filter: ListFilter,
    },
    /// Nodes.
    Nodes {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
    },
    /// The Raft configuration.
    Members {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
    },
    /// Add a master (a Raft voter) at `addr`.
    AddMember {
        /// Its id (≥ 1, unused so far).
        id: MasterId,
        /// Its cluster address.
        addr: String,
    },
    /// Remove a master. Removing the leader hands leadership over first.
    RemoveMember {
        /// Its id.
        id: MasterId,
    },
    /// Hand leadership to another master.
    TransferLeader {
        /// The master to lead.
        id: MasterId,
    },
    /// Benchmark traffic: a proposal that changes nothing but a counter.
    BenchPropose {
        /// Benchmark client.
        client: u64,
        /// Sequence number within the client.
        seq: u64,
        /// Remember the sequence number so that losses can be counted afterwards.
        #[serde(default)]
        record: bool,
        /// Padding, to give entries a realistic size.
        #[serde(default)]
        payload: serde_bytes::ByteBuf,
    },
    /// Benchmark check: how many of `client`'s recorded proposals applied, and which of
    /// `acked` are missing.
    BenchCheck {
        /// Benchmark client.
        client: u64,
        /// Sequence numbers the client saw acknowledged.
        acked: Vec<u64>,
    },
    /// Fault injection into the addressed master's Raft traffic (tests and chaos). Local to
    /// that master; never replicated.
    SetFaults(FaultSpec),
    /// Replace the S1 priority configuration (idempotent on `request`); answered with the
    /// configuration now in force, its version set.
    SetPriorityConfig {
        /// Client request id.
        request: ClientRequestId,
        /// The configuration.
        config: crate::priority::PriorityConfig,
    },
    /// The S1 priority configuration in force.
    PriorityConfig {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
    },
    /// What submitting `spec` now would do, changing nothing: each task's priority, the node
    /// the next scheduling round would give it, and what it would preempt.
    DryRun {
        /// The job.
        spec: JobSpec,
    },
    /// Cancel one task (stopped on its slave if it runs).
    CancelTask {
        /// Client request id.
        request: ClientRequestId,
        /// The task.
        task: TaskId,
    },
    /// Drain a node: no new tasks; running ones finish, or are stopped and re-queued with
    /// reason `drained` once the deadline passes.
    Drain {
        /// Client request id.
        request: ClientRequestId,
        /// Node name, id, or `node-N`.
        node: String,
        /// Deadline, ms from now; `None`: running tasks may finish however long they take.
        #[serde(default)]
        deadline_after_ms: Option<u64>,
    },
    /// Stop draining a node.
    Undrain {
        /// Client request id.
        request: ClientRequestId,
        /// Node name, id, or `node-N`.
        node: String,
    },
    /// Read part of a task attempt's output, fetched by the master from the slave holding it.
    Logs {
        /// Task.
        task: TaskId,
        /// Attempt (default: the latest).
        #[serde(default)]
        attempt: Option<Attempt>,
        /// Standard error instead of standard output.
        #[serde(default)]
        stderr: bool,
        /// Byte offset to read from.
        #[serde(default)]
        offset: u64,
        /// Most bytes to return.
        #[serde(default)]
        max_bytes: u64,
    },
    /// The call records of a program task, fetched from the slave that ran it (`calls`).
    Calls {
        /// Task.
        task: TaskId,
    },
    /// Every slave's selection table and the task–engine relation (`profiles`).
    Profiles {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
    },
    /// Deliberate bugs switched on or off at run time (admin listener only; `hetsched chaos`
    /// tests that its checker sees them). Local to the addressed master; never replicated.
    SetBugs(BugSpec),
    /// One page of the addressed master's applied Raft log (admin listener only; `hetsched
    /// chaos` replays every master's log to check each index). Pages follow with
    /// `from = next` until `next > applied`.
    ExportLog {
        /// First index wanted (1: from the start; a compacted start comes as the snapshot).
        from: u64,
        /// Most entry bytes in the page (0: the default, 1 MiB; capped at 4 MiB). At least one
        /// entry is always returned.
        #[serde(default)]
        max_bytes: u64,
    },
}

/// Which jobs or tasks a listing returns. Listings are newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFilter {
    /// Only this job (or this job's tasks).
    #[serde(default)]
    pub job: Option<JobId>,
    /// Only this state (a task state, or a job state such as `failed`).
    #[serde(default)]
    pub state: Option<String>,
    /// Only this user's.
    #[serde(default)]
    pub user: Option<String>,
    /// At most this many.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Faults for one master's Raft links (mirrors the consensus crate's fault config).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultSpec {
    /// Seed of drop decisions.
    #[serde(default)]
    pub seed: u64,
    /// Probability of dropping each message.
    #[serde(default)]
    pub drop_rate: f64,
    /// Extra delay per message, ms.
    #[serde(default)]
    pub delay_ms: u64,
    /// Masters whose links are cut.
    #[serde(default)]
    pub cut: Vec<MasterId>,
    /// Cut from every master.
    #[serde(default)]
    pub isolated: bool,
}

/// Deliberate bugs a master can be told to have (chaos tests: the checker must see them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BugSpec {
    /// Acknowledge a submit without committing it (the job never exists): `acked-lost`.
    #[serde(default)]
    pub ack_before_commit: bool,
}

/// Answers to [`ClientRequest`].
// Replies live for one request; boxing the status would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientResponse {
    /// The job was accepted (or had been, for a retried request).
    Submitted {
        /// Its id.
        job: JobId,
        /// Its tasks' ids, in index order.
        tasks: Vec<TaskId>,
    },
    /// Cancellation applied.
    Cancelled {
        /// The job.
        job: JobId,
        /// How many tasks went to cancelled.
        tasks: u32,
    },
    /// Cluster status.
    Status(StatusInfo),
    /// Jobs.
    Jobs(Vec<JobInfo>),
    /// Tasks.
    Tasks(Vec<TaskInfo>),
    /// Nodes.
    Nodes(Vec<NodeInfo>),
    /// The Raft configuration.
    Members(Vec<MemberInfo>),
    /// An administrative request was carried out.
    Done,
    /// Benchmark check result.
    BenchChecked {
        /// Recorded proposals of the client that applied.
        applied: u64,
        /// Acknowledged sequence numbers that did not apply (must be empty).
        missing: Vec<u64>,
    },
    /// One node after a change (drain, undrain).
    Node(NodeInfo),
    /// Part of a task's output.
    Logs(LogChunk),
    /// The S1 priority configuration.
    PriorityConfig(crate::priority::PriorityConfig),
    /// A dry run's answer, one entry per task.
    DryRun(Vec<DryRunTask>),
    /// A program task's call records.
    Calls {
        /// Task.
        task: TaskId,
        /// Attempt whose records these are.
        attempt: Attempt,
        /// Node that ran it.
        node: NodeId,
        /// Records in call order.
        calls: Vec<CallRecord>,
    },
    /// Selection tables and the task–engine relation.
    Profiles(ProfilesInfo),
    /// One page of a master's applied log.
    LogPage(LogPage),
}

/// One page of a master's applied Raft log ([`ClientRequest::ExportLog`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    /// The master that read it.
    pub master: MasterId,
    /// Set when the page starts in the compacted part of the log: the snapshot standing for
    /// everything up to its index.
    #[serde(default)]
    pub snapshot: Option<LogSnapshot>,
    /// Commands in index order (no-ops and configuration changes left out).
    #[serde(default)]
    pub entries: Vec<LogEntry>,
    /// Where the next page starts.
    pub next: u64,
    /// The master's applied index when read: complete once `next > applied`.
    pub applied: u64,
}

/// The state machine snapshot at the start of an exported log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSnapshot {
    /// Its log index.
    pub index: u64,
    /// The serialised replicated state (the master's `ClusterState` bytes).
    pub state: serde_bytes::ByteBuf,
}

/// One committed command of an exported log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its log index.
    pub index: u64,
    /// The encoded command (the master's `CommandEnvelope` bytes).
    pub command: serde_bytes::ByteBuf,
}

/// Part of a task attempt's output file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// Node holding the file (`None` while the task has not been placed yet).
    pub node: Option<NodeId>,
    /// Offset of `data` in the file.
    pub offset: u64,
    /// The bytes.
    pub data: serde_bytes::ByteBuf,
    /// Size of the file when read.
    pub size: u64,
    /// Whether the task has ended for good (no more output will come).
    pub task_final: bool,
}

/// One task of a dry run (`submit --dry-run --json`: `{"tasks": [...]}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DryRunTask {
    /// Index within the job.
    pub index: u32,
    /// The priority it would get.
    pub priority: i64,
    /// Where the next scheduling round would place it (`None`: nowhere yet).
    pub node: Option<NodeId>,
    /// Running tasks it would preempt.
    pub preempts: Vec<TaskId>,
    /// S0.1–2: the engine kind chosen for a program task (`None`: not a program task, or
    /// no profile knows its kind yet).
    #[serde(default)]
    pub engine: Option<EngineKind>,
    /// S0.3: it would wait in the node's local queue (beyond the node's free resources).
    #[serde(default)]
    pub queued: bool,
}

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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Why the last attempt ended, when not by a normal exit (CONTRACT.md reasons).
    #[serde(default)]
    pub reason: Option<TaskReason>,
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

/// Node label naming a slave's GPU utilisation probe (`nvml`, `emulated`).
pub const PROBE_GPU_LABEL: &str = "hetsched.probe.gpu";

/// Node label naming a slave's memory-bandwidth probe (`resctrl`, `emulated`).
pub const PROBE_MEMBW_LABEL: &str = "hetsched.probe.membw";

fn cgroup_none() -> String {
    "none".into()
}

/// The node label a slave sets to say how its tasks are isolated (`v1`, `v2`, `none`); the
/// master shows it as [`NodeInfo::cgroup`].
pub const CGROUP_LABEL: &str = "hetsched.cgroup";

/// The node label a slave sets to announce its GPUs' pool (`single` or `multi`, from
/// `slave --gpu-pool`); a node without it (an older slave) is pooled by its GPU count
/// ([`GpuPool::of_node`]).
pub const GPU_POOL_LABEL: &str = "hetsched.gpu-pool";

/// S3 GPU pools: which GPU tasks a GPU node's GPUs serve first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuPool {
    /// Serves the `gpu-single` queue (tasks asking fewer than 4 GPUs).
    Single,
    /// Serves the `gpu-multi` queue.
    Multi,
}

impl GpuPool {
    /// Nodes with this many GPUs or more are in the multi-GPU pool unless they say otherwise.
    pub const MULTI_NODE_GPUS: usize = 8;

    /// The name in `nodes --json` (`"gpu_pool"`) and in [`GPU_POOL_LABEL`].
    pub fn name(self) -> &'static str {
        match self {
            GpuPool::Single => "single",
            GpuPool::Multi => "multi",
        }
    }

    /// The pool of a node with `gpus` GPUs whose slave announced `announced` (`None`: by
    /// GPU count); `None` for a node without GPUs.
    pub fn of_node(gpus: usize, announced: Option<GpuPool>) -> Option<GpuPool> {
        if gpus == 0 {
            return None;
        }
        Some(announced.unwrap_or(if gpus >= Self::MULTI_NODE_GPUS {
            GpuPool::Multi
        } else {
            GpuPool::Single
        }))
    }

    /// The other pool (the one this pool's tasks may borrow from).
    pub fn other(self) -> GpuPool {
        match self {
            GpuPool::Single => GpuPool::Multi,
            GpuPool::Multi => GpuPool::Single,
        }
    }
}

impl std::fmt::Display for GpuPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GpuPool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "single" => Ok(GpuPool::Single),
            "multi" => Ok(GpuPool::Multi),
            _ => Err(format!("unknown GPU pool {s:?}: expected single or multi")),
        }
    }
}

/// What a slave holds of one task, reported on registration and in heartbeats so that a new
/// leader can reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTask {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// Where it is on the slave.
    pub phase: HeldPhase,
}

/// Phase of a task on its slave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeldPhase {
    /// Accepted, waiting in the local queue.
    Queued,
    /// Process running.
    Running,
    /// Process ended; the result waits for the master's acknowledgement.
    Finished {
        /// Exit code: the program's own; −N when killed by signal N; 127 when it could not
        /// be started.
        exit_code: i32,
    },
}

/// Slave → master requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SlaveRequest {
    /// First contact, and again after a restart or an `UnknownNode` answer.
    Register {
        /// Random key kept in the slave's data dir: registration is idempotent on it.
        key: u64,
        /// The id the cluster gave this slave before, if any.
        #[serde(default)]
        node: Option<NodeId>,
        /// Human name.
        name: String,
        /// Address masters dispatch to.
        addr: String,
        /// What the node has.
        capacity: NodeResources,
        /// Free-form labels (environment: cloud / edge / terminal, rack, …).
        #[serde(default)]
        labels: BTreeMap<String, String>,
        /// What it holds now.
        #[serde(default)]
        held: Vec<HeldTask>,
        /// Partitions it serves (S1; empty: `default`).
        #[serde(default)]
        partitions: Vec<String>,
    },
    /// Liveness plus what the slave holds. Not logged in Raft.
    Heartbeat {
        /// Node.
        node: NodeId,
        /// What it holds.
        #[serde(default)]
        held: Vec<HeldTask>,
        /// Probe samples (GPU utilisation, memory bandwidth) taken since the last
        /// heartbeat, oldest first (S3.2: the leader's CPU-count search reads them).
        #[serde(default)]
        samples: Vec<ProbeSample>,
        /// Its engines' load now (S0.6: the leader answers forwarding queries from it; empty
        /// from older slaves).
        #[serde(default)]
        engine_load: Vec<EngineLoad>,
    },
    /// A task's process started.
    TaskStarted {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// A task's process ended.
    TaskFinished {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code.
        exit_code: i32,
        /// Why it ended as the slave saw it (`oom`, `cannot-start`, `lost`, …); `None` from
        /// older slaves, which the master reads as what the exit code implies. `lost` means
        /// the attempt did not run to an observed end (its supervisor vanished): the master
        /// re-queues it with attempt + 1.
        #[serde(default)]
        reason: Option<TaskReason>,
    },
    /// The slave's engines and selection table (S0.5), after it profiled or loaded them.
    RecordProfile {
        /// Node.
        node: NodeId,
        /// Its engines.
        engines: Vec<EngineDecl>,
        /// Its selection table.
        table: SelectionTable,
    },
    /// A program task's calls in brief, for `tasks`.
    RecordCalls {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Summary.
        summary: CallSummary,
    },
    /// S0.6: which slave should run this call instead (answered by the leader from the
    /// engine load of recent heartbeats, never logged).
    ForwardQuery(ForwardQuery),
    /// Many tasks' started/finished reports in one message, in the order they happened
    /// (a short task's start and finish may travel together). Committed by the leader as
    /// one log entry; answered with `Ack` once committed.
    TaskReports {
        /// Node.
        node: NodeId,
        /// The reports, oldest first.
        reports: Vec<TaskReport>,
    },
    /// S0.4: the slave's local queue is empty and it has free resources: the leader may
    /// move a queued task of another slave here. Answered with `Ack` (the stolen task, if
    /// any, arrives later as an ordinary assignment).
    StealRequest {
        /// The idle node (the thief).
        node: NodeId,
    },
}

/// One probe sample of a running attempt (taken by the slave once a second).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeSample {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// The attempt's CPU allocation when sampled, millicores (a sample belongs to the CPU
    /// count it was taken under).
    pub cpu_milli: u64,
    /// GPU utilisation, 0–100 (GPU tasks only; `None` when not measured).
    #[serde(default)]
    pub gpu_util: Option<f64>,
    /// Whether `gpu_util` came from the emulated probe (`HETSCHED_GPU_UTIL_FILE`).
    #[serde(default)]
    pub gpu_emulated: bool,
    /// Memory bandwidth, MB/s (`None` when not measured).
    #[serde(default)]
    pub membw_mbps: Option<f64>,
    /// Whether `membw_mbps` came from the emulated probe (`HETSCHED_MEMBW_FILE`).
    #[serde(default)]
    pub membw_emulated: bool,
}

/// One task report inside [`SlaveRequest::TaskReports`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskReport {
    /// The process started.
    Started {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// The process ended.
    Finished {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code.
        exit_code: i32,
        /// Why it ended, as the slave saw it (`oom`, `cannot-start`, `lost`, …).
        #[serde(default)]
        reason: Option<crate::TaskReason>,
    },
    /// S3.6: the slave halved a CPU task's cores (already applied live) because it
    /// contends for memory bandwidth with a GPU task on the node.
    Compressed {
        /// The CPU task.
        task: TaskId,
        /// Its attempt.
        attempt: Attempt,
        /// Its new allocation, millicores.
        cpu_milli: u64,
        /// The GPU task that suffered: the freed cores are held for it until it ends.
        gpu_task: TaskId,
    },
}

/// Master → slave answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlaveResponse {
    /// Registration applied.
    Registered {
        /// The node's id (kept by the slave).
        node: NodeId,
    },
    /// Heartbeat seen.
    HeartbeatAck {
        /// The leader.
        leader: MasterId,
    },
    /// A report is committed (or was stale and ignored): the slave may forget it.
    Ack,
    /// The answer to a [`SlaveRequest::ForwardQuery`]: the peer to send the call to, if any.
    ForwardTarget(Option<ForwardTarget>),
}

/// One engine kind's load on a slave, as its heartbeat reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineLoad {
    /// Kind.
    pub kind: EngineKind,
    /// Units.
    pub count: u32,
    /// Units not running a call (or a task) now.
    pub free: u32,
    /// Calls waiting for a unit of this kind.
    #[serde(default)]
    pub waiting: u32,
}

/// A slave's measurement of its link to a peer (from its forwarded calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEstimate {
    /// The peer.
    pub node: NodeId,
    /// Round trip, µs (a forwarded call's time less the peer's execution time).
    pub rtt_us: u64,
    /// Bandwidth, bytes per second (0: not measured).
    #[serde(default)]
    pub bytes_per_s: u64,
}

/// S0.6: a slave asks the leader for a peer to run one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardQuery {
    /// The asking slave.
    pub node: NodeId,
    /// API of the call.
    pub api: Api,
    /// Its parameter scale (argument bytes).
    pub arg_bytes: u64,
    /// Engine kinds acceptable for it, best first (the asker's bar).
    pub kinds: Vec<EngineKind>,
    /// Peers not to answer with (they refused or failed this call).
    #[serde(default)]
    pub exclude: Vec<NodeId>,
    /// The asker's measured links (peers not listed: the leader's defaults).
    #[serde(default)]
    pub links: Vec<LinkEstimate>,
}

/// The leader's answer to a [`ForwardQuery`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardTarget {
    /// The peer.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Its address (the slave listener).
    pub addr: String,
    /// The engine kind expected to run the call there.
    pub engine: EngineKind,
    /// The estimated cost of forwarding there (transfer + round trip + queue wait), µs.
    pub cost_us: u64,
    /// The estimated execution time there, µs (from its selection table; 0: unknown).
    #[serde(default)]
    pub exec_us: u64,
}

/// Slave → slave requests (S0.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeerRequest {
    /// Run one API call on one of `kinds` here and send the result back. Never forwarded
    /// again; refused when no unit of those kinds is free.
    ForwardedCall {
        /// The sending node.
        from: NodeId,
        /// The call.
        call: ApiCall,
        /// Acceptable engine kinds, best first.
        kinds: Vec<EngineKind>,
    },
}

/// Slave → slave answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeerReply {
    /// The call ran here.
    Done {
        /// Its record (node and engine are this slave's).
        record: CallRecord,
        /// Time from receiving the call to answering, µs (the asker subtracts it from its
        /// round trip to measure the link).
        served_us: u64,
    },
    /// Not run: no unit of the acceptable kinds is free (or forwarding is off here).
    Refused {
        /// Why.
        reason: String,
    },
}

/// One task placed on a slave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Task.
    pub task: TaskId,
    /// Its job.
    pub job: JobId,
    /// Index within the job.
    pub index: u32,
    /// Attempt.
    pub attempt: Attempt,
    /// argv.
    pub command: Vec<String>,
    /// Extra env.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Resources granted.
    pub resources: ResourceRequest,
    /// GPU devices granted (index, thousandths).
    #[serde(default)]
    pub gpus: GpuAlloc,
}

/// Master → slave commands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SlaveCommand {
    /// Run this task.
    Assign(Assignment),
    /// Kill this task's process group (only if it is this attempt): SIGTERM, then SIGKILL
    /// after the grace period.
    StopTask {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Time between SIGTERM and SIGKILL, ms (`None`: the slave's default).
        #[serde(default)]
        grace_ms: Option<u64>,
    },
    /// Read part of an attempt's output file (answered even after the task ended, while
    /// the file is kept).
    ReadLog {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Standard error instead of standard output.
        stderr: bool,
        /// Byte offset to read from.
        offset: u64,
        /// Most bytes to return.
        max_bytes: u64,
    },
    /// The call records of a program task's attempt.
    Calls {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// Run these tasks: all of one slave's new assignments in one message. Answered with
    /// `Accepted` once every one is persisted in the local queue (or already held).
    AssignBatch(Vec<Assignment>),
    /// Change a running attempt's CPU allocation live (S3.2 CPU-count search): its cgroup
    /// quota and its `HETSCHED_CPUS_FILE`. Answered with `Accepted` (also when the attempt
    /// no longer runs: nothing is left to change).
    SetCpus {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The new allocation, millicores.
        cpu_milli: u64,
    },
    /// S0.4: give up this attempt if it is still only queued here (not started), because
    /// another slave steals it. Answered with `Released { released }`; a released attempt
    /// never starts on this slave, even if its assignment arrives again.
    ReleaseQueued {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
}

/// Slave → master answers to commands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SlaveCommandReply {
    /// Persisted in the local queue (or already held).
    Accepted,
    /// Stopped (or was not running).
    Stopped,
    /// Part of a log file.
    Log {
        /// Offset of `data` in the file.
        offset: u64,
        /// The bytes.
        data: serde_bytes::ByteBuf,
        /// Size of the file when read.
        size: u64,
    },
    /// Call records, in call order (empty while none has finished).
    Calls(Vec<CallRecord>),
    /// The answer to `ReleaseQueued`: true when the attempt was queued and is now dropped;
    /// false when it started (or is not held under that attempt).
    Released {
        /// Whether it was released.
        released: bool,
    },
}
