//! The commands of the Raft log and what applying them returns.

use hetsched_common::program::{CallSummary, EngineDecl, SelectionTable};
use hetsched_common::protocol::TaskReport;
use hetsched_common::{
    Attempt, ClientRequestId, EngineKind, JobId, JobSpec, NodeId, NodeResources, TaskId, TaskReason,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One log entry: a command, the leader's clock when it was proposed, and the client request
/// id that makes retries apply at most once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandEnvelope {
    /// Leader's clock, ms since the Unix epoch. The only notion of time `apply` has.
    pub at_ms: u64,
    /// Client request id (for client-originated commands).
    #[serde(default)]
    pub request: Option<ClientRequestId>,
    /// The command.
    pub command: Command,
}

impl CommandEnvelope {
    /// Encodes for the log.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Decodes a log entry.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        rmp_serde::from_slice(bytes).map_err(|e| format!("undecodable command: {e}"))
    }
}

/// Commands of the replicated log. Heartbeats are not among them: only liveness
/// *transitions* (`NodeDown`, `NodeUp`) are logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A slave registers (idempotent on `key`).
    RegisterNode {
        /// Registration key kept by the slave.
        key: u64,
        /// Id the slave was given before, if any.
        node: Option<NodeId>,
        /// Name.
        name: String,
        /// Dispatch address.
        addr: String,
        /// Resources.
        capacity: NodeResources,
        /// Labels.
        labels: BTreeMap<String, String>,
        /// Partitions the node serves (empty: `default`).
        #[serde(default)]
        partitions: Vec<String>,
    },
    /// A node missed its heartbeats: its tasks go back to pending with attempt + 1.
    NodeDown {
        /// Node.
        node: NodeId,
    },
    /// A down node is heard from again.
    NodeUp {
        /// Node.
        node: NodeId,
    },
    /// A job is submitted.
    SubmitJob {
        /// Spec.
        spec: JobSpec,
    },
    /// A job is cancelled.
    CancelJob {
        /// Job.
        job: JobId,
    },
    /// A batch of scheduling decisions, re-checked at apply.
    ApplyPlan(Plan),
    /// A slave started a task.
    TaskStarted {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// A slave's task ended.
    TaskFinished {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code.
        exit_code: i32,
        /// Why it ended, as the slave saw it (`None` in older entries: the exit code decides).
        #[serde(default)]
        reason: Option<TaskReason>,
    },
    /// Benchmark traffic: changes a counter only (and remembers `seq` when `record`).
    Bench {
        /// Benchmark client.
        client: u64,
        /// Sequence number.
        seq: u64,
        /// Remember `seq` for loss checks.
        record: bool,
        /// Padding (kept in the log, not in the state).
        #[serde(default)]
        payload: serde_bytes::ByteBuf,
    },
    /// Proposed by a new leader before it acts: once this applies, the leader's state holds
    /// every entry committed before its term. Changes nothing else.
    LeaderBarrier {
        /// The new leader.
        master: u64,
        /// Issue 53: the new leader's accounting settings (its flags), in force from this
        /// entry on every replica; absent (older logs, tests): unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accounting: Option<super::accounting::AccountingSettings>,
    },
    /// A slave no longer holds a task it had started (found by reconciliation): re-queue it.
    TaskLost {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// Garbage collection (docs/CONTRACT.md, Retention), proposed by the leader: forget finished
    /// jobs (and their tasks) that finished before `jobs_finished_before_ms`, and client
    /// request outcomes recorded before `requests_before_ms`. The cut-offs travel in the
    /// command, so every replica removes exactly the same things.
    GcJobs {
        /// Finished jobs whose last task ended before this (leader's clock, ms) are removed.
        #[serde(default)]
        jobs_finished_before_ms: Option<u64>,
        /// Client request outcomes applied before this are forgotten.
        #[serde(default)]
        requests_before_ms: Option<u64>,
        /// Issue 55: outcomes of requests made from a user's idempotency key
        /// ([`ClientRequestId::is_keyed`]) applied before this are forgotten (absent, as
        /// in a log written before keyed ids: `requests_before_ms` counts for them too).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keyed_requests_before_ms: Option<u64>,
    },
    /// A new priority configuration (S1); its version is the previous one + 1.
    SetPriorityConfig {
        /// The configuration (its `version` field is ignored and set at apply).
        config: hetsched_common::priority::PriorityConfig,
    },
    /// Drain a node: it takes no new tasks; what runs there may finish until `deadline_ms`.
    DrainNode {
        /// Node.
        node: NodeId,
        /// Leader time (ms since the Unix epoch) after which its tasks are stopped and
        /// re-queued with reason `drained`; `None`: they may finish however long they take.
        #[serde(default)]
        deadline_ms: Option<u64>,
    },
    /// Stop draining a node.
    UndrainNode {
        /// Node.
        node: NodeId,
    },
    /// A draining node's deadline passed: re-queue its tasks with reason `drained`.
    RequeueDrained {
        /// Node.
        node: NodeId,
    },
    /// Cancel one task.
    CancelTask {
        /// Task.
        task: TaskId,
    },
    /// An attempt ran past its job's timeout: it fails with reason `timeout` (and is re-run
    /// if the job has retries left).
    TimeoutTask {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// A slave's engines and selection table (S0.5); rebuilds the task–engine relation.
    RecordProfile {
        /// Node.
        node: NodeId,
        /// Its engines.
        engines: Vec<EngineDecl>,
        /// Its selection table.
        table: SelectionTable,
    },
    /// A program task's calls in brief.
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
    /// S3.2: the leader's CPU-count search changes a running GPU task's allocation (the
    /// node's free CPUs change by the difference; an increase must fit).
    SetTaskCpus {
        /// Node.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The new allocation, millicores.
        cpu_milli: u64,
    },
    /// S3.2: a GPU task's search ended at `cpu_milli`: recorded as its class's best count
    /// (the start point of later searches of the class).
    RecordCpuConfig {
        /// The task whose search ended.
        task: TaskId,
        /// Its class.
        class: hetsched_common::TaskClass,
        /// The best count, millicores.
        cpu_milli: u64,
    },
    /// S3.6: a slave halved a CPU task's cores (applied live already) because it contended
    /// with `gpu_task`; the freed cores stay held on the node for `gpu_task` until it ends.
    CompressTask {
        /// Node.
        node: NodeId,
        /// The CPU task.
        task: TaskId,
        /// Its attempt.
        attempt: Attempt,
        /// Its new allocation, millicores.
        cpu_milli: u64,
        /// The GPU task the freed cores are held for.
        gpu_task: TaskId,
    },
    /// A batch of one slave's task reports, applied in order as `TaskStarted` /
    /// `TaskFinished` would be (each fenced by its attempt): one log entry for many tasks.
    TaskReports {
        /// Node.
        node: NodeId,
        /// The reports, oldest first.
        reports: Vec<TaskReport>,
    },
    /// S0.4 work stealing: `from` released the queued attempt `attempt` of `task` (it had not
    /// started); move the task to `to` with attempt + 1. Proposed by the leader only after the
    /// victim confirmed the release, so the task never runs on both.
    StealTask {
        /// Task.
        task: TaskId,
        /// Attempt released by the victim.
        attempt: Attempt,
        /// The victim.
        from: NodeId,
        /// The thief.
        to: NodeId,
    },
    /// S2: a batch the leader planned against the live cluster: one job per input job,
    /// one task per planned core, each pinned to its slave with its blocks.
    SubmitBatch {
        /// The plan.
        batch: super::batch::BatchSpec,
    },
    /// S2: a planned slave was lost: these pending tasks of a batch job get new pins and
    /// blocks (the leader re-planned the job's remaining blocks).
    ReplanBatchJob {
        /// The job.
        job: JobId,
        /// Each task's new pin and blocks.
        tasks: Vec<(TaskId, super::batch::BatchTask)>,
    },
    /// A user's API token (its secret's salted hash; docs/SECURITY.md). `bootstrap`: the
    /// first administrator token, refused once the ACL was bootstrapped.
    CreateToken {
        /// The token as stored (`created_ms` is set from the entry's clock).
        token: super::acl::TokenRecord,
        /// `acl bootstrap`.
        #[serde(default)]
        bootstrap: bool,
    },
    /// Revokes a token.
    RevokeToken {
        /// Its accessor.
        accessor: String,
    },
    /// A job submitted with the leader's placement of its new tasks, planned on a copy of
    /// the state with the job in it: applied as [`Command::SubmitJob`], then each placement
    /// re-checked exactly as an [`Command::ApplyPlan`]'s (a stale one leaves its task
    /// pending). One Raft round from an idle submit to its dispatch instead of two
    /// (docs/DESIGN.md, "Idle submit in one round").
    SubmitPlaced {
        /// Spec.
        spec: JobSpec,
        /// Placements of the job's tasks, by index in the job.
        place: Vec<PlaceNew>,
        /// As [`Plan::queue_depth`].
        #[serde(default)]
        queue_depth: u32,
    },
    /// Issue 51: a flow's steps, every step's job or none (`flows.rs`); each step's names
    /// resolved to the jobs its upstream steps became in this entry.
    SubmitFlow {
        /// The steps.
        flow: hetsched_common::FlowSpec,
    },
    /// Issue 54, group commit: several slaves' [`Command::TaskReports`] batches in one
    /// entry, gathered by the leader while its earlier report entries committed. Applied
    /// exactly as that many `TaskReports` entries one after another (each batch fenced by
    /// its attempts, an unknown node's batch ignored alone); only the log index and the
    /// clock are shared. At 10,000 slaves a task's reports were an entry of their own.
    GroupedTaskReports {
        /// Each slave's batch, in the order the leader received them.
        groups: Vec<NodeReports>,
    },
}

/// One slave's batch of task reports inside a [`Command::GroupedTaskReports`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReports {
    /// The reporting slave.
    pub node: NodeId,
    /// Its reports, oldest first (as [`Command::TaskReports`]).
    pub reports: Vec<TaskReport>,
}

/// One placement of a task of a job not yet applied: the task is named by its index in
/// the job, since its id is handed out when the submission applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaceNew {
    /// The task's index in its job.
    pub index: u32,
    /// As [`Assign`], with the task's id left out.
    pub node: NodeId,
    /// As [`Assign::queued`].
    #[serde(default)]
    pub queued: bool,
    /// As [`Assign::engine`].
    #[serde(default)]
    pub engine: Option<EngineKind>,
    /// As [`Assign::borrowed`].
    #[serde(default)]
    pub borrowed: bool,
}

impl PlaceNew {
    /// `a` named by the index of its task among `tasks`, a job's tasks (consecutive ids;
    /// `None`: not one of them).
    pub fn of(a: &Assign, tasks: &[TaskId]) -> Option<Self> {
        let index = usize::try_from(a.task.0.checked_sub(tasks.first()?.0)?).ok()?;
        if tasks.get(index) != Some(&a.task) {
            return None;
        }
        Some(Self {
            index: u32::try_from(index).ok()?,
            node: a.node,
            queued: a.queued,
            engine: a.engine,
            borrowed: a.borrowed,
        })
    }

    /// The assignment of the task at this index of `tasks` (`None`: no such index).
    pub fn assign(&self, tasks: &[TaskId]) -> Option<Assign> {
        Some(Assign {
            task: *tasks.get(self.index as usize)?,
            node: self.node,
            queued: self.queued,
            engine: self.engine,
            borrowed: self.borrowed,
        })
    }
}

/// One placement decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assign {
    /// Task.
    pub task: TaskId,
    /// Node.
    pub node: NodeId,
    /// S0.3: the task waits in the node's local queue, counted against the node's queued
    /// allowance (`Plan::queue_depth`) instead of its free resources.
    #[serde(default)]
    pub queued: bool,
    /// S0.1–2: the engine kind chosen for an API-program task (its target, or the
    /// second-best kind when the target is scarce).
    #[serde(default)]
    pub engine: Option<EngineKind>,
    /// S3: the task runs there on borrowed capacity (a CPU task on a GPU node's reserved
    /// CPUs, a GPU task on CPU-pool CPUs or on the other GPU pool). Decided by the scheduler
    /// so that replicas agree; older logs lack it.
    #[serde(default)]
    pub borrowed: bool,
}

impl Assign {
    /// An assignment that takes the node's free resources, with no engine choice.
    pub fn to(task: TaskId, node: NodeId) -> Self {
        Self {
            task,
            node,
            queued: false,
            engine: None,
            borrowed: false,
        }
    }
}

/// The scheduler's output for one round. `preemptions` and `moves` are filled by the
/// priority (S1) and work-stealing (S0.4) stages in later work; today they are always empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Tasks to place.
    pub assignments: Vec<Assign>,
    /// Tasks to stop so that others can run (S1).
    #[serde(default)]
    pub preemptions: Vec<TaskRef>,
    /// Tasks to move between nodes (S0.4 stealing).
    #[serde(default)]
    pub moves: Vec<Assign>,
    /// S1 preemptions: for each, the task that needs room and the victims on its node.
    #[serde(default)]
    pub preempt: Vec<Preemption>,
    /// S0.3: most queued assignments a node may hold (`--queue-depth` of the leader that
    /// planned; carried so that every replica re-checks queued assignments alike).
    #[serde(default)]
    pub queue_depth: u32,
    /// Issue 53 × S0.3: queued attempts (not promoted, so holding nothing) taken back to
    /// the pending queue because a task of a user ahead of theirs in fair share, at the same
    /// S1 priority, takes their place in the slave's queue. Applied before the assignments;
    /// each one only while that attempt is still queued on that node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unqueue: Vec<TaskRef>,
}

/// One preemption decision: stop `victims` on `node` so that `preemptor` can run there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The higher-priority task that fits nowhere.
    pub preemptor: TaskId,
    /// The node it will fit on once the victims stopped.
    pub node: NodeId,
    /// The attempts to stop there.
    pub victims: Vec<TaskRef>,
    /// S3 take-back: a GPU task reclaims a GPU node's reserved CPUs from CPU tasks that
    /// borrowed them; victims may then be of the preemptor's priority (CPU tasks only).
    #[serde(default)]
    pub take_back: bool,
}

impl Plan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.assignments.is_empty()
            && self.preemptions.is_empty()
            && self.moves.is_empty()
            && self.preempt.is_empty()
            && self.unqueue.is_empty()
    }
}

/// A task's attempt on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskRef {
    /// Task.
    pub task: TaskId,
    /// Node.
    pub node: NodeId,
    /// Attempt.
    pub attempt: Attempt,
}

/// What applying a command returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Node registered (or re-registered).
    Registered {
        /// Its id.
        node: NodeId,
    },
    /// Job accepted.
    Submitted {
        /// Job.
        job: JobId,
        /// Its tasks.
        tasks: Vec<TaskId>,
    },
    /// Job cancelled.
    Cancelled {
        /// Job.
        job: JobId,
        /// Tasks that went to cancelled.
        tasks: u32,
        /// Attempts that were assigned or running: their slaves must stop them.
        stop: Vec<TaskRef>,
    },
    /// A job was accepted with placements ([`Command::SubmitPlaced`]).
    SubmittedPlaced {
        /// Job.
        job: JobId,
        /// Its tasks.
        tasks: Vec<TaskId>,
        /// Placements that held, with their new attempts: to dispatch.
        accepted: Vec<TaskRef>,
        /// Placements that were stale (their tasks stay pending).
        rejected: u32,
    },
    /// A plan was applied.
    PlanApplied {
        /// Assignments that held, with their new attempts: to dispatch.
        accepted: Vec<TaskRef>,
        /// Assignments that were stale.
        rejected: u32,
        /// Attempts preempted (S1): their slaves must stop them.
        #[serde(default)]
        preempted: Vec<TaskRef>,
    },
    /// A task report applied.
    TaskUpdated,
    /// A node went down; these attempts were lost and re-queued.
    NodeDown {
        /// Node.
        node: NodeId,
        /// Lost attempts.
        requeued: Vec<TaskRef>,
    },
    /// A node came back.
    NodeUp {
        /// Node.
        node: NodeId,
    },
    /// The command was stale and changed nothing (fencing).
    Ignored(String),
    /// The command was invalid and changed nothing.
    Rejected(String),
    /// Garbage collection removed these.
    Collected {
        /// Jobs removed.
        jobs: u64,
        /// Tasks removed with them.
        tasks: u64,
        /// Client request outcomes forgotten.
        requests: u64,
    },
    /// A node's drain state changed.
    DrainChanged {
        /// Node.
        node: NodeId,
    },
    /// A drained node's tasks were re-queued; their slaves must stop these attempts.
    Drained {
        /// Node.
        node: NodeId,
        /// The attempts that were re-queued.
        requeued: Vec<TaskRef>,
    },
    /// A running attempt's CPU allocation changed (S3.2): its slave must apply it.
    CpusSet {
        /// The attempt.
        attempt: TaskRef,
        /// The new allocation, millicores.
        cpu_milli: u64,
    },
    /// S0.4: a queued task left its node. `assigned`: its new attempt on the thief (to
    /// dispatch); `None` when the thief could no longer take it and it went back to pending.
    Stolen {
        /// The released attempt.
        from: TaskRef,
        /// The new attempt, if placed on the thief.
        assigned: Option<TaskRef>,
    },
    /// S2: a batch was submitted.
    BatchSubmitted {
        /// Its id.
        batch: u64,
        /// Its jobs, in the input's order.
        jobs: Vec<JobId>,
        /// All its tasks.
        tasks: Vec<TaskId>,
    },
    /// S2: pending tasks of a batch job were re-pinned.
    BatchReplanned {
        /// The job.
        job: JobId,
        /// How many tasks.
        tasks: u32,
    },
    /// Issue 51: a flow was submitted, one job per step.
    FlowSubmitted {
        /// Its id (`flow-N`).
        flow: u64,
        /// Each step's name and job, in the file's order.
        jobs: Vec<(String, JobId)>,
    },
    /// An attempt timed out; its slave must stop it.
    TimedOut {
        /// The attempt.
        stop: TaskRef,
        /// Whether the task went back to pending for a re-run.
        retried: bool,
    },
}
