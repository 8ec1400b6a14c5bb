//! Error replies: a consensus refusal mapped to the answer a client can act on, the
//! `NotLeader` redirect, and the small constructors the request handlers share.

use super::MasterShared;
use hetsched_common::protocol::{ErrorKind, ErrorReply, Message};
use hetsched_common::MasterId;
use hetsched_consensus::ProposeError;
use hetsched_master_core::state::{ClusterState, ListError, Outcome};

impl MasterShared {
    /// A `NotLeader` answer naming the leader and its address when known.
    pub fn not_leader(&self, leader: Option<u64>) -> ErrorReply {
        ErrorReply::new(
            ErrorKind::NotLeader {
                leader: leader.map(MasterId),
                leader_addr: leader.and_then(|l| self.addr_of(l)),
            },
            match leader {
                Some(l) => format!("master {} is not the leader; master {l} is", self.id.0),
                None => format!("master {} is not the leader and knows no leader", self.id.0),
            },
        )
    }

    /// Maps a consensus refusal to the answer a client can act on.
    pub fn propose_error(&self, e: ProposeError) -> ErrorReply {
        match e {
            ProposeError::NotLeader { leader } => self.not_leader(leader),
            // Dropped: it did not apply; Unknown: it may have. Both are safe to retry with
            // the same client request id.
            ProposeError::Dropped | ProposeError::Unknown => {
                ErrorReply::new(ErrorKind::Unknown, e.to_string())
            }
            ProposeError::TooLarge(_) | ProposeError::Invalid(_) => {
                ErrorReply::new(ErrorKind::Invalid, e.to_string())
            }
            ProposeError::Stopped | ProposeError::Timeout(_) => {
                ErrorReply::new(ErrorKind::Unavailable, e.to_string())
            }
        }
    }
}

/// The answer for a job id that is not in the state.
pub(super) fn job_not_found(s: &ClusterState, job: hetsched_common::JobId) -> ErrorReply {
    ErrorReply::new(ErrorKind::NotFound, s.job_missing_message(job))
}

pub(super) fn not_found(message: String) -> ErrorReply {
    ErrorReply::new(ErrorKind::NotFound, message)
}

/// Bad input (exit 2, HTTP 400).
pub(super) fn invalid(why: String) -> ErrorReply {
    ErrorReply::new(ErrorKind::Invalid, why)
}

/// A listing's refusal (an unknown job, a bad filter) as a reply.
pub(super) fn list_error(e: ListError) -> ErrorReply {
    match e {
        ListError::NotFound(m) => not_found(m),
        ListError::Invalid(m) => ErrorReply::new(ErrorKind::Invalid, m),
    }
}

/// An outcome the request did not expect: a rejection is the client's fault, anything
/// else the master's.
pub(super) fn unexpected(o: Outcome) -> ErrorReply {
    match o {
        Outcome::Rejected(why) => ErrorReply::new(ErrorKind::Invalid, why),
        o => ErrorReply::new(ErrorKind::Internal, format!("unexpected outcome {o:?}")),
    }
}

/// What a message is, for refusing one a master does not serve.
pub(super) fn message_name(m: &Message) -> &'static str {
    match m {
        Message::Raft { .. } => "raft messages",
        Message::Client(_) => "client requests",
        Message::ClientReply(_) => "client replies",
        Message::Slave(_) => "slave requests",
        Message::SlaveReply(_) => "slave replies",
        Message::ToSlave(_) => "slave commands",
        Message::ToSlaveReply(_) => "slave command replies",
        Message::Error(_) => "error replies",
        Message::Peer(_) => "slave-to-slave requests",
        Message::PeerReply(_) => "slave-to-slave replies",
    }
}
