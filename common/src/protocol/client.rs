//! Client (CLI) ↔ master: the requests of `hetsched submit`, `cancel`, the listings and
//! the administrative commands, and their answers. The listed views themselves are in
//! `views.rs`; the admin-port payloads in `admin.rs`.

use super::admin::{BugSpec, FaultSpec, LogPage};
use super::views::{JobInfo, MemberInfo, NodeInfo, ProfilesInfo, StatusInfo, TaskInfo};
use crate::program::CallRecord;
use crate::{Attempt, ClientRequestId, EngineKind, JobId, JobSpec, MasterId, NodeId, TaskId};
use serde::{Deserialize, Serialize};

/// Requests of the CLI and other clients to a master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Submit a job (idempotent on `request`).
    Submit {
        /// Client request id (a retried submit with the same id makes no second job).
        request: ClientRequestId,
        /// The job.
        spec: JobSpec,
        /// Accept the job even when no registered node could ever hold one of its tasks
        /// (nodes may join later); without it the leader refuses such a job as invalid
        /// (`submit --allow-unplaceable`, docs/CONTRACT.md). Absent from an older client's
        /// request: `false`.
        #[serde(default)]
        allow_unplaceable: bool,
    },
    /// S2: plan a data-local batch against the live cluster and submit it (one job per
    /// input job, one task per planned core; idempotent on `request`).
    SubmitBatch {
        /// Client request id.
        request: ClientRequestId,
        /// The batch.
        batch: super::batch::BatchSubmit,
    },
    /// Issue 51: submit a flow's steps in one log entry, every step's job or none
    /// (idempotent on `request`).
    SubmitFlow {
        /// Client request id.
        request: ClientRequestId,
        /// The flow, checked by the client ([`crate::flowfile`]).
        flow: crate::FlowSpec,
    },
    /// Issue 51: a flow's steps with their jobs and states.
    Flow {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
        /// The flow.
        flow: u64,
    },
    /// Issue 51: cancel every unfinished step of a flow.
    CancelFlow {
        /// Client request id.
        request: ClientRequestId,
        /// The flow.
        flow: u64,
    },
    /// S2: a batch's planned and actual makespan.
    Batch {
        /// As in `Status`.
        #[serde(default)]
        stale: bool,
        /// The batch.
        batch: u64,
    },
    /// S2: cancel every job of a batch.
    CancelBatch {
        /// Client request id.
        request: ClientRequestId,
        /// The batch.
        batch: u64,
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
    /// The first administrator token (`acl bootstrap`): answered once per cluster.
    AclBootstrap,
    /// A new token for `user` with `role` (`acl token create`), valid for `ttl_ms` when given.
    CreateToken {
        /// The user the token acts as.
        user: String,
        /// Its role.
        #[serde(default)]
        role: super::acl::TokenRole,
        /// Validity from now, ms (`None`: no end).
        #[serde(default)]
        ttl_ms: Option<u64>,
    },
    /// Every token, without secrets (`acl token list`).
    Tokens,
    /// Revoke a token by its accessor (`acl token revoke`).
    RevokeToken {
        /// The token's public name.
        accessor: String,
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
    /// Why a task waits: every node's verdict, what preemption could free, its queue place.
    Explain {
        /// The task.
        task: TaskId,
    },
    /// Users against their quotas with DRF shares, and the leader's last hour (`usage`).
    Usage,
    /// Issue 55: a long poll. Answered (with the job as `Jobs` lists it) when the job ends,
    /// or with `change` at its next change of state (a task's included), or when
    /// `timeout_ms` passed (capped at 10 minutes), by whichever master is asked, from its
    /// own applied state.
    WaitJob {
        /// The job.
        job: JobId,
        /// Longest wait, ms.
        timeout_ms: u64,
        /// Answer at the job's next change rather than at its end.
        #[serde(default)]
        change: bool,
    },
    /// Issue 53: ended attempts' usage records (`history`), oldest first.
    AccountingHistory {
        /// Which records.
        filter: super::HistoryFilter,
        /// Answer from this master's own records (they are the same on every master once
        /// it applied the same log).
        #[serde(default)]
        stale: bool,
    },
    /// Issue 53: totals of the usage records (`usage`).
    AccountingUsage {
        /// From this time on, ms since the Unix epoch.
        since_ms: u64,
        /// Grouping.
        by: super::UsageBy,
        /// Only this user's (a plain user's request is narrowed to its own).
        #[serde(default)]
        user: Option<String>,
        /// Answer from this master's own records.
        #[serde(default)]
        stale: bool,
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
    /// Only tasks waiting for this reason (jobs: with such a task); one of
    /// [`WAIT_REASONS`](super::WAIT_REASONS).
    #[serde(default)]
    pub reason: Option<String>,
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
    /// S2: a batch was planned and submitted.
    BatchSubmitted(super::batch::BatchSubmitted),
    /// S2: one batch.
    Batch(super::batch::BatchInfo),
    /// Issue 51: a flow was submitted.
    FlowSubmitted(super::flow::FlowSubmitted),
    /// Issue 51: one flow.
    Flow(super::flow::FlowInfo),
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
    /// A token just created (its secret shown this once).
    Token(super::acl::NewToken),
    /// Tokens, without secrets.
    Tokens(Vec<super::acl::TokenInfo>),
    /// `explain`'s answer.
    Explain(super::ExplainInfo),
    /// `usage`'s answer.
    Usage(super::UsageInfo),
    /// Issue 53: `AccountingHistory`'s answer.
    History(super::HistoryInfo),
    /// Issue 53: `AccountingUsage`'s answer.
    AccountingUsage(super::AccountingUsageInfo),
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
