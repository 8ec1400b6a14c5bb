//! Payloads of the admin-port requests: fault injection into a master's Raft links
//! (`SetFaults`), deliberate bugs for chaos tests (`SetBugs`), and the pages of an exported
//! applied log (`ExportLog`). The requests themselves are
//! [`ClientRequest`](super::ClientRequest) variants.

use crate::MasterId;
use serde::{Deserialize, Serialize};

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
    /// Issue 51: plan without the dependency gate (dependents, singletons and throttled
    /// tasks start whenever resources allow): `early-start`.
    #[serde(default)]
    pub skip_dependency_gate: bool,
    /// Issue 55: the leader exits right after a submit (or a flow) committed, before it
    /// answers: a crash between the commit and the answer, which a retry with the same
    /// idempotency key must survive with one job.
    #[serde(default)]
    pub exit_after_commit: bool,
}

/// One page of a master's applied Raft log ([`ClientRequest::ExportLog`](super::ClientRequest::ExportLog)).
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
