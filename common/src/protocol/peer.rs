//! Slave ↔ slave forwarding (S0.6): the call sent to a peer and its answer, and the query
//! by which a slave asks the leader which peer to send a call to.

use crate::program::{Api, ApiCall, CallRecord};
use crate::{EngineKind, NodeId};
use serde::{Deserialize, Serialize};

/// Most argument bytes one forwarded call carries (docs/CONTRACT.md): a `gemm n=1024` call
/// (8 MiB of matrices) fits, with room under the 16 MiB frame cap.
pub const MAX_FORWARD_ARG_BYTES: u64 = 12 * 1024 * 1024;
/// Most result bytes a peer sends back for one forwarded call.
pub const MAX_FORWARD_RESULT_BYTES: u64 = 12 * 1024 * 1024;

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
    /// Bytes that would cross the link: arguments out and result back (0 from older
    /// slaves: `arg_bytes` stands in).
    #[serde(default)]
    pub transfer_bytes: u64,
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
        /// The call's argument bytes as the sender's program generated them (at most
        /// [`MAX_FORWARD_ARG_BYTES`]); empty from older slaves, whose peers regenerate them
        /// from the seed.
        #[serde(default, with = "serde_bytes")]
        args: Vec<u8>,
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
        /// The result bytes, written back to the caller (at most
        /// [`MAX_FORWARD_RESULT_BYTES`]; empty from older slaves).
        #[serde(default, with = "serde_bytes")]
        result: Vec<u8>,
    },
    /// Not run: no unit of the acceptable kinds is free (or forwarding is off here).
    Refused {
        /// Why.
        reason: String,
    },
}
