//! What goes into the duties engine: the events the executor feeds it, the clock it reads
//! them with, the tags that route a proposal's result back to the duty that asked, and how
//! a heartbeat is answered before it becomes an event.

use crate::state::Outcome;
use hetsched_common::protocol::HeldTask;
use hetsched_common::{Attempt, NodeId, TaskId};

/// The time as the executor reads it: a monotonic clock for timers (immune to wall-clock
/// jumps) and the wall clock for what is compared with the log's timestamps (retention).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds (any origin).
    pub mono_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub wall_ms: u64,
}

/// Why a proposal was made: its result is routed back to the duty that asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProposalTag {
    /// The leadership barrier of leadership `epoch`.
    Barrier {
        /// Leadership it belongs to.
        epoch: u64,
    },
    /// The one plan in flight.
    Plan {
        /// Leadership it belongs to.
        epoch: u64,
    },
    /// A liveness transition.
    Liveness {
        /// Node.
        node: NodeId,
        /// Up (true) or down.
        up: bool,
    },
    /// A started task its slave no longer holds.
    Lost {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// Garbage collection.
    Gc,
    /// A deadline that passed: a drain's (re-queue what still runs) or an attempt's timeout.
    Deadline(DeadlineKey),
    /// A CPU-count search's change or record (S3.2).
    CpuSearch {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// S0.4: moving a released queued task to its thief.
    Steal {
        /// Task.
        task: TaskId,
    },
}

/// What a deadline proposal is about, so that each is proposed once while in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeadlineKey {
    /// A draining node's deadline.
    Drain(NodeId),
    /// An attempt's timeout.
    Timeout(TaskId, Attempt),
    /// S2: a batch job's re-plan after a planned slave was lost.
    Replan(hetsched_common::JobId),
}

/// Everything the duties react to, in the one order the executor delivers them.
#[derive(Clone, Debug, PartialEq)]
pub enum DutyEvent {
    /// This master became leader (true) or stopped being leader (false).
    Leadership(bool),
    /// An entry was applied; `index` 0 means a snapshot was restored.
    Applied {
        /// Log index.
        index: u64,
        /// What applying it returned.
        outcome: Outcome,
        /// Nodes whose free resources or liveness may have changed.
        touched: Vec<NodeId>,
    },
    /// A proposal made through [`Effect::Propose`](super::Effect::Propose) finished.
    Proposed {
        /// Its tag.
        tag: ProposalTag,
        /// Whether it applied.
        ok: bool,
    },
    /// A slave's heartbeat with what it holds (accepted by
    /// [`DutiesCore::heartbeat_verdict`](super::DutiesCore::heartbeat_verdict)).
    Heartbeat {
        /// Node.
        node: NodeId,
        /// What it holds.
        held: Vec<HeldTask>,
    },
    /// A slave answered a dispatch (ok) or the send failed or timed out (not ok).
    Delivered {
        /// Node it was sent to.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Whether the slave accepted it.
        ok: bool,
    },
    /// Time passed.
    Tick,
    /// Issue 54: the connections these slaves had attached for the leader's commands
    /// closed (their process ended, or the connection broke). Past the heartbeat limit their
    /// heartbeats come seconds apart; a closed link not followed by a heartbeat within
    /// [`DutiesConfig::closed_link_timeout_for`](super::DutiesConfig::closed_link_timeout_for)
    /// declares the node down without waiting out the full node timeout.
    LinksClosed {
        /// The nodes.
        nodes: Vec<NodeId>,
    },
    /// A slave's probe samples (they come with its heartbeats; S3.2).
    Samples {
        /// Node.
        node: NodeId,
        /// The samples, oldest first.
        samples: Vec<hetsched_common::protocol::ProbeSample>,
    },
    /// A slave answered a batch dispatch (ok) or the send failed or timed out (not ok):
    /// as [`DutyEvent::Delivered`] for each of `tasks`.
    DeliveredBatch {
        /// Node it was sent to.
        node: NodeId,
        /// The attempts it carried.
        tasks: Vec<(TaskId, Attempt)>,
        /// Whether the slave accepted them.
        ok: bool,
    },
    /// S0.4: a slave with an empty queue and free resources asks for work.
    StealRequest {
        /// The thief.
        thief: NodeId,
    },
    /// S0.4: the victim answered [`Effect::Release`](super::Effect::Release) (`released`: it
    /// dropped the queued attempt; false: it had started it, or the message failed).
    Released {
        /// The task.
        task: TaskId,
        /// The attempt asked for.
        attempt: Attempt,
        /// The victim.
        from: NodeId,
        /// The thief.
        to: NodeId,
        /// Whether the victim released it.
        released: bool,
    },
}

/// How a heartbeat is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatVerdict {
    /// Accepted: feed it as [`DutyEvent::Heartbeat`].
    Accept,
    /// This master does not lead.
    NotLeader,
    /// Leader, still applying its barrier: retry shortly.
    CatchingUp,
    /// The node is not registered: the slave should register again.
    UnknownNode,
}
