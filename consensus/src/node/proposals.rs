//! Proposal tracking: who waits on which log index, and how each wait ends.
//!
//! [`Proposals`] is pure bookkeeping (no Raft, no I/O): the actor tells it what it appended,
//! what was applied, when leadership was lost and when a tick passed, and it answers the
//! waiting callers through their reply channels.
//!
//! - The leader tracks a proposal at the (index, term) raft-rs gave its entry, with the
//!   context the entry carries.
//! - When that index is applied: same term and context → `Ok` (the command's output, or
//!   `Done` for a configuration change); anything else there → `Dropped` (ours was
//!   overwritten, so it never commits). Everything waiting below an applied index lost its
//!   slot to another entry: `Dropped`.
//! - When this member stops leading, what is pending is orphaned: it may still commit under
//!   the next leader, so it waits `orphan_ticks` more ticks for its index to apply, then is
//!   answered `Unknown`.
//! - A snapshot from the leader covering a pending index, a second proposal tracked at the
//!   same index (our log was rewritten there), and a stopping node all answer `Unknown`.
//!
//! Also here: the proposal contexts entries carry, and which committed entries are commands.

use super::membership::{AdminAnswer, AdminReply};
use crate::ProposeError;
use raft::eraftpb::{Entry, EntryType};
use std::collections::BTreeMap;
use tokio::sync::oneshot;

/// Where a proposal's result goes.
pub(crate) type Reply<O> = oneshot::Sender<Result<O, ProposeError>>;

/// Proposal contexts: a command carries its 8-byte proposal id (as before snapshots existed),
/// a configuration change `b'c'` + its id, a read `b'r'` + its id. raft-rs turns a conf
/// change it refuses into an empty normal entry that keeps the context: the prefix keeps it
/// away from the state machine.
const CONF_CTX: u8 = b'c';

/// Whether a committed entry is a command for the state machine: a new leader's empty no-op
/// (no data, no proposal id), or a conf change raft-rs refused (emptied, context kept), is not.
pub(crate) fn is_command(e: &Entry) -> bool {
    e.get_entry_type() == EntryType::EntryNormal
        && !(e.data.is_empty() && e.context.is_empty())
        && e.context.first() != Some(&CONF_CTX)
}

/// The context of a command proposal.
pub(super) fn command_ctx(id: u64) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

/// The context of a configuration change proposal.
pub(super) fn conf_ctx(id: u64) -> Vec<u8> {
    let mut v = vec![CONF_CTX];
    v.extend_from_slice(&id.to_be_bytes());
    v
}

/// Who waits on a log index.
pub(super) enum Waiter<O> {
    Command(Reply<O>),
    Conf(AdminReply),
}

impl<O> Waiter<O> {
    fn fail(self, e: ProposeError) {
        match self {
            Waiter::Command(r) => {
                let _ = r.send(Err(e));
            }
            Waiter::Conf(r) => {
                let _ = r.send(Err(e));
            }
        }
    }
}

/// What applying an entry produced.
pub(super) enum Applied<O> {
    Command(O),
    Conf,
    Nothing,
}

struct Pending<O> {
    term: u64,
    /// The proposal context the entry must carry.
    context: Vec<u8>,
    reply: Waiter<O>,
    /// Tick count when this member stopped leading while the entry was still unapplied.
    orphaned_at: Option<u64>,
}

/// Proposals in flight, by log index, and the clock that expires orphaned ones.
pub(super) struct Proposals<O> {
    pending: BTreeMap<u64, Pending<O>>,
    /// Some pending proposal outlived this member's leadership.
    has_orphans: bool,
    /// Ticks since start (the clock of orphan expiry).
    ticks: u64,
    /// Ticks an orphaned proposal waits for its index to apply before it is answered
    /// `Unknown`.
    orphan_ticks: u64,
    next_id: u64,
}

impl<O> Proposals<O> {
    /// No proposals; orphans wait `orphan_ticks` ticks.
    pub(super) fn new(orphan_ticks: u64) -> Self {
        Self {
            pending: BTreeMap::new(),
            has_orphans: false,
            ticks: 0,
            orphan_ticks,
            next_id: 1,
        }
    }

    /// A fresh proposal id (for the entry's context).
    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Remembers who waits on the entry the leader just appended at (`index`, `term`), which
    /// names it uniquely.
    pub(super) fn track(&mut self, index: u64, term: u64, context: Vec<u8>, reply: Waiter<O>) {
        let p = Pending {
            term,
            context,
            reply,
            orphaned_at: None,
        };
        if let Some(old) = self.pending.insert(index, p) {
            // Our log was rewritten at an old proposal's index: it is gone from here but may
            // have committed elsewhere.
            old.reply.fail(ProposeError::Unknown);
        }
    }

    /// Whether a configuration change of ours is still waiting to apply.
    pub(super) fn conf_pending(&self) -> bool {
        self.pending
            .values()
            .any(|p| matches!(p.reply, Waiter::Conf(_)))
    }

    /// Settles the proposal waiting on `index`, now that the entry there (of `term`, with
    /// `context`) is applied.
    pub(super) fn resolve(&mut self, index: u64, term: u64, context: &[u8], applied: Applied<O>) {
        // Anything waiting below this index lost its slot to another entry.
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= index {
                break;
            }
            entry.remove().reply.fail(ProposeError::Dropped);
        }
        let Some(p) = self.pending.remove(&index) else {
            return;
        };
        let ours = p.term == term && context == p.context.as_slice();
        match (p.reply, applied) {
            (Waiter::Command(r), Applied::Command(out)) if ours => {
                let _ = r.send(Ok(out));
            }
            (Waiter::Conf(r), Applied::Conf) if ours => {
                let _ = r.send(Ok(AdminAnswer::Done));
            }
            // Another term's entry sits at our index (ours was overwritten, never committed),
            // or raft-rs emptied our conf change.
            (w, _) => w.fail(ProposeError::Dropped),
        }
    }

    /// Leadership lost: what is still pending may or may not commit under the next leader.
    /// It keeps waiting for a while: if its index applies, the entry there says which (ours →
    /// `Ok`, another term's → `Dropped`); otherwise [`Proposals::expire_orphans`] answers
    /// `Unknown`.
    pub(super) fn leadership_lost(&mut self) {
        for p in self.pending.values_mut() {
            if p.orphaned_at.is_none() {
                p.orphaned_at = Some(self.ticks);
                self.has_orphans = true;
            }
        }
    }

    /// One Raft tick passed.
    pub(super) fn tick(&mut self) {
        self.ticks += 1;
    }

    /// Answers `Unknown` to orphans that waited their `orphan_ticks`.
    pub(super) fn expire_orphans(&mut self) {
        if !self.has_orphans {
            return;
        }
        let now = self.ticks;
        let limit = self.orphan_ticks;
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.orphaned_at.is_some_and(|t| now >= t + limit))
            .map(|(&i, _)| i)
            .collect();
        for i in expired {
            if let Some(p) = self.pending.remove(&i) {
                p.reply.fail(ProposeError::Unknown);
            }
        }
        self.has_orphans = self.pending.values().any(|p| p.orphaned_at.is_some());
    }

    /// A snapshot from the leader up to `index` was installed: whatever waited on an index it
    /// covers may or may not be in it (`Unknown`).
    pub(super) fn snapshot_installed(&mut self, index: u64) {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > index {
                break;
            }
            entry.remove().reply.fail(ProposeError::Unknown);
        }
    }

    /// The node stops: everything pending is answered `Unknown`.
    pub(super) fn stop(&mut self) {
        for (_, p) in std::mem::take(&mut self.pending) {
            p.reply.fail(ProposeError::Unknown);
        }
    }

    /// How many proposals wait.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
#[path = "proposals_tests.rs"]
mod tests;
