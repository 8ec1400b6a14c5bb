//! The Raft actor: owns the `RawNode`, the state machine and the transport, and runs the
//! Ready cycle.
//!
//! ```text
//!  inputs (propose, step, persisted) ─┐         tick timer ─┐
//!                                     ▼                     ▼
//!                               RawNode::step/propose    RawNode::tick
//!                                     └────────┬────────────┘
//!                                              ▼
//!   handle_ready:  1. messages (leader only: may go before persisting, raft thesis 10.2.1)
//!                  2. snapshot from the leader ──▶ sled, StateMachine::restore
//!                  3. committed entries ──▶ StateMachine::apply ──▶ resolve proposals
//!                  4. entries + hard state ──▶ sled batch (written, not yet durable)
//!                  5. advance_append_async; persisted messages wait for the flush
//!                                              │
//!                        storage thread: sled flush (coalesced) ──▶ Persisted(number)
//!                                              ▼
//!   on_persisted:  send the waiting messages, RawNode::on_persist_ready, next Ready
//! ```
//!
//! After the cycle: a snapshot (and log compaction) once enough was applied, or when raft-rs
//! asked for one the stored snapshot could not serve (a member added since).
//!
//! The safety rule: a message that depends on entries or on term/vote (a follower's append
//! response, a vote) leaves only after the flush that made them durable; committed entries
//! are applied only once persisted locally (raft-rs hands out committed entries up to
//! `min(committed, persisted)`, and `persisted` moves only through `on_persist_ready`).
//!
//! This module holds the node's state and the Ready cycle itself; the rest, by concern:
//!
//! - `actor`: the actix side (start, tick timer, input dispatch, stop);
//! - `inputs`: what reaches the actor, merged into bounded turns;
//! - `proposals`: who waits on which log index (pure, unit-tested);
//! - `reads`: ReadIndex reads, batched per turn;
//! - `membership`: configuration changes, addresses, published members;
//! - `snapshots`: local snapshots and compaction, installing the leader's;
//! - `persist`: the flush thread and the messages waiting for it;
//! - `send`: outgoing messages (faults, snapshot chunks, per-peer batches).

mod actor;
mod inputs;
mod membership;
mod persist;
mod proposals;
mod reads;
mod send;
mod snapshots;

pub(crate) use inputs::{Input, Proposal};
pub(crate) use membership::{AdminAnswer, AdminOp};

use crate::chunk;
use crate::fault::Faults;
use crate::storage::SledStorage;
use crate::transport::Transport;
use crate::{Member, ProposeError, RaftStatus, Role, StateMachine};
use actix::prelude::*;
use persist::Persist;
use proposals::{command_ctx, is_command, Applied, Proposals, Reply, Waiter};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message as RaftMsg};
use raft::{RawNode, StateRole};
use reads::PendingReads;
use snapshots::Snapshots;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Readies handled back to back before yielding to the mailbox and timers.
const MAX_READIES_PER_TURN: usize = 8;

/// State shared between the actor and the handles (read by `Consensus` without a round trip).
#[derive(Default)]
pub(crate) struct Shared {
    /// Member id → cluster address, following configuration changes and snapshots.
    pub addrs: RwLock<BTreeMap<u64, String>>,
    /// The configuration as last applied here.
    pub members: RwLock<Vec<Member>>,
    pub faults: Mutex<Faults>,
    pub chunks: Mutex<chunk::Reassembler>,
    pub proposals: AtomicU64,
    pub entries_persisted: AtomicU64,
    pub flushes: AtomicU64,
    pub snapshots: AtomicU64,
    pub snapshots_sent: AtomicU64,
    pub snapshots_received: AtomicU64,
    pub first_index: AtomicU64,
}

/// Everything the actor is built from.
pub(crate) struct NodeParts<S: StateMachine> {
    pub raw: RawNode<SledStorage>,
    pub sm: Box<S>,
    pub peers: BTreeMap<u64, String>,
    pub control_rx: mpsc::UnboundedReceiver<Input<S::Output>>,
    pub control_tx: mpsc::UnboundedSender<Input<S::Output>>,
    pub proposals_rx: mpsc::UnboundedReceiver<Proposal<S::Output>>,
    pub status_tx: watch::Sender<RaftStatus>,
    pub terminated: watch::Sender<()>,
    pub tick: Duration,
    pub election_ticks: usize,
    pub shared: Arc<Shared>,
    /// Index of the snapshot restored at start (0: none): already applied.
    pub applied: u64,
    pub snapshot_entries: u64,
    pub snapshot_bytes: u64,
    pub snapshot_tail: u64,
}

pub(crate) struct RaftNode<S: StateMachine> {
    id: u64,
    raw: RawNode<SledStorage>,
    /// Boxed so the actor is `Unpin` whatever `S` is.
    sm: Box<S>,
    transport: Option<Transport>,
    control_tx: mpsc::UnboundedSender<Input<S::Output>>,
    shared: Arc<Shared>,
    /// This member's own address (kept in the address map whatever snapshots say).
    own_addr: Option<String>,
    #[allow(clippy::type_complexity)]
    receivers: Option<(
        mpsc::UnboundedReceiver<Input<S::Output>>,
        mpsc::UnboundedReceiver<Proposal<S::Output>>,
    )>,
    tick: Duration,
    applied: u64,
    /// Proposals in flight, by log index.
    proposals: Proposals<S::Output>,
    reads: PendingReads,
    /// The flush thread and the messages waiting for it.
    persist: Persist,
    snapshots: Snapshots,
    status_tx: watch::Sender<RaftStatus>,
    /// Dropped last (fields drop in declaration order), after sled is closed: its receivers
    /// learn that the data dir may be reopened.
    _terminated: watch::Sender<()>,
}

impl<S: StateMachine> RaftNode<S> {
    pub(crate) fn new(parts: NodeParts<S>) -> Self {
        let id = parts.raw.raft.id;
        let persist = Persist::start(
            id,
            parts.raw.store().db(),
            parts.control_tx.clone(),
            parts.shared.clone(),
        );
        let snapshots = Snapshots::start(
            id,
            parts.raw.store().snapshot_file(),
            parts.control_tx.clone(),
            parts.snapshot_entries,
            parts.snapshot_bytes,
            parts.snapshot_tail,
        );
        let own_addr = parts.peers.get(&id).cloned();
        Self {
            id,
            raw: parts.raw,
            sm: parts.sm,
            transport: None,
            control_tx: parts.control_tx,
            shared: parts.shared,
            own_addr,
            receivers: Some((parts.control_rx, parts.proposals_rx)),
            tick: parts.tick,
            applied: parts.applied,
            proposals: Proposals::new(2 * parts.election_ticks as u64),
            reads: PendingReads::new(),
            persist,
            snapshots,
            status_tx: parts.status_tx,
            _terminated: parts.terminated,
        }
    }

    fn role(&self) -> Role {
        match self.raw.raft.state {
            StateRole::Leader => Role::Leader,
            StateRole::Follower => Role::Follower,
            StateRole::Candidate => Role::Candidate,
            StateRole::PreCandidate => Role::PreCandidate,
        }
    }

    fn leader(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|&l| l != raft::INVALID_ID)
    }

    fn publish_status(&self) {
        let now = RaftStatus {
            id: self.id,
            leader: self.leader(),
            term: self.raw.raft.term,
            role: self.role(),
            commit_index: self.raw.raft.raft_log.committed,
            applied_index: self.applied,
        };
        let (term, commit, applied) = (now.term, now.commit_index, now.applied_index);
        let leading = now.role == Role::Leader;
        let changed = self.status_tx.send_if_modified(|s| {
            if *s != now {
                *s = now;
                true
            } else {
                false
            }
        });
        if changed {
            metrics::gauge!("raft_term").set(term as f64);
            metrics::gauge!("raft_commit_index").set(commit as f64);
            metrics::gauge!("raft_applied_index").set(applied as f64);
            metrics::gauge!("raft_is_leader").set(if leading { 1.0 } else { 0.0 });
        }
        self.shared
            .first_index
            .store(self.raw.store().first_index_now(), Ordering::Relaxed);
        self.publish_members();
    }

    fn propose(&mut self, data: Vec<u8>, reply: Reply<S::Output>) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        let context = command_ctx(self.proposals.next_id());
        match self.raw.propose(context.clone(), data) {
            Ok(()) => {
                self.shared.proposals.fetch_add(1, Ordering::Relaxed);
                self.track(context, Waiter::Command(reply));
            }
            Err(e) => {
                // raft-rs refused before appending (leadership transfer, uncommitted-size
                // limit): the entry is not in any log.
                tracing::debug!(member = self.id, error = %e, "proposal refused by raft");
                let _ = reply.send(Err(ProposeError::Dropped));
            }
        }
    }

    /// Remembers who waits on the entry just appended as the leader's last.
    fn track(&mut self, context: Vec<u8>, reply: Waiter<S::Output>) {
        // The leader appended it as its last entry; (index, term) names it uniquely.
        let index = self.raw.raft.raft_log.last_index();
        let term = self.raw.raft.term;
        self.proposals.track(index, term, context, reply);
    }

    fn step(&mut self, msgs: Vec<RaftMsg>) {
        for m in msgs {
            let (from, ty) = (m.from, m.get_msg_type());
            if let Err(e) = self.raw.step(m) {
                tracing::debug!(member = self.id, from, ?ty, error = %e, "raft refused a message");
            }
        }
    }

    /// Runs Ready cycles until there is nothing to do (or the turn is used up, in which case
    /// the rest is picked up by a self-notification so inputs and ticks are not starved).
    fn drive(&mut self, ctx: &mut Context<Self>) {
        self.start_reads();
        let mut n = 0;
        while self.raw.has_ready() {
            if n == MAX_READIES_PER_TURN {
                ctx.notify(actor::Drive);
                break;
            }
            n += 1;
            if let Err(e) = self.handle_ready() {
                tracing::error!(member = self.id, error = %e, "raft storage failed; stopping the node");
                ctx.stop();
                return;
            }
        }
        let wanted = self.raw.store().take_snapshot_wanted();
        if let Err(e) = self.maybe_snapshot(wanted) {
            tracing::error!(member = self.id, error = %e, "snapshot failed; stopping the node");
            ctx.stop();
            return;
        }
        self.publish_status();
    }

    fn handle_ready(&mut self) -> Result<(), crate::Error> {
        let started = std::time::Instant::now();
        let mut rd = self.raw.ready();
        tracing::trace!(
            member = self.id,
            number = rd.number(),
            entries = rd.entries().len(),
            committed = rd.committed_entries().len(),
            msgs = rd.messages().len(),
            persisted_msgs = rd.persisted_messages().len(),
            "ready"
        );
        let mut unreachable = BTreeSet::new();

        // 1. A leader's messages may leave before its own entries are durable.
        self.send(rd.take_messages(), &mut unreachable);

        // 2. A snapshot from the leader replaces the log and the state.
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            self.install_snapshot(snap)?;
        }

        // Reads confirmed by a quorum: they may be answered once their index is applied.
        for rs in rd.take_read_states() {
            self.reads.confirm(&rs.request_ctx, rs.index);
        }

        // 3. Committed (and locally persisted) entries.
        self.apply(rd.take_committed_entries())?;
        self.reads.finish(self.applied);

        // 4. New entries and hard state: written now (raft-rs reads them back through
        //    `Storage` at once), durable after the storage thread's flush.
        let entries = rd.take_entries();
        let hs = rd.hs().cloned();
        if !entries.is_empty() || hs.is_some() {
            self.raw.mut_store().append(&entries, hs.as_ref())?;
        }

        // 5. Messages that depend on this Ready's writes wait for the flush. A Ready that
        //    changed only the commit index need not be synced (a lost commit index is
        //    re-learned from the leader), but its messages still keep their order.
        let number = rd.number();
        let must_sync = rd.must_sync();
        let persisted_msgs = rd.take_persisted_messages();
        self.raw.advance_append_async(rd);
        if must_sync || self.persist.is_waiting() {
            self.persist
                .wait(number, entries.len() as u64, persisted_msgs)?;
        } else {
            self.send(persisted_msgs, &mut unreachable);
            self.raw.on_persist_ready(number);
        }
        self.advance_apply();
        tracing::trace!(member = self.id, number, elapsed = ?started.elapsed(), "ready handled");

        // Raft's own state may change only between readies.
        self.report_failures(unreachable);

        // Leadership lost: pending proposals are orphaned (see `Proposals::leadership_lost`);
        // reads not yet confirmed can no longer be: the new leader serves them.
        if self.raw.raft.state != StateRole::Leader {
            self.proposals.leadership_lost();
            let leader = self.leader();
            self.reads.fail_in_flight(leader);
        }
        Ok(())
    }

    /// Tells raft-rs what the applied index is, as far as it may know it: never past what it
    /// counts as persisted (a received snapshot counts only once flushed).
    fn advance_apply(&mut self) {
        let log = &self.raw.raft.raft_log;
        let to = self.applied.min(log.persisted).min(log.committed);
        if to > log.applied {
            self.raw.advance_apply_to(to);
        }
    }

    /// Applies committed entries: commands to the state machine, configuration changes to
    /// raft-rs, sled and the address map; then settles whoever waited on each.
    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), crate::Error> {
        for e in entries {
            let index = e.index;
            self.snapshots.bytes_since += e.data.len() as u64;
            let applied = match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if is_command(&e) {
                        Applied::Command(self.sm.apply(index, &e.data))
                    } else {
                        Applied::Nothing
                    }
                }
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data)
                        .map_err(|err| crate::Error::Raft(format!("bad conf change: {err}")))?;
                    let cs = self
                        .raw
                        .apply_conf_change(&cc)
                        .map_err(|err| crate::Error::Raft(err.to_string()))?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    self.conf_addresses(cc.get_change_type(), cc.node_id, &cc.context)?;
                    Applied::Conf
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data)
                        .map_err(|err| crate::Error::Raft(format!("bad conf change: {err}")))?;
                    let cs = self
                        .raw
                        .apply_conf_change(&cc)
                        .map_err(|err| crate::Error::Raft(err.to_string()))?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    for single in cc.get_changes() {
                        self.conf_addresses(single.get_change_type(), single.node_id, &cc.context)?;
                    }
                    Applied::Conf
                }
            };
            metrics::counter!("raft_applied_entries_total").increment(1);
            self.proposals.resolve(index, e.term, &e.context, applied);
            self.applied = index;
        }
        Ok(())
    }
}
