//! Raft replication for hetsched masters: raft-rs `RawNode` driven by an actix actor, log and
//! hard state in sled, Raft messages carried in hetsched frames over TCP.
//!
//! The crate knows nothing of tasks: it replicates opaque commands into a [`StateMachine`].
//!
//! ```text
//!  client ──propose(bytes)──▶ RaftNode actor ──Ready──▶ sled (entries, hard state; fsync)
//!                               │    ▲                    │
//!                         msgs  │    │ step(msgs)         ▼
//!                               ▼    │              committed entries ──▶ StateMachine::apply
//!                            peers (TCP)                                   └─▶ resolves the proposal
//! ```
//!
//! STATUS: API skeleton — the implementation lands with the consensus work of issue 2.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the log replicates into. Implementations must be deterministic: the same sequence of
/// `apply` calls yields the same state on every replica (no clock, no randomness, no I/O).
pub trait StateMachine: Send + 'static {
    /// What `apply` returns to the proposer.
    type Output: Send + 'static;
    /// Applies one committed command at log `index`.
    fn apply(&mut self, index: u64, command: &[u8]) -> Self::Output;
    /// A serialised copy of the whole state.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
}

/// Configuration of one Raft member.
#[derive(Clone, Debug)]
pub struct RaftConfig {
    /// This member's id (≥ 1).
    pub id: u64,
    /// Every initial member (this one included) and its cluster address. Only used to
    /// bootstrap an empty data dir; afterwards the configuration comes from the log.
    pub peers: BTreeMap<u64, String>,
    /// Where sled keeps the log.
    pub data_dir: PathBuf,
    /// Raft tick interval.
    pub tick: Duration,
    /// Election timeout in ticks (randomised by raft-rs between this and twice this).
    pub election_ticks: usize,
    /// Heartbeat interval in ticks.
    pub heartbeat_ticks: usize,
}

/// Role of this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Leader.
    Leader,
    /// Follower.
    Follower,
    /// Candidate.
    Candidate,
    /// Pre-candidate (pre-vote).
    PreCandidate,
}

/// A snapshot of this member's Raft status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// This member.
    pub id: u64,
    /// Known leader.
    pub leader: Option<u64>,
    /// Term.
    pub term: u64,
    /// Role.
    pub role: Role,
    /// Commit index.
    pub commit_index: u64,
    /// Applied index.
    pub applied_index: u64,
}

/// Why a proposal did not apply.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// This member is not the leader.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// Known leader.
        leader: Option<u64>,
    },
    /// The entry was overwritten by another term's entry: it did not apply.
    #[error("proposal dropped by a leadership change; it did not apply")]
    Dropped,
    /// Leadership was lost before the entry applied: it may or may not apply.
    #[error("leadership lost before the proposal applied; outcome unknown")]
    Unknown,
    /// The command exceeds the size limit.
    #[error("proposal of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// The node is shutting down.
    #[error("raft node stopped")]
    Stopped,
}

/// Errors of starting or running the Raft node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// sled failed.
    #[error("storage: {0}")]
    Storage(String),
    /// raft-rs refused.
    #[error("raft: {0}")]
    Raft(String),
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Handle to a running Raft member. Cheap to clone, `Send`.
pub struct Consensus<S: StateMachine> {
    _sm: std::marker::PhantomData<fn() -> S>,
}

impl<S: StateMachine> Clone for Consensus<S> {
    fn clone(&self) -> Self {
        Self {
            _sm: std::marker::PhantomData,
        }
    }
}

impl<S: StateMachine> Consensus<S> {
    /// Starts the member (inside an actix `System`): opens sled in `cfg.data_dir`, bootstraps
    /// from `cfg.peers` when the data dir is empty, and replays the log into `sm`.
    pub fn start(_cfg: RaftConfig, _sm: S) -> Result<Self> {
        Err(Error::Config("consensus not implemented yet".into()))
    }

    /// Proposes `command`; resolves once it is applied (with `apply`'s output).
    pub async fn propose(&self, _command: Vec<u8>) -> Result<S::Output, ProposeError> {
        Err(ProposeError::Stopped)
    }

    /// Feeds Raft messages received from peer `from` (protobuf bytes each).
    pub fn step(&self, _from: u64, _msgs: Vec<Vec<u8>>) {}

    /// Current status (cheap).
    pub fn status(&self) -> RaftStatus {
        RaftStatus {
            id: 0,
            leader: None,
            term: 0,
            role: Role::Follower,
            commit_index: 0,
            applied_index: 0,
        }
    }

    /// A receiver that sees every status change (leader, term, role, applied index).
    pub fn watch(&self) -> tokio::sync::watch::Receiver<RaftStatus> {
        tokio::sync::watch::channel(self.status()).1
    }

    /// Cluster address of member `id`, if known.
    pub fn peer_addr(&self, _id: u64) -> Option<String> {
        None
    }
}
