//! What reaches the actor, and in which order.
//!
//! Two channels feed it: control inputs ([`Input`]: peer messages, flush and snapshot
//! completions, reads, membership requests, stop) and proposals. [`inputs`] merges them into
//! one stream of bounded turns, control first, so Raft's own traffic never queues behind a
//! flood of proposals and a turn's Ready stays small.

use super::membership::{AdminOp, AdminReply};
use super::proposals::Reply;
use super::reads::ReadReply;
use raft::eraftpb::{Message as RaftMsg, Snapshot};
use std::task::Poll;
use tokio::sync::{mpsc, oneshot};

/// Proposals taken per turn before the Ready cycle runs: bounds the entries of one Ready
/// (a huge Ready outlasts the election timeout: see docs/DESIGN.md).
const MAX_PROPOSALS_PER_TURN: usize = 1024;
/// Control inputs (peer messages, flush completions) taken per turn.
const MAX_CONTROL_PER_TURN: usize = 4096;

/// What reaches the actor. Proposals come through their own channel (see [`inputs`]).
pub(crate) enum Input<O> {
    /// A command to propose.
    Propose { data: Vec<u8>, reply: Reply<O> },
    /// Decoded Raft messages from a peer.
    Step(Vec<RaftMsg>),
    /// The storage thread flushed everything written up to Ready `number`.
    Persisted(u64),
    /// The storage thread could not flush: the node must stop.
    PersistFailed(String),
    /// A linearizable read barrier.
    ReadIndex(ReadReply),
    /// A membership request.
    Admin(AdminOp, AdminReply),
    /// A peer task wrote (or failed to write) a snapshot's chunks.
    SnapshotSent { to: u64, ok: bool },
    /// The snapshot thread made a local snapshot durable (`Err`: it could not).
    SnapshotWritten(Result<(Snapshot, u64), String>),
    /// Export one page of the applied log (see [`crate::Consensus::export_log`]).
    ExportLog {
        from: u64,
        max_bytes: u64,
        reply: oneshot::Sender<Result<crate::LogPage, crate::Error>>,
    },
    /// Stop the node.
    Stop,
}

/// A proposal as it travels to the actor.
pub(crate) type Proposal<O> = (Vec<u8>, Reply<O>);

/// Both input channels as one stream of turns. Each turn takes the waiting control inputs
/// first — a follower's append response must not queue behind thousands of proposals — then
/// at most [`MAX_PROPOSALS_PER_TURN`] proposals. After each turn the stream yields once to the
/// runtime, so the peer tasks (which share this thread) and the tick timer run between turns
/// even under a flood of proposals.
pub(super) fn inputs<O: 'static>(
    mut control: mpsc::UnboundedReceiver<Input<O>>,
    mut proposals: mpsc::UnboundedReceiver<Proposal<O>>,
) -> impl futures::Stream<Item = Vec<Input<O>>> + 'static {
    let mut yield_next = false;
    let mut proposals_open = true;
    futures::stream::poll_fn(move |cx| {
        if std::mem::take(&mut yield_next) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut turn = Vec::new();
        let mut control_closed = false;
        while turn.len() < MAX_CONTROL_PER_TURN {
            match control.poll_recv(cx) {
                Poll::Ready(Some(x)) => turn.push(x),
                Poll::Ready(None) => {
                    control_closed = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        let mut n = 0;
        while proposals_open && n < MAX_PROPOSALS_PER_TURN {
            match proposals.poll_recv(cx) {
                Poll::Ready(Some((data, reply))) => {
                    turn.push(Input::Propose { data, reply });
                    n += 1;
                }
                // Every handle is gone; control inputs (flushes) may still come.
                Poll::Ready(None) => proposals_open = false,
                Poll::Pending => break,
            }
        }
        if !turn.is_empty() {
            yield_next = true;
            Poll::Ready(Some(turn))
        } else if control_closed {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    })
}
