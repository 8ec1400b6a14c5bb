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
//!                  2. snapshot (none yet: the log is never compacted)
//!                  3. committed entries ──▶ StateMachine::apply ──▶ resolve proposals
//!                  4. entries + hard state ──▶ sled batch (written, not yet durable)
//!                  5. advance_append_async; persisted messages wait for the flush
//!                                              │
//!                        storage thread: sled flush (coalesced) ──▶ Persisted(number)
//!                                              ▼
//!   on_persisted:  send the waiting messages, RawNode::on_persist_ready, next Ready
//! ```
//!
//! The safety rule: a message that depends on entries or on term/vote (a follower's append
//! response, a vote) leaves only after the flush that made them durable; committed entries
//! are applied only once persisted locally (raft-rs hands out committed entries up to
//! `min(committed, persisted)`, and `persisted` moves only through `on_persist_ready`).

use crate::storage::SledStorage;
use crate::transport::Transport;
use crate::{ProposeError, RaftStatus, Role, StateMachine};
use actix::prelude::*;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message as RaftMsg};
use raft::{RawNode, StateRole};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Proposals taken per turn before the Ready cycle runs: bounds the entries of one Ready
/// (the pitfall of CRATES.md: a huge Ready outlasts the election timeout).
const MAX_PROPOSALS_PER_TURN: usize = 1024;
/// Control inputs (peer messages, flush completions) taken per turn.
const MAX_CONTROL_PER_TURN: usize = 4096;
/// Readies handled back to back before yielding to the mailbox and timers.
const MAX_READIES_PER_TURN: usize = 8;

pub(crate) type Reply<O> = oneshot::Sender<Result<O, ProposeError>>;

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
    /// Stop the node.
    Stop,
}

struct Pending<O> {
    term: u64,
    id: u64,
    reply: Reply<O>,
    /// Tick count when this member stopped leading while the entry was still unapplied.
    orphaned_at: Option<u64>,
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
}

pub(crate) struct RaftNode<S: StateMachine> {
    id: u64,
    raw: RawNode<SledStorage>,
    /// Boxed so the actor is `Unpin` whatever `S` is.
    sm: Box<S>,
    peers: BTreeMap<u64, String>,
    transport: Option<Transport>,
    #[allow(clippy::type_complexity)]
    receivers: Option<(
        mpsc::UnboundedReceiver<Input<S::Output>>,
        mpsc::UnboundedReceiver<Proposal<S::Output>>,
    )>,
    tick: Duration,
    /// Proposals in flight, by log index.
    pending: BTreeMap<u64, Pending<S::Output>>,
    /// Some pending proposal outlived this member's leadership.
    has_orphans: bool,
    /// Ticks since start (the clock of orphan expiry).
    ticks: u64,
    /// Ticks an orphaned proposal waits for its index to apply before it is answered
    /// `Unknown`.
    orphan_ticks: u64,
    next_proposal_id: u64,
    /// Messages of readies whose writes are not durable yet, oldest first.
    awaiting_flush: VecDeque<(u64, Vec<RaftMsg>)>,
    flush_tx: Option<std::sync::mpsc::Sender<u64>>,
    flush_thread: Option<std::thread::JoinHandle<()>>,
    applied: u64,
    status_tx: watch::Sender<RaftStatus>,
    /// Dropped last (fields drop in declaration order), after sled is closed: its receivers
    /// learn that the data dir may be reopened.
    _terminated: watch::Sender<()>,
}

impl<S: StateMachine> RaftNode<S> {
    pub(crate) fn new(parts: NodeParts<S>) -> Self {
        let db = parts.raw.store().db();
        let (flush_tx, flush_rx) = std::sync::mpsc::channel();
        let back = parts.control_tx;
        let id = parts.raw.raft.id;
        // sled's flush is a blocking fsync: it runs here, never on the thread that ticks Raft.
        let flush_thread = std::thread::Builder::new()
            .name(format!("raft-{id}-flush"))
            .spawn(move || flush_loop(db, flush_rx, back))
            .ok();
        Self {
            id,
            raw: parts.raw,
            sm: parts.sm,
            peers: parts.peers,
            transport: None,
            receivers: Some((parts.control_rx, parts.proposals_rx)),
            tick: parts.tick,
            pending: BTreeMap::new(),
            has_orphans: false,
            ticks: 0,
            orphan_ticks: 2 * parts.election_ticks as u64,
            next_proposal_id: 1,
            awaiting_flush: VecDeque::new(),
            flush_tx: Some(flush_tx),
            flush_thread,
            applied: 0,
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
    }

    fn propose(&mut self, data: Vec<u8>, reply: Reply<S::Output>) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        let id = self.next_proposal_id;
        self.next_proposal_id += 1;
        match self.raw.propose(id.to_be_bytes().to_vec(), data) {
            Ok(()) => {
                // The leader appended it as its last entry; (index, term) names it uniquely.
                let index = self.raw.raft.raft_log.last_index();
                let term = self.raw.raft.term;
                let p = Pending {
                    term,
                    id,
                    reply,
                    orphaned_at: None,
                };
                if let Some(old) = self.pending.insert(index, p) {
                    // Our log was rewritten at an old proposal's index: it is gone from
                    // here but may have committed elsewhere.
                    let _ = old.reply.send(Err(ProposeError::Unknown));
                }
            }
            Err(e) => {
                // raft-rs refused before appending (leadership transfer, uncommitted-size
                // limit): the entry is not in any log.
                tracing::debug!(member = self.id, error = %e, "proposal refused by raft");
                let _ = reply.send(Err(ProposeError::Dropped));
            }
        }
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
        let mut n = 0;
        while self.raw.has_ready() {
            if n == MAX_READIES_PER_TURN {
                ctx.notify(Drive);
                break;
            }
            n += 1;
            if let Err(e) = self.handle_ready() {
                tracing::error!(member = self.id, error = %e, "raft storage failed; stopping the node");
                ctx.stop();
                return;
            }
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

        // 2. Snapshots arrive only from a compacted leader, which this version never is.
        if !rd.snapshot().is_empty() {
            return Err(crate::Error::Raft(
                "received a snapshot, but snapshots are not supported yet".into(),
            ));
        }

        // 3. Committed (and locally persisted) entries.
        self.apply(rd.take_committed_entries())?;

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
        if must_sync || !self.awaiting_flush.is_empty() {
            self.awaiting_flush.push_back((number, persisted_msgs));
            self.request_flush(number)?;
        } else {
            self.send(persisted_msgs, &mut unreachable);
            self.raw.on_persist_ready(number);
        }
        self.raw.advance_apply_to(self.applied);
        tracing::trace!(member = self.id, number, elapsed = ?started.elapsed(), "ready handled");

        // Raft's own state may change only between readies.
        for to in unreachable {
            self.raw.report_unreachable(to);
        }

        // Leadership lost: what is still pending may or may not commit under the next leader.
        // Keep waiting for a while as a follower: if the index applies, the entry there says
        // which (ours → Ok, another term's → Dropped); otherwise `expire_orphans` answers
        // Unknown.
        if self.raw.raft.state != StateRole::Leader {
            for p in self.pending.values_mut() {
                if p.orphaned_at.is_none() {
                    p.orphaned_at = Some(self.ticks);
                    self.has_orphans = true;
                }
            }
        }
        Ok(())
    }

    fn expire_orphans(&mut self) {
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
                let _ = p.reply.send(Err(ProposeError::Unknown));
            }
        }
        self.has_orphans = self.pending.values().any(|p| p.orphaned_at.is_some());
    }

    fn request_flush(&mut self, number: u64) -> Result<(), crate::Error> {
        let sent = self.flush_tx.as_ref().map(|tx| tx.send(number).is_ok());
        if sent == Some(true) {
            Ok(())
        } else {
            Err(crate::Error::Storage("storage thread is gone".into()))
        }
    }

    fn on_persisted(&mut self, number: u64) {
        let mut unreachable = BTreeSet::new();
        while self
            .awaiting_flush
            .front()
            .is_some_and(|(n, _)| *n <= number)
        {
            if let Some((_, msgs)) = self.awaiting_flush.pop_front() {
                self.send(msgs, &mut unreachable);
            }
        }
        self.raw.on_persist_ready(number);
        for to in unreachable {
            self.raw.report_unreachable(to);
        }
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), crate::Error> {
        for e in entries {
            let index = e.index;
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    // A new leader's empty no-op (no data, no proposal id) is not a command.
                    let output = if e.data.is_empty() && e.context.is_empty() {
                        None
                    } else {
                        Some(self.sm.apply(index, &e.data))
                    };
                    self.resolve(index, e.term, &e.context, output);
                }
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data)
                        .map_err(|err| crate::Error::Raft(format!("bad conf change: {err}")))?;
                    let cs = self
                        .raw
                        .apply_conf_change(&cc)
                        .map_err(|err| crate::Error::Raft(err.to_string()))?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    self.resolve(index, e.term, &e.context, None);
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data)
                        .map_err(|err| crate::Error::Raft(format!("bad conf change: {err}")))?;
                    let cs = self
                        .raw
                        .apply_conf_change(&cc)
                        .map_err(|err| crate::Error::Raft(err.to_string()))?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    self.resolve(index, e.term, &e.context, None);
                }
            }
            self.applied = index;
        }
        Ok(())
    }

    /// Settles the proposal waiting on `index`, now that the entry there is applied.
    fn resolve(&mut self, index: u64, term: u64, context: &[u8], output: Option<S::Output>) {
        metrics::counter!("raft_applied_entries_total").increment(1);
        // Anything waiting below this index lost its slot to another entry.
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= index {
                break;
            }
            let _ = entry.remove().reply.send(Err(ProposeError::Dropped));
        }
        let Some(p) = self.pending.remove(&index) else {
            return;
        };
        let ours = p.term == term && context == p.id.to_be_bytes();
        let result = match output {
            Some(out) if ours => Ok(out),
            // Another term's entry sits at our index: ours was overwritten, never committed.
            _ => Err(ProposeError::Dropped),
        };
        let _ = p.reply.send(result);
    }

    fn send(&mut self, msgs: Vec<RaftMsg>, unreachable: &mut BTreeSet<u64>) {
        if msgs.is_empty() {
            return;
        }
        let mut by_peer: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for m in msgs {
            match m.write_to_bytes() {
                Ok(b) => by_peer.entry(m.to).or_default().push(b),
                Err(e) => {
                    tracing::error!(member = self.id, error = %e, "cannot encode raft message")
                }
            }
        }
        let Some(transport) = self.transport.as_ref() else {
            return;
        };
        for (to, batch) in by_peer {
            if let Err(e) = transport.send(to, batch) {
                tracing::trace!(member = self.id, to, ?e, "raft message not queued");
                unreachable.insert(to);
            }
        }
    }
}

fn flush_loop<O>(
    db: sled::Db,
    rx: std::sync::mpsc::Receiver<u64>,
    back: mpsc::UnboundedSender<Input<O>>,
) {
    while let Ok(mut number) = rx.recv() {
        // One fsync for every Ready written meanwhile.
        while let Ok(n) = rx.try_recv() {
            number = number.max(n);
        }
        let started = std::time::Instant::now();
        let flushed = db.flush();
        metrics::histogram!("raft_flush_seconds").record(started.elapsed().as_secs_f64());
        let msg = match flushed {
            Ok(_) => Input::Persisted(number),
            Err(e) => Input::PersistFailed(e.to_string()),
        };
        if back.send(msg).is_err() {
            break;
        }
    }
}

/// Continue the Ready cycle on a later turn.
#[derive(actix::Message)]
#[rtype(result = "()")]
struct Drive;

impl<S: StateMachine> Handler<Drive> for RaftNode<S> {
    type Result = ();
    fn handle(&mut self, _: Drive, ctx: &mut Context<Self>) {
        self.drive(ctx);
    }
}

impl<S: StateMachine> Actor for RaftNode<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match Transport::start(self.id, &self.peers) {
            Ok(t) => self.transport = Some(t),
            Err(e) => {
                tracing::error!(member = self.id, error = %e, "cannot start the raft transport");
                ctx.stop();
                return;
            }
        }
        if let Some((control, proposals)) = self.receivers.take() {
            ctx.add_stream(inputs(control, proposals));
        }
        let mut last_tick = std::time::Instant::now();
        let min_gap = self.tick.mul_f64(0.8);
        ctx.run_interval(self.tick, move |node, ctx| {
            // A late timer fires its missed ticks back to back. Raft must not see them: the
            // peers' messages that arrived meanwhile are still queued, so a leader would count
            // a whole election timeout without them and step down (check_quorum).
            let now = std::time::Instant::now();
            if now.duration_since(last_tick) < min_gap {
                return;
            }
            last_tick = now;
            node.ticks += 1;
            node.raw.tick();
            node.drive(ctx);
            node.expire_orphans();
        });
        // A restarted member has committed entries to replay right away.
        self.drive(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!(member = self.id, "raft node stopped");
        // The arbiter exists for this actor alone.
        actix::Arbiter::current().stop();
    }
}

impl<S: StateMachine> StreamHandler<Vec<Input<S::Output>>> for RaftNode<S> {
    fn handle(&mut self, inputs: Vec<Input<S::Output>>, ctx: &mut Context<Self>) {
        for input in inputs {
            match input {
                Input::Propose { data, reply } => self.propose(data, reply),
                Input::Step(msgs) => self.step(msgs),
                Input::Persisted(number) => self.on_persisted(number),
                Input::PersistFailed(e) => {
                    tracing::error!(member = self.id, error = %e, "sled flush failed; stopping the node");
                    ctx.stop();
                    return;
                }
                Input::Stop => {
                    ctx.stop();
                    return;
                }
            }
        }
        self.drive(ctx);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl<S: StateMachine> Drop for RaftNode<S> {
    fn drop(&mut self) {
        for (_, p) in std::mem::take(&mut self.pending) {
            let _ = p.reply.send(Err(ProposeError::Unknown));
        }
        // Ending the storage thread releases its sled handle, so the data dir can be
        // reopened once `_terminated` (dropped after `raw`) signals.
        self.flush_tx = None;
        if let Some(t) = self.flush_thread.take() {
            let _ = t.join();
        }
    }
}

/// A proposal as it travels to the actor.
pub(crate) type Proposal<O> = (Vec<u8>, Reply<O>);

/// Both input channels as one stream of turns. Each turn takes the waiting control inputs
/// first — a follower's append response must not queue behind thousands of proposals — then
/// at most [`MAX_PROPOSALS_PER_TURN`] proposals. After each turn the stream yields once to the
/// runtime, so the peer tasks (which share this thread) and the tick timer run between turns
/// even under a flood of proposals.
fn inputs<O: 'static>(
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
