//! Master ↔ slave: registration, heartbeats and task reports (slave → master), assignments
//! and the other commands (master → slave), and the node labels and GPU pools a slave
//! announces.

use super::peer::{ForwardQuery, ForwardTarget};
use crate::program::{CallRecord, CallSummary, EngineDecl, SelectionTable};
use crate::{
    Attempt, EngineKind, GpuAlloc, JobId, MasterId, NodeId, NodeResources, ResourceRequest, TaskId,
    TaskReason,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Node label naming a slave's GPU utilisation probe (`nvml`, `emulated`).
pub const PROBE_GPU_LABEL: &str = "hetsched.probe.gpu";

/// Node label naming a slave's memory-bandwidth probe (`resctrl`, `emulated`).
pub const PROBE_MEMBW_LABEL: &str = "hetsched.probe.membw";

/// Node label with a slave's memory bandwidth, MB/s (S3.6; `nodes --json`
/// `"membw_total_mbps"`).
pub const MEMBW_TOTAL_LABEL: &str = "hetsched.membw-total-mbps";

/// Node label saying how that bandwidth was obtained: `triad`, `resctrl` or `flag`
/// (`nodes --json` `"membw_total_source"`).
pub const MEMBW_SOURCE_LABEL: &str = "hetsched.membw-total-source";

/// The node label a slave sets to say how its tasks are isolated (`v1`, `v2`, `none`); the
/// master shows it as [`NodeInfo::cgroup`](super::NodeInfo::cgroup).
pub const CGROUP_LABEL: &str = "hetsched.cgroup";

/// Issue 52: the node label naming the OCI runtime that passed the slave's start probe
/// (`runc`, `crun`); absent where none did. The master sends container tasks only to nodes
/// with it (`nodes --json` `"containers": {"runtime"}`).
pub const CONTAINER_RUNTIME_LABEL: &str = "hetsched.containers.runtime";

/// Why a slave runs no containers (its runtime probe's failures), where it runs none
/// (`nodes --json` `"containers": {"why"}`).
pub const CONTAINER_WHY_LABEL: &str = "hetsched.containers.why";

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
        /// Its links to peers as measured by its forwarded calls (S0.6; `nodes --json`
        /// shows them on its entry).
        #[serde(default)]
        links: Vec<super::LinkEstimate>,
        /// Issue 52: the images its store holds (`nodes --json` `"containers": {"images"}`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<super::ImageInfo>,
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
    /// The slave takes the leader's commands (assignments, stops, releases, CPU changes)
    /// on the connection this request came on, so the leader needs no connection of its
    /// own to the slave: one descriptor per slave on the leader. Sent again on each new
    /// connection to a leader; answered with `Ack`. A master that predates it answers
    /// `Malformed` and keeps dialling the slave's address, as it always did.
    Attach {
        /// Node.
        node: NodeId,
    },
}

impl SlaveRequest {
    /// The node a request speaks for (a registration: the id it asks to keep, if any).
    /// Every kind is listed, so a new one must say which node it names.
    pub fn node(&self) -> Option<NodeId> {
        match self {
            Self::Register { node, .. } => *node,
            Self::Heartbeat { node, .. }
            | Self::TaskStarted { node, .. }
            | Self::TaskFinished { node, .. }
            | Self::RecordProfile { node, .. }
            | Self::RecordCalls { node, .. }
            | Self::TaskReports { node, .. }
            | Self::StealRequest { node }
            | Self::Attach { node } => Some(*node),
            Self::ForwardQuery(q) => Some(q.node),
        }
    }
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

/// What one ended attempt used, as its slave measured it (the accounting issue's readings:
/// `/proc` and cgroup counters, the GPU probe). Every field is `None` where nothing was
/// measured; it travels in [`TaskReport::Finished`] and is left out of the encoding when
/// absent, so reports and log entries written before it existed decode and encode the same.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Wall time from the process's start to its end, ms (the slave's monotonic clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// CPU time, user + system, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// Peak resident memory, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mem_mib: Option<u64>,
    /// GPU seconds: the granted shares (devices, fractions summed) times the wall time;
    /// 0 for an attempt that held no GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_s: Option<f64>,
    /// GPU utilisation integrated over time (utilisation × seconds / 100, summed over the
    /// attempt's devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_s: Option<f64>,
    /// Whether `gpu_util_s` came from the emulated probe (`HETSCHED_GPU_UTIL_FILE`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gpu_emulated: bool,
}

/// One task report inside [`SlaveRequest::TaskReports`].
///
/// Not `Copy`: a finish carries its reason's detail and its usage record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        /// One human line beside `reason` (the image step that failed, ...); `None` from
        /// older slaves and when there is nothing to add.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason_detail: Option<String>,
        /// What the attempt used, where the slave measured it; `None` from older slaves.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<UsageRecord>,
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
    /// S0.3: a queued attempt (`Assignment::queued`) the slave has room for by its own view;
    /// it asks the leader to commit the start (the attempt takes its resources in the
    /// replicated state) and starts it only once the answer
    /// ([`SlaveResponse::Promoted`]) names it. Asked again while unanswered.
    WantsStart {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
}

/// The longest heartbeat period a leader asks of a slave, ms (issue 54; at the default
/// 2,500 heartbeats a second, 150,000 slaves). Slaves cap what they are asked at it too.
pub const MAX_HEARTBEAT_MS: u64 = 60_000;

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
        /// Issue 54: the shortest heartbeat period the leader asks of this slave, ms, so that
        /// the whole cluster beats at most `--max-heartbeats-per-sec` times a second; 0 (and
        /// from older masters): the slave's own period.
        #[serde(default)]
        heartbeat_ms: u64,
    },
    /// A report is committed (or was stale and ignored): the slave may forget it.
    Ack,
    /// The answer to a [`SlaveRequest::ForwardQuery`]: the peer to send the call to, if any.
    ForwardTarget(Option<ForwardTarget>),
    /// The answer to a [`SlaveRequest::TaskReports`] that carried `WantsStart` asks: the
    /// reports are committed (as `Ack`), and these queued attempts hold their resources in
    /// the replicated state now: the slave may start them.
    Promoted {
        /// The (task, attempt) pairs promoted, in the order asked.
        tasks: Vec<(TaskId, Attempt)>,
    },
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
    /// S0.3: assigned beyond the node's free resources, to wait in the local queue. The
    /// slave never starts it on its own: it asks (`TaskReport::WantsStart`) and starts it
    /// once the leader has committed the start (`SlaveResponse::Promoted`).
    #[serde(default)]
    pub queued: bool,
    /// S0.1–2: the engine unit a program task holds on this node (docs/DESIGN.md, S0.2);
    /// its calls run there. `None`: a command task, or a program that books none.
    #[serde(default)]
    pub engine: Option<EngineGrant>,
    /// The job's name (`SLURM_JOB_NAME`). Left out of the encoding when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_name: String,
    /// The directory the task starts in (the job's `workdir`); `None`: the slave's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Issue 52: the job's container image (`None`: a bare task). A slave that cannot run
    /// it ends the attempt with reason `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The user it runs as in the image (`--run-as`; `None`: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// Its network (`--network`; `none`: a namespace of its own; `None`: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

/// A booked engine unit: its kind, and for a GPU the device (also in `gpus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineGrant {
    /// Kind.
    pub kind: EngineKind,
    /// The GPU device index (GPUs only).
    #[serde(default)]
    pub device: Option<u32>,
}

/// Master → slave commands.
// `Assign` is the large one and the common one: boxing it would cost an allocation per
// decoded assignment to save stack space in the rare small messages.
#[allow(clippy::large_enum_variant)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskReason;

    /// A finish as slaves wrote it before `reason_detail` and `usage` existed.
    #[derive(Serialize)]
    enum OldTaskReport {
        Finished {
            task: TaskId,
            attempt: Attempt,
            exit_code: i32,
            reason: Option<TaskReason>,
        },
    }

    #[test]
    fn a_finish_without_detail_or_usage_encodes_as_before_and_old_ones_decode() {
        let old = OldTaskReport::Finished {
            task: TaskId(7),
            attempt: 2,
            exit_code: 1,
            reason: Some(TaskReason::Exit),
        };
        let old_bytes = rmp_serde::to_vec_named(&old).expect("encode");
        let new = TaskReport::Finished {
            task: TaskId(7),
            attempt: 2,
            exit_code: 1,
            reason: Some(TaskReason::Exit),
            reason_detail: None,
            usage: None,
        };
        // Same bytes: log entries and state hashes of reports without the new slots are
        // unchanged.
        assert_eq!(rmp_serde::to_vec_named(&new).expect("encode"), old_bytes);
        let decoded: TaskReport = rmp_serde::from_slice(&old_bytes).expect("decode");
        assert_eq!(decoded, new);
    }

    #[test]
    fn a_finish_with_detail_and_usage_round_trips() {
        let report = TaskReport::Finished {
            task: TaskId(7),
            attempt: 1,
            exit_code: 125,
            reason: Some(TaskReason::Image),
            reason_detail: Some("docker://r/x:1: manifest unknown".into()),
            usage: Some(UsageRecord {
                elapsed_ms: Some(1500),
                cpu_s: Some(0.25),
                max_mem_mib: Some(12),
                gpu_s: Some(1.5),
                gpu_util_s: Some(0.75),
                gpu_emulated: true,
            }),
        };
        let bytes = rmp_serde::to_vec_named(&report).expect("encode");
        let back: TaskReport = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, report);
        // A usage record measured in part leaves the rest out, and decodes as `None`s.
        let partial = UsageRecord {
            cpu_s: Some(1.0),
            ..UsageRecord::default()
        };
        let bytes = rmp_serde::to_vec_named(&partial).expect("encode");
        let back: UsageRecord = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, partial);
        assert_eq!(back.max_mem_mib, None);
    }
}
