//! The crate's errors: why a proposal (or read, or membership change) did not succeed
//! ([`ProposeError`]), and why the node could not start or run ([`Error`]).

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
    /// The request is invalid (e.g. removing an unknown member, adding one twice).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No answer within the time allowed (e.g. a leader transfer that did not complete).
    #[error("timed out: {0}")]
    Timeout(String),
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
