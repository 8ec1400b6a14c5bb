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

use crate::chunk;
use crate::fault::Faults;
use crate::storage::{SledStorage, SnapshotData};
use crate::transport::{Outgoing, Transport};
use crate::{Member, ProposeError, RaftStatus, Role, StateMachine};
use actix::prelude::*;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Message as RaftMsg, MessageType,
    Snapshot,
};
use raft::{RawNode, SnapshotStatus, StateRole};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Proposals taken per turn before the Ready cycle runs: bounds the entries of one Ready
/// (the pitfall of CRATES.md: a huge Ready outlasts the election timeout).
const MAX_PROPOSALS_PER_TURN: usize = 1024;
/// Control inputs (peer messages, flush completions) taken per turn.
const MAX_CONTROL_PER_TURN: usize = 4096;
/// Readies handled back to back before yielding to the mailbox and timers.
const MAX_READIES_PER_TURN: usize = 8;

pub(crate) type Reply<O> = oneshot::Sender<Result<O, ProposeError>>;

/// A membership request.
pub(crate) enum AdminOp {
    Add(u64, String),
    Remove(u64),
    Transfer(u64),
}

/// What the actor answers to a membership request.
pub(crate) enum AdminAnswer {
    /// Applied (or nothing to do).
    Done,
    /// A leadership transfer to this member has started; the handle waits for it.
    Transferring(u64),
}

pub(crate) type AdminReply = oneshot::Sender<Result<AdminAnswer, ProposeError>>;
pub(crate) type ReadReply = oneshot::Sender<Result<u64, ProposeError>>;

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

fn conf_ctx(id: u64) -> Vec<u8> {
    let mut v = vec![CONF_CTX];
    v.extend_from_slice(&id.to_be_bytes());
    v
}

/// Who waits on a log index.
enum Waiter<O> {
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
enum Applied<O> {
    Command(O),
    Conf,
    Nothing,
}

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

struct Pending<O> {
    term: u64,
    /// The proposal context the entry must carry.
    context: Vec<u8>,
    reply: Waiter<O>,
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
    pub shared: std::sync::Arc<Shared>,
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
    shared: std::sync::Arc<Shared>,
    /// This member's own address (kept in the address map whatever snapshots say).
    own_addr: Option<String>,
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
    awaiting_flush: VecDeque<(u64, u64, Vec<RaftMsg>)>,
    flush_tx: Option<std::sync::mpsc::Sender<u64>>,
    flush_thread: Option<std::thread::JoinHandle<()>>,
    applied: u64,
    snapshot_entries: u64,
    snapshot_bytes: u64,
    snapshot_tail: u64,
    /// Entry bytes applied since the last snapshot.
    bytes_since_snapshot: u64,
    next_snapshot_id: u64,
    /// To the snapshot thread: a local snapshot and the index to compact to once durable.
    snapshot_tx: Option<std::sync::mpsc::Sender<(Snapshot, u64)>>,
    snapshot_thread: Option<std::thread::JoinHandle<()>>,
    /// A local snapshot is being written: no new one until it is done.
    snapshot_in_flight: bool,
    /// Snapshot sends that failed during a Ready, reported to raft-rs after it.
    snapshot_failures: Vec<u64>,
    /// Reads not yet handed to raft-rs (batched per turn).
    reads_queued: Vec<ReadReply>,
    /// Reads handed to raft-rs, by request context.
    reads_in_flight: HashMap<Vec<u8>, Vec<ReadReply>>,
    /// Reads confirmed by a quorum at a read index, waiting for it to apply.
    reads_confirmed: Vec<(u64, Vec<ReadReply>)>,
    next_read_id: u64,
    status_tx: watch::Sender<RaftStatus>,
    /// Dropped last (fields drop in declaration order), after sled is closed: its receivers
    /// learn that the data dir may be reopened.
    _terminated: watch::Sender<()>,
}

impl<S: StateMachine> RaftNode<S> {
    pub(crate) fn new(parts: NodeParts<S>) -> Self {
        let db = parts.raw.store().db();
        let flush_shared = parts.shared.clone();
        let snap_file = parts.raw.store().snapshot_file();
        let (snapshot_tx, snapshot_rx) = std::sync::mpsc::channel();
        let snap_back = parts.control_tx.clone();
        let (flush_tx, flush_rx) = std::sync::mpsc::channel();
        let back = parts.control_tx.clone();
        let back_for_node = parts.control_tx;
        let id = parts.raw.raft.id;
        // sled's flush is a blocking fsync: it runs here, never on the thread that ticks Raft.
        let flush_thread = std::thread::Builder::new()
            .name(format!("raft-{id}-flush"))
            .spawn(move || flush_loop(db, flush_rx, back, flush_shared))
            .ok();
        // Encoding and fsyncing a snapshot of many MiB takes far longer than a tick: it runs
        // here, and the log is compacted once it is durable.
        let snapshot_thread = std::thread::Builder::new()
            .name(format!("raft-{id}-snap"))
            .spawn(move || snapshot_loop(snap_file, snapshot_rx, snap_back))
            .ok();
        let own_addr = parts.peers.get(&id).cloned();
        Self {
            id,
            raw: parts.raw,
            sm: parts.sm,
            transport: None,
            control_tx: back_for_node,
            shared: parts.shared,
            own_addr,
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
            applied: parts.applied,
            snapshot_entries: parts.snapshot_entries,
            snapshot_bytes: parts.snapshot_bytes,
            snapshot_tail: parts.snapshot_tail,
            bytes_since_snapshot: 0,
            next_snapshot_id: 0,
            snapshot_tx: Some(snapshot_tx),
            snapshot_thread,
            snapshot_in_flight: false,
            snapshot_failures: Vec::new(),
            reads_queued: Vec::new(),
            reads_in_flight: HashMap::new(),
            reads_confirmed: Vec::new(),
            next_read_id: 1,
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

    /// The applied configuration with addresses and (on the leader) match indexes.
    fn publish_members(&self) {
        let cs = self.raw.store().conf_state();
        let leading = self.raw.raft.state == StateRole::Leader;
        let addrs = self.shared.addrs.read().unwrap_or_else(|p| p.into_inner());
        let member = |id: u64, voter: bool| Member {
            id,
            addr: addrs.get(&id).cloned(),
            voter,
            match_index: if leading {
                self.raw.raft.prs().get(id).map(|p| p.matched)
            } else {
                None
            },
        };
        let mut members: Vec<Member> = cs
            .get_voters()
            .iter()
            .map(|&id| member(id, true))
            .chain(cs.get_learners().iter().map(|&id| member(id, false)))
            .collect();
        members.sort_by_key(|m| m.id);
        drop(addrs);
        let mut out = self
            .shared
            .members
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if *out != members {
            *out = members;
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
        let context = id.to_be_bytes().to_vec();
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

    fn voters(&self) -> Vec<u64> {
        self.raw.store().conf_state().get_voters().to_vec()
    }

    fn admin(&mut self, op: AdminOp, reply: AdminReply) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        let voters = self.voters();
        let cs = self.raw.store().conf_state();
        let is_member = |id: u64| voters.contains(&id) || cs.get_learners().contains(&id);
        let conf_pending = self.raw.raft.has_pending_conf()
            || self
                .pending
                .values()
                .any(|p| matches!(p.reply, Waiter::Conf(_)));
        let invalid = |why: String| Err(ProposeError::Invalid(why));
        let (cc, answer) = match op {
            AdminOp::Transfer(to) => {
                let r = if to == self.id {
                    Ok(AdminAnswer::Done)
                } else if !voters.contains(&to) {
                    invalid(format!("{to} is not a voter"))
                } else {
                    self.raw.transfer_leader(to);
                    Ok(AdminAnswer::Transferring(to))
                };
                let _ = reply.send(r);
                return;
            }
            AdminOp::Remove(id) if id == self.id => {
                // Hand leadership to the most up-to-date other voter first; the caller then
                // retries the removal there.
                let to = voters
                    .iter()
                    .filter(|&&v| v != self.id)
                    .max_by_key(|&&v| self.raw.raft.prs().get(v).map_or(0, |p| p.matched))
                    .copied();
                let r = match to {
                    Some(to) if !conf_pending => {
                        self.raw.transfer_leader(to);
                        Ok(AdminAnswer::Transferring(to))
                    }
                    Some(_) => invalid("a configuration change is pending".into()),
                    None => invalid("cannot remove the only voter".into()),
                };
                let _ = reply.send(r);
                return;
            }
            _ if conf_pending => {
                let _ = reply.send(invalid("a configuration change is pending".into()));
                return;
            }
            AdminOp::Add(id, addr) => {
                if id == 0 || is_member(id) {
                    let _ = reply.send(invalid(format!("{id} is already a member (or 0)")));
                    return;
                }
                // A log that still starts at index 1 (a data dir bootstrapped before snapshots
                // existed) would let the new member replicate from the log alone, and the
                // initial configuration is in no entry: compact first so it gets a snapshot.
                if self.raw.store().first_index_now() <= 1 {
                    if let Err(e) = self.maybe_snapshot(true) {
                        tracing::error!(member = self.id, error = %e, "snapshot before adding a member failed");
                        let _ = reply.send(Err(ProposeError::Dropped));
                        return;
                    }
                }
                let cc = ConfChange {
                    change_type: ConfChangeType::AddNode,
                    node_id: id,
                    context: addr.into_bytes().into(),
                    ..Default::default()
                };
                (cc, reply)
            }
            AdminOp::Remove(id) => {
                if !is_member(id) {
                    let _ = reply.send(invalid(format!("{id} is not a member")));
                    return;
                }
                let cc = ConfChange {
                    change_type: ConfChangeType::RemoveNode,
                    node_id: id,
                    ..Default::default()
                };
                (cc, reply)
            }
        };
        let id = self.next_proposal_id;
        self.next_proposal_id += 1;
        let context = conf_ctx(id);
        match self.raw.propose_conf_change(context.clone(), cc) {
            Ok(()) => self.track(context, Waiter::Conf(answer)),
            Err(e) => {
                tracing::debug!(member = self.id, error = %e, "conf change refused by raft");
                let _ = answer.send(Err(ProposeError::Dropped));
            }
        }
    }

    fn read_index(&mut self, reply: ReadReply) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        self.reads_queued.push(reply);
    }

    /// Hands the reads queued this turn to raft-rs as one ReadIndex round.
    fn start_reads(&mut self) {
        if self.reads_queued.is_empty() {
            return;
        }
        if self.raw.raft.state != StateRole::Leader {
            let leader = self.leader();
            for r in self.reads_queued.drain(..) {
                let _ = r.send(Err(ProposeError::NotLeader { leader }));
            }
            return;
        }
        // raft-rs silently ignores a read before the leader committed an entry of its term:
        // keep them queued until it has.
        if !self.raw.raft.commit_to_current_term() {
            return;
        }
        let mut ctx = vec![b'r'];
        ctx.extend_from_slice(&self.next_read_id.to_be_bytes());
        self.next_read_id += 1;
        self.raw.read_index(ctx.clone());
        self.reads_in_flight
            .insert(ctx, std::mem::take(&mut self.reads_queued));
    }

    /// Answers confirmed reads whose index is applied.
    fn finish_reads(&mut self) {
        let applied = self.applied;
        self.reads_confirmed.retain_mut(|(index, replies)| {
            if *index > applied {
                return true;
            }
            for r in replies.drain(..) {
                let _ = r.send(Ok(*index));
            }
            false
        });
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
        let wanted = self.raw.store().take_snapshot_wanted();
        if let Err(e) = self.maybe_snapshot(wanted) {
            tracing::error!(member = self.id, error = %e, "snapshot failed; stopping the node");
            ctx.stop();
            return;
        }
        self.publish_status();
    }

    /// Takes a snapshot at the applied index and compacts the log when enough was applied
    /// since the last one (or `force`: raft-rs needs one for a follower).
    fn maybe_snapshot(&mut self, force: bool) -> Result<(), crate::Error> {
        let last = self.raw.store().snapshot_metadata().index;
        let applied = self.applied;
        let since = applied.saturating_sub(last);
        let due = force
            || (self.snapshot_entries > 0 && since >= self.snapshot_entries)
            || (self.snapshot_bytes > 0 && self.bytes_since_snapshot >= self.snapshot_bytes);
        if !due || applied <= last || self.snapshot_in_flight {
            return Ok(());
        }
        let started = Instant::now();
        let term = self
            .raw
            .raft
            .raft_log
            .term(applied)
            .map_err(|e| crate::Error::Raft(format!("term of applied index {applied}: {e}")))?;
        let members = self
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let state = self.sm.snapshot();
        let t_state = started.elapsed();
        let data = SnapshotData {
            members,
            state: Some(state),
        };
        let mut snap = Snapshot {
            data: data.encode()?.into(),
            ..Default::default()
        };
        let t_encode = started.elapsed();
        let size = snap.data.len();
        let meta = snap.mut_metadata();
        meta.index = applied;
        meta.term = term;
        meta.set_conf_state(self.raw.store().conf_state().clone());
        // Keep a tail so a follower slightly behind catches up from the log.
        // Entry 1 goes in any case: see `admin` (a log must not start at 1 once members may
        // join).
        let compact_to = applied.saturating_sub(self.snapshot_tail).max(1);
        let sent = self
            .snapshot_tx
            .as_ref()
            .is_some_and(|tx| tx.send((snap, compact_to)).is_ok());
        if !sent {
            return Err(crate::Error::Storage("snapshot thread is gone".into()));
        }
        self.snapshot_in_flight = true;
        self.bytes_since_snapshot = 0;
        tracing::debug!(
            member = self.id,
            index = applied,
            bytes = size,
            forced = force,
            ?t_state,
            ?t_encode,
            "snapshot taken; writing it"
        );
        Ok(())
    }

    /// A local snapshot is durable: serve it and compact the log.
    fn on_snapshot_written(
        &mut self,
        written: Result<(Snapshot, u64), String>,
    ) -> Result<(), crate::Error> {
        self.snapshot_in_flight = false;
        let (snap, compact_to) = match written {
            Ok(x) => x,
            Err(e) => {
                // The log stays uncompacted; the next threshold retries.
                tracing::error!(member = self.id, error = %e, "writing a snapshot failed");
                return Ok(());
            }
        };
        let index = snap.get_metadata().index;
        self.raw.mut_store().snapshot_written(snap, compact_to)?;
        self.shared.snapshots.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            member = self.id,
            index,
            first_index = self.raw.store().first_index_now(),
            "snapshot stored, log compacted"
        );
        Ok(())
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
            if let Some(replies) = self.reads_in_flight.remove(&rs.request_ctx) {
                self.reads_confirmed.push((rs.index, replies));
            }
        }

        // 3. Committed (and locally persisted) entries.
        self.apply(rd.take_committed_entries())?;
        self.finish_reads();

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
            self.awaiting_flush
                .push_back((number, entries.len() as u64, persisted_msgs));
            self.request_flush(number)?;
        } else {
            self.send(persisted_msgs, &mut unreachable);
            self.raw.on_persist_ready(number);
        }
        self.advance_apply();
        tracing::trace!(member = self.id, number, elapsed = ?started.elapsed(), "ready handled");

        // Raft's own state may change only between readies.
        self.report_failures(unreachable);

        // Leadership lost: what is still pending may or may not commit under the next leader.
        // Keep waiting for a while as a follower: if the index applies, the entry there says
        // which (ours → Ok, another term's → Dropped); otherwise `expire_orphans` answers
        // Unknown. Reads not yet confirmed can no longer be: the new leader serves them.
        if self.raw.raft.state != StateRole::Leader {
            for p in self.pending.values_mut() {
                if p.orphaned_at.is_none() {
                    p.orphaned_at = Some(self.ticks);
                    self.has_orphans = true;
                }
            }
            if !self.reads_in_flight.is_empty() {
                let leader = self.leader();
                for (_, replies) in self.reads_in_flight.drain() {
                    for r in replies {
                        let _ = r.send(Err(ProposeError::NotLeader { leader }));
                    }
                }
            }
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

    fn report_failures(&mut self, unreachable: BTreeSet<u64>) {
        for to in unreachable {
            self.raw.report_unreachable(to);
        }
        for to in std::mem::take(&mut self.snapshot_failures) {
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }

    /// Installs a snapshot received from the leader: sled (log replaced), addresses,
    /// transport, then the state machine.
    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), crate::Error> {
        let index = snap.get_metadata().index;
        // Checked in `Consensus::step` before the message reached raft-rs.
        let data = SnapshotData::decode(&snap.data).map_err(crate::Error::Raft)?;
        let mut addrs = data.members;
        if let Some(own) = &self.own_addr {
            addrs.entry(self.id).or_insert_with(|| own.clone());
        }
        self.raw.mut_store().apply_snapshot(snap, &addrs)?;
        if let Some(state) = &data.state {
            self.sm
                .restore(state)
                .map_err(|e| crate::Error::Raft(format!("restore snapshot {index}: {e}")))?;
        }
        self.set_addrs(addrs, false)?;
        self.applied = index;
        self.bytes_since_snapshot = 0;
        self.shared
            .snapshots_received
            .fetch_add(1, Ordering::Relaxed);
        // Whatever waited on an index the snapshot covers may or may not be in it.
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > index {
                break;
            }
            entry.remove().reply.fail(ProposeError::Unknown);
        }
        tracing::info!(
            member = self.id,
            index,
            "snapshot from the leader installed"
        );
        Ok(())
    }

    /// Replaces the address map (writing it to sled when `persist`) and the peer tasks.
    fn set_addrs(
        &mut self,
        addrs: BTreeMap<u64, String>,
        persist: bool,
    ) -> Result<(), crate::Error> {
        if persist {
            self.raw.mut_store().set_addrs(&addrs)?;
        }
        if let Some(t) = self.transport.as_mut() {
            t.set_peers(&addrs);
        }
        *self.shared.addrs.write().unwrap_or_else(|p| p.into_inner()) = addrs;
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
                p.reply.fail(ProposeError::Unknown);
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
            .is_some_and(|(n, _, _)| *n <= number)
        {
            if let Some((_, entries, msgs)) = self.awaiting_flush.pop_front() {
                self.shared
                    .entries_persisted
                    .fetch_add(entries, Ordering::Relaxed);
                self.send(msgs, &mut unreachable);
            }
        }
        self.raw.on_persist_ready(number);
        self.advance_apply();
        self.report_failures(unreachable);
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), crate::Error> {
        for e in entries {
            let index = e.index;
            self.bytes_since_snapshot += e.data.len() as u64;
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
            self.resolve(index, e.term, &e.context, applied);
            self.applied = index;
        }
        Ok(())
    }

    /// Follows an applied configuration change in the address map and the peer tasks.
    fn conf_addresses(
        &mut self,
        ty: ConfChangeType,
        id: u64,
        context: &[u8],
    ) -> Result<(), crate::Error> {
        let mut addrs = self
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match ty {
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                match std::str::from_utf8(context) {
                    Ok(a) if !a.is_empty() => {
                        addrs.insert(id, a.to_string());
                    }
                    _ => tracing::warn!(member = self.id, id, "member added without an address"),
                }
            }
            ConfChangeType::RemoveNode => {
                addrs.remove(&id);
                if id == self.id {
                    tracing::info!(member = self.id, "this member was removed from the cluster");
                }
            }
        }
        tracing::info!(member = self.id, ?ty, id, "configuration change applied");
        self.set_addrs(addrs, true)
    }

    /// Settles the proposal waiting on `index`, now that the entry there is applied.
    fn resolve(&mut self, index: u64, term: u64, context: &[u8], applied: Applied<S::Output>) {
        metrics::counter!("raft_applied_entries_total").increment(1);
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

    fn send(&mut self, msgs: Vec<RaftMsg>, unreachable: &mut BTreeSet<u64>) {
        if msgs.is_empty() {
            return;
        }
        let mut by_peer: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        let mut snapshots: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        let delay;
        {
            let mut faults = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
            let healthy = faults.healthy();
            delay = faults.delay();
            for m in msgs {
                let is_snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
                if !healthy && !faults.allow_out(m.to) {
                    if is_snapshot {
                        self.snapshot_failures.push(m.to);
                    }
                    continue;
                }
                match m.write_to_bytes() {
                    Ok(b) if is_snapshot => {
                        // One MsgSnapshot may exceed the frame cap: chunks, reassembled by
                        // the receiver before `step`.
                        self.next_snapshot_id += 1;
                        snapshots.push((m.to, chunk::split(self.next_snapshot_id, &b)));
                    }
                    Ok(b) => by_peer.entry(m.to).or_default().push(b),
                    Err(e) => {
                        tracing::error!(member = self.id, error = %e, "cannot encode raft message")
                    }
                }
            }
        }
        let Some(transport) = self.transport.as_ref() else {
            return;
        };
        let not_before = Instant::now() + delay;
        for (to, batch) in by_peer {
            let out = Outgoing {
                msgs: batch,
                not_before,
                snapshot: false,
            };
            if let Err(e) = transport.send(to, out) {
                tracing::trace!(member = self.id, to, ?e, "raft message not queued");
                unreachable.insert(to);
            }
        }
        for (to, chunks) in snapshots {
            tracing::info!(
                member = self.id,
                to,
                chunks = chunks.len(),
                "sending snapshot"
            );
            let out = Outgoing {
                msgs: chunks,
                not_before,
                snapshot: true,
            };
            if let Err(e) = transport.send(to, out) {
                tracing::debug!(member = self.id, to, ?e, "snapshot not queued");
                unreachable.insert(to);
                self.snapshot_failures.push(to);
            } else {
                self.shared.snapshots_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn flush_loop<O>(
    db: sled::Db,
    rx: std::sync::mpsc::Receiver<u64>,
    back: mpsc::UnboundedSender<Input<O>>,
    shared: std::sync::Arc<Shared>,
) {
    while let Ok(mut number) = rx.recv() {
        // One fsync for every Ready written meanwhile.
        while let Ok(n) = rx.try_recv() {
            number = number.max(n);
        }
        let started = std::time::Instant::now();
        let flushed = db.flush();
        shared.flushes.fetch_add(1, Ordering::Relaxed);
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

fn snapshot_loop<O>(
    file: std::sync::Arc<crate::storage::SnapshotFile>,
    rx: std::sync::mpsc::Receiver<(Snapshot, u64)>,
    back: mpsc::UnboundedSender<Input<O>>,
) {
    while let Ok((snap, compact_to)) = rx.recv() {
        let started = Instant::now();
        let index = snap.get_metadata().index;
        let written = snap
            .write_to_bytes()
            .map_err(|e| format!("encode snapshot: {e}"))
            .and_then(|bytes| file.write(index, &bytes).map_err(|e| e.to_string()));
        metrics::histogram!("raft_snapshot_write_seconds").record(started.elapsed().as_secs_f64());
        let msg = match written {
            Ok(_) => Input::SnapshotWritten(Ok((snap, compact_to))),
            Err(e) => Input::SnapshotWritten(Err(e)),
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
        let back = self.control_tx.clone();
        let report: crate::transport::SnapshotReport = std::sync::Arc::new(move |to, ok| {
            let _ = back.send(Input::SnapshotSent { to, ok });
        });
        let addrs = self
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match Transport::start(self.id, &addrs, report) {
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
            // Reads whose caller gave up (timed out) need not wait for a confirmation.
            node.reads_in_flight.retain(|_, rs| {
                rs.retain(|r| !r.is_closed());
                !rs.is_empty()
            });
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
                Input::ReadIndex(reply) => self.read_index(reply),
                Input::Admin(op, reply) => self.admin(op, reply),
                Input::ExportLog {
                    from,
                    max_bytes,
                    reply,
                } => {
                    let page = self
                        .raw
                        .store()
                        .export(from, self.applied, max_bytes, is_command);
                    let _ = reply.send(page);
                }
                Input::SnapshotWritten(written) => {
                    if let Err(e) = self.on_snapshot_written(written) {
                        tracing::error!(member = self.id, error = %e, "compaction failed; stopping the node");
                        ctx.stop();
                        return;
                    }
                }
                Input::SnapshotSent { to, ok } => {
                    let status = if ok {
                        SnapshotStatus::Finish
                    } else {
                        SnapshotStatus::Failure
                    };
                    tracing::debug!(member = self.id, to, ok, "snapshot delivery reported");
                    self.raw.report_snapshot(to, status);
                }
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
            p.reply.fail(ProposeError::Unknown);
        }
        for r in std::mem::take(&mut self.reads_queued) {
            let _ = r.send(Err(ProposeError::Stopped));
        }
        for (_, rs) in std::mem::take(&mut self.reads_in_flight) {
            rs.into_iter().for_each(|r| {
                let _ = r.send(Err(ProposeError::Stopped));
            });
        }
        // Ending the storage thread releases its sled handle, so the data dir can be
        // reopened once `_terminated` (dropped after `raw`) signals.
        self.flush_tx = None;
        if let Some(t) = self.flush_thread.take() {
            let _ = t.join();
        }
        self.snapshot_tx = None;
        if let Some(t) = self.snapshot_thread.take() {
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
