//! Every message that crosses a socket, grouped by who talks to whom.
//!
//! Named-field MessagePack (`rmp_serde::to_vec_named`) with `#[serde(default)]` on fields
//! added after version 1, so a newer peer's extra fields are ignored and an older peer's
//! missing ones take their defaults.
//!
//! This module holds the frame body ([`Message`]) and the error answer any request may get;
//! the messages themselves live by conversation: `client.rs` (client ↔ master),
//! `views.rs` (what listings show), `flow.rs` (flows), `acl.rs` (tokens and roles), `waiting.rs` (why tasks wait,
//! `explain`), `slave.rs` (master ↔ slave), `peer.rs` (slave ↔ slave
//! forwarding) and `admin.rs` (admin-port payloads). Everything is re-exported here, so
//! `hetsched_common::protocol::X` names every type. The frame envelope is
//! [`crate::wire::Envelope`].

mod accounting;
mod acl;
mod admin;
mod batch;
mod client;
mod flow;
mod peer;
mod slave;
mod views;
mod waiting;

pub use accounting::{
    time_bound, AccountingUsageInfo, AttemptRecord, FairShareInfo, HistoryFilter, HistoryInfo,
    UsageBy, UsageTotal,
};
pub use acl::{NewToken, TokenInfo, TokenRole};
pub use admin::{BugSpec, FaultSpec, LogEntry, LogPage, LogSnapshot};
pub use batch::{
    BatchInfo, BatchJobInfo, BatchSubmit, BatchSubmitted, BatchTaskInfo, BlockRef, BLOCKS_ENV,
};
pub use client::{ClientRequest, ClientResponse, DryRunTask, ListFilter, LogChunk};
pub use flow::{FlowInfo, FlowStepInfo, FlowSubmitted};
pub use peer::{
    ForwardQuery, ForwardTarget, LinkEstimate, PeerReply, PeerRequest, MAX_FORWARD_ARG_BYTES,
    MAX_FORWARD_RESULT_BYTES,
};
pub use slave::{
    Assignment, EngineGrant, EngineLoad, GpuPool, HeldPhase, HeldTask, ProbeSample, SlaveCommand,
    SlaveCommandReply, SlaveRequest, SlaveResponse, TaskReport, UsageRecord, CGROUP_LABEL,
    CONTAINER_RUNTIME_LABEL, CONTAINER_WHY_LABEL, GPU_POOL_LABEL, MAX_HEARTBEAT_MS,
    MEMBW_SOURCE_LABEL, MEMBW_TOTAL_LABEL, PROBE_GPU_LABEL, PROBE_MEMBW_LABEL,
};
pub use views::{
    ContainersInfo, EngineInfo, ImageInfo, JobInfo, MemberInfo, NodeCounts, NodeInfo,
    NodeProfileInfo, OpenFiles, ProbesInfo, ProfilesInfo, RaftCounters, RelationInfo, StatusInfo,
    TaskInfo,
};
pub use waiting::{
    is_wait_reason, Amounts, AttemptInfo, DependencyInfo, ExplainInfo, HistorySample, NodeVerdict,
    PreemptionVerdict, QuotaLimits, UsageInfo, UserUsage, WaitingInfo, WAIT_REASONS,
};

use crate::MasterId;
use serde::{Deserialize, Serialize};

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
    /// The request is served only on another port (the admin listener, docs/CONTRACT.md).
    Forbidden,
    /// The caller may not do this (its certificate's role, its token's role or user);
    /// exit 3, HTTP 403.
    PermissionDenied,
    /// The request needs credentials (a token or a client certificate) and came without;
    /// exit 3, HTTP 401.
    Unauthenticated,
    /// Admission back-pressure: the pending queue is at its cap or the user is over the
    /// submit rate. Nothing was done; retry later (exit 5, "busy, retry").
    Busy,
}
