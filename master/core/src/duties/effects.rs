//! What comes out of the duties engine: the effects the executor carries out (proposals
//! and messages to slaves), and the helper that turns stops the log decided into them.

use super::events::ProposalTag;
use crate::state::{ClusterState, Command, TaskRef};
use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, NodeId, TaskId};

/// Most assignments in one [`Effect::DispatchBatch`]: keeps a message well under the frame
/// cap even when a new leader re-sends a whole backlog.
pub const MAX_ASSIGNMENTS_PER_MESSAGE: usize = 1024;

/// What the executor must do.
// Effects live for one event; boxing the proposed command would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Propose a command; report the result as
    /// [`DutyEvent::Proposed`](super::DutyEvent::Proposed) with `tag`.
    Propose {
        /// Routes the result back.
        tag: ProposalTag,
        /// The command.
        command: Command,
    },
    /// Tell a slave to stop an attempt (fire and forget: reconciliation repeats it).
    Stop {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Time between SIGTERM and SIGKILL (`None`: the slave's default).
        grace_ms: Option<u64>,
    },
    /// S0.4: ask the victim to release a queued attempt; report the answer as
    /// [`DutyEvent::Released`](super::DutyEvent::Released).
    Release {
        /// The victim.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The thief (carried back in the answer).
        to: NodeId,
    },
    /// Send all of one slave's due assignments in one message; report the answer as
    /// [`DutyEvent::DeliveredBatch`](super::DutyEvent::DeliveredBatch). The core emits at
    /// most one per slave per event.
    DispatchBatch {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// The work, in task order.
        assignments: Vec<Assignment>,
    },
    /// Tell a slave to change a running attempt's CPUs live (fire and forget: sent again
    /// while its samples show another count).
    SetCpus {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// New allocation, millicores.
        cpu_milli: u64,
    },
}

/// A `Stop` for each attempt of `stops` whose node is still known.
pub(super) fn stop_effects(
    stops: &[TaskRef],
    grace_ms: Option<u64>,
    view: &ClusterState,
    fx: &mut Vec<Effect>,
) {
    for r in stops {
        if let Some(n) = view.nodes().get(&r.node) {
            fx.push(Effect::Stop {
                node: r.node,
                addr: n.addr.clone(),
                task: r.task,
                attempt: r.attempt,
                grace_ms,
            });
        }
    }
}
