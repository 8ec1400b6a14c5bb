//! What the crate replicates into ([`StateMachine`]) and the plain data a
//! [`crate::Consensus`] handle reports: status and role, members, counters, exported log pages.

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

/// A member of the Raft configuration, as this member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Id.
    pub id: u64,
    /// Cluster address, if known.
    pub addr: Option<String>,
    /// Voter (true) or learner.
    pub voter: bool,
    /// Highest log index known to be replicated there (known on the leader only).
    pub match_index: Option<u64>,
}

/// Counters of this member's log work (for benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsensusStats {
    /// Proposals accepted into the log by this member as leader.
    pub proposals: u64,
    /// Entries made durable.
    pub entries_persisted: u64,
    /// Disk flushes (fsyncs) of the log.
    pub flushes: u64,
    /// Snapshots taken.
    pub snapshots: u64,
    /// First index still in the log (everything before is compacted).
    pub first_index: u64,
    /// Snapshots sent to followers (as leader).
    pub snapshots_sent: u64,
    /// Snapshots received from a leader and installed.
    pub snapshots_received: u64,
}

/// One page of a member's applied log, as [`crate::Consensus::export_log`] reads it (the chaos
/// tool replays it to check every index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogPage {
    /// Set when the page starts in the compacted part of the log: the snapshot's index and
    /// its [`StateMachine::snapshot`] bytes, standing for everything up to that index.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Commands in index order, `(index, bytes)`; no-ops and configuration changes left out.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// Where the next page starts (one past the last index this page covers).
    pub next: u64,
    /// The member's applied index when the page was read: the export is complete once
    /// `next > applied`.
    pub applied: u64,
}
