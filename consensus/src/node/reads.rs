//! ReadIndex reads (safe mode, no lease), batched per actor turn.
//!
//! A read waits in three stages, all in [`PendingReads`] (pure bookkeeping, no Raft):
//!
//! 1. queued: asked for this turn, on the leader;
//! 2. in flight: handed to raft-rs as one ReadIndex round under a request context of its own
//!    (`b'r'` + round id), waiting for a quorum to confirm the leadership;
//! 3. confirmed at a read index: answered `Ok(index)` once that index is applied.
//!
//! A member that is not (or no longer) the leader answers `NotLeader`; reads whose caller
//! gave up are forgotten at the next tick; a stopping node answers `Stopped`.

use super::RaftNode;
use crate::{ProposeError, StateMachine};
use raft::StateRole;
use std::collections::HashMap;
use tokio::sync::oneshot;

/// Where a read's index goes.
pub(crate) type ReadReply = oneshot::Sender<Result<u64, ProposeError>>;

/// The reads of this member, by stage.
pub(super) struct PendingReads {
    /// Reads not yet handed to raft-rs (batched per turn).
    queued: Vec<ReadReply>,
    /// Reads handed to raft-rs, by request context.
    in_flight: HashMap<Vec<u8>, Vec<ReadReply>>,
    /// Reads confirmed by a quorum at a read index, waiting for it to apply.
    confirmed: Vec<(u64, Vec<ReadReply>)>,
    next_id: u64,
}

impl PendingReads {
    pub(super) fn new() -> Self {
        Self {
            queued: Vec::new(),
            in_flight: HashMap::new(),
            confirmed: Vec::new(),
            next_id: 1,
        }
    }

    /// Queues a read for this turn's round.
    pub(super) fn queue(&mut self, reply: ReadReply) {
        self.queued.push(reply);
    }

    pub(super) fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Answers every queued read `NotLeader`.
    pub(super) fn fail_queued(&mut self, leader: Option<u64>) {
        for r in self.queued.drain(..) {
            let _ = r.send(Err(ProposeError::NotLeader { leader }));
        }
    }

    /// Moves the queued reads into a new round; returns the round's request context.
    pub(super) fn begin_round(&mut self) -> Vec<u8> {
        let mut ctx = vec![b'r'];
        ctx.extend_from_slice(&self.next_id.to_be_bytes());
        self.next_id += 1;
        self.in_flight
            .insert(ctx.clone(), std::mem::take(&mut self.queued));
        ctx
    }

    /// A quorum confirmed the round `ctx` at read index `index`.
    pub(super) fn confirm(&mut self, ctx: &[u8], index: u64) {
        if let Some(replies) = self.in_flight.remove(ctx) {
            self.confirmed.push((index, replies));
        }
    }

    /// Answers confirmed reads whose index is applied.
    pub(super) fn finish(&mut self, applied: u64) {
        self.confirmed.retain_mut(|(index, replies)| {
            if *index > applied {
                return true;
            }
            for r in replies.drain(..) {
                let _ = r.send(Ok(*index));
            }
            false
        });
    }

    /// Leadership lost: reads not yet confirmed can no longer be (the new leader serves
    /// them): `NotLeader`.
    pub(super) fn fail_in_flight(&mut self, leader: Option<u64>) {
        for (_, replies) in self.in_flight.drain() {
            for r in replies {
                let _ = r.send(Err(ProposeError::NotLeader { leader }));
            }
        }
    }

    /// Forgets reads whose caller gave up (timed out): they need not wait for a confirmation.
    pub(super) fn prune_closed(&mut self) {
        self.in_flight.retain(|_, rs| {
            rs.retain(|r| !r.is_closed());
            !rs.is_empty()
        });
    }

    /// The node stops: queued and in-flight reads are answered `Stopped` (confirmed ones see
    /// their channel close).
    pub(super) fn stop(&mut self) {
        for r in std::mem::take(&mut self.queued) {
            let _ = r.send(Err(ProposeError::Stopped));
        }
        for (_, rs) in std::mem::take(&mut self.in_flight) {
            rs.into_iter().for_each(|r| {
                let _ = r.send(Err(ProposeError::Stopped));
            });
        }
    }
}

impl<S: StateMachine> RaftNode<S> {
    /// A read asked of this member: queued for this turn's round on the leader.
    pub(super) fn read_index(&mut self, reply: ReadReply) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        self.reads.queue(reply);
    }

    /// Hands the reads queued this turn to raft-rs as one ReadIndex round.
    pub(super) fn start_reads(&mut self) {
        if !self.reads.has_queued() {
            return;
        }
        if self.raw.raft.state != StateRole::Leader {
            let leader = self.leader();
            self.reads.fail_queued(leader);
            return;
        }
        // raft-rs silently ignores a read before the leader committed an entry of its term:
        // keep them queued until it has.
        if !self.raw.raft.commit_to_current_term() {
            return;
        }
        let ctx = self.reads.begin_round();
        self.raw.read_index(ctx);
    }
}

#[cfg(test)]
#[path = "reads_tests.rs"]
mod tests;
