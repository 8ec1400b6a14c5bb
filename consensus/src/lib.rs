//! Raft replication for hetsched masters: raft-rs `RawNode` driven by an actix actor, log and
//! hard state in sled, Raft messages carried in hetsched frames over TCP.
//!
//! The crate knows nothing of tasks: it replicates opaque commands into a [`StateMachine`].
//!
//! ```text
//!  client ──propose(bytes)──▶ RaftNode actor ──Ready──▶ sled (entries, hard state; fsync)
//!                               │    ▲                    │
//!                         msgs  │    │ step(msgs)         ▼
//!                               ▼    │              committed entries ──▶ StateMachine::apply
//!                            peers (TCP)                                   └─▶ resolves the proposal
//! ```
//!
//! # Wiring
//!
//! ```text
//! let consensus = Consensus::start(cfg, sm)?;          // inside an actix System
//! // the master's TCP listener, for every Message::Raft { from, msgs }:
//! consensus.step(from.get(), msgs.into_iter().map(|b| b.into_vec()).collect());
//! let out = consensus.propose(bytes).await?;           // resolves once applied
//! ```
//!
//! # Threads
//!
//! - the Raft actor on its own actix `Arbiter`: ticks, steps, proposals, the Ready cycle,
//!   sled writes (not flushes) and `StateMachine::apply`;
//! - `raft-N-flush`: sled flushes (fsync), coalesced, one per batch of Readies;
//! - `raft-N-snap`: encoding and fsyncing local snapshots;
//! - `raft-N-net`: a one-worker tokio runtime with one task per peer (frame encoding,
//!   connect with backoff, socket writes).
//!
//! Every method of [`Consensus`] may be called from any thread or runtime.
//!
//! # Proposals
//!
//! A proposal carries a proposal id in its entry's context; the leader remembers the (index,
//! term) raft-rs gave it. When that index is applied: same term and id → `Ok(output)`;
//! anything else there → [`ProposeError::Dropped`] (ours was overwritten, so it never
//! commits). A leader that steps down keeps its pending proposals for two election timeouts
//! in case their indexes apply meanwhile, then answers [`ProposeError::Unknown`].
//!
//! # Snapshots and compaction
//!
//! Once [`RaftConfig::snapshot_entries`] entries (or [`RaftConfig::snapshot_bytes`] bytes) were
//! applied since the last snapshot, the node takes [`StateMachine::snapshot`] at the applied
//! index (on the Raft thread: the state at that index) with its metadata, the configuration
//! and the member address map. A thread of its own writes it durably to
//! `raft-snapshot.bin` in the data dir (a file, not a sled value: see `storage.rs` for the
//! measurements), then the log is compacted in sled up to `snapshot_tail` entries before it.
//! A follower behind the compacted log receives the snapshot: raft-rs emits one `MsgSnapshot`,
//! which the sender splits into 1 MiB chunks (format in `chunk.rs`: a zero byte no protobuf
//! message starts with, then snapshot id, sequence, count and total length) carried as
//! ordinary entries of `Message::Raft { msgs }` — several frames when large — and which
//! [`Consensus::step`] reassembles before raft-rs sees it. The leader reports delivery with
//! `report_snapshot` (Finish once every chunk was written, Failure otherwise). The receiver
//! stores the snapshot (replacing its log), calls [`StateMachine::restore`] and applies the
//! entries after it. A restarting member restores its snapshot before replaying the log tail.
//!
//! A fresh cluster starts from a bootstrap snapshot at index 1 (the initial voters, no
//! state), so the first entry is index 2 and a member that joins later (empty log) is always
//! caught up by a snapshot — the initial configuration is in no log entry.
//!
//! # Membership
//!
//! [`Consensus::add_member`] / [`Consensus::remove_member`] propose a `ConfChange` (the
//! address travels in its context and is persisted); one change at a time. The peer tasks and
//! [`Consensus::peer_addr`] follow applied changes. A member started with
//! [`RaftConfig::join`] and an empty data dir does not bootstrap: it waits with an empty
//! configuration until the leader (once the member is added) sends it a snapshot.
//!
//! # Reads
//!
//! [`Consensus::read_index`] is raft-rs ReadIndex (safe mode, no lease): reads queued in one
//! actor turn share one round; the answer comes once a quorum confirmed the leadership and the
//! read index is applied. A partitioned or deposed leader cannot get the confirmation.
//!
//! # Faults
//!
//! [`Consensus::set_faults`] drops (seeded), delays, cuts links or isolates this member: the
//! node filters what it sends, and [`Consensus::step`] drops what arrives from cut peers, so a
//! cut on one side severs both directions.

#![deny(missing_docs)]

mod chunk;
mod fault;
mod logger;
mod node;
mod storage;
mod transport;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor as _;
use node::{AdminAnswer, AdminOp, Input, NodeParts, RaftNode, Shared};
use protobuf::Message as _;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot, watch};

pub use logger::TracingDrain;

/// Largest command [`Consensus::propose`] accepts. Raft sends an entry whole even when it is
/// larger than `max_size_per_msg`, so this keeps one entry well inside a 16 MiB frame.
pub const MAX_COMMAND_SIZE: usize = 4 * 1024 * 1024;
/// raft-rs `max_size_per_msg`: append messages stay far below the frame cap.
pub const MAX_SIZE_PER_MSG: u64 = 1024 * 1024;
/// raft-rs `max_inflight_msgs`.
pub const MAX_INFLIGHT_MSGS: usize = 256;
/// raft-rs `max_committed_size_per_ready`: bounds the apply work of one Ready.
pub const MAX_COMMITTED_SIZE_PER_READY: u64 = 4 * 1024 * 1024;
/// raft-rs `max_uncommitted_size`: past it, proposals fail with [`ProposeError::Dropped`].
pub const MAX_UNCOMMITTED_SIZE: u64 = 256 * 1024 * 1024;

/// What the log replicates into. Implementations must be deterministic: the same sequence of
/// `apply` calls yields the same state on every replica (no clock, no randomness, no I/O).
pub trait StateMachine: Send + 'static {
    /// What `apply` returns to the proposer.
    type Output: Send + 'static;
    /// Applies one committed command at log `index`.
    fn apply(&mut self, index: u64, command: &[u8]) -> Self::Output;
    /// A serialised copy of the whole state.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot's.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String>;
}

/// Configuration of one Raft member.
#[derive(Clone, Debug)]
pub struct RaftConfig {
    /// This member's id (≥ 1).
    pub id: u64,
    /// Every initial member (this one included) and its cluster address. Used to bootstrap
    /// an empty data dir (afterwards the configuration comes from the log) and as the address
    /// book until the log or a snapshot says otherwise. With `join`, it must name this member
    /// and the current members (so this member can answer the leader before it receives the
    /// snapshot that carries the full address map).
    pub peers: BTreeMap<u64, String>,
    /// Where sled keeps the log.
    pub data_dir: PathBuf,
    /// Raft tick interval.
    pub tick: Duration,
    /// Election timeout in ticks (randomised by raft-rs between this and twice this).
    pub election_ticks: usize,
    /// Heartbeat interval in ticks.
    pub heartbeat_ticks: usize,
    /// Start with an empty configuration and wait to be added by the cluster
    /// (`hetsched master --join`): `peers` is not used to bootstrap.
    pub join: bool,
    /// Take a snapshot and compact the log once this many entries were applied since the
    /// last snapshot (0 = never).
    pub snapshot_entries: u64,
    /// ... or once the log holds this many bytes since the last snapshot (0 = no byte limit).
    pub snapshot_bytes: u64,
    /// Entries kept before a snapshot's index when the log is compacted, so a follower
    /// slightly behind catches up from the log instead of a snapshot.
    pub snapshot_tail: u64,
}

impl RaftConfig {
    /// A configuration with the usual timing: 100 ms ticks, an election timeout of 5 ticks
    /// (0.5–1 s once raft-rs randomises it), a heartbeat every tick.
    pub fn new(id: u64, peers: BTreeMap<u64, String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            id,
            peers,
            data_dir: data_dir.into(),
            tick: Duration::from_millis(100),
            election_ticks: 5,
            heartbeat_ticks: 1,
            join: false,
            snapshot_entries: 10_000,
            snapshot_bytes: 64 * 1024 * 1024,
            snapshot_tail: 1_000,
        }
    }
}

/// Role of this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Leader.
    Leader,
    /// Follower.
    Follower,
    /// Candidate.
    Candidate,
    /// Pre-candidate (pre-vote).
    PreCandidate,
}

/// A snapshot of this member's Raft status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// This member.
    pub id: u64,
    /// Known leader.
    pub leader: Option<u64>,
    /// Term.
    pub term: u64,
    /// Role.
    pub role: Role,
    /// Commit index.
    pub commit_index: u64,
    /// Applied index.
    pub applied_index: u64,
}

/// Why a proposal did not apply.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// This member is not the leader.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// Known leader.
        leader: Option<u64>,
    },
    /// The entry was overwritten by another term's entry: it did not apply.
    #[error("proposal dropped by a leadership change; it did not apply")]
    Dropped,
    /// Leadership was lost before the entry applied: it may or may not apply.
    #[error("leadership lost before the proposal applied; outcome unknown")]
    Unknown,
    /// The command exceeds the size limit.
    #[error("proposal of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// The node is shutting down.
    #[error("raft node stopped")]
    Stopped,
    /// The request is invalid (e.g. removing an unknown member, adding one twice).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No answer within the time allowed (e.g. a leader transfer that did not complete).
    #[error("timed out: {0}")]
    Timeout(String),
}

/// A member of the Raft configuration, as this member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Id.
    pub id: u64,
    /// Cluster address, if known.
    pub addr: Option<String>,
    /// Voter (true) or learner.
    pub voter: bool,
    /// Highest log index known to be replicated there (known on the leader only).
    pub match_index: Option<u64>,
}

/// Faults injected into this member's Raft traffic (both directions), for tests and the
/// chaos tool. Seeded, so a run replays. The default is a healthy network.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Seed of the drop decisions.
    pub seed: u64,
    /// Probability of dropping each message, 0.0–1.0.
    pub drop_rate: f64,
    /// Extra delay on every outgoing message.
    pub delay: Duration,
    /// Peers whose links are cut (nothing sent to or accepted from them).
    pub cut: std::collections::BTreeSet<u64>,
    /// Cut from every peer.
    pub isolated: bool,
}

/// Counters of this member's log work (for benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsensusStats {
    /// Proposals accepted into the log by this member as leader.
    pub proposals: u64,
    /// Entries made durable.
    pub entries_persisted: u64,
    /// Disk flushes (fsyncs) of the log.
    pub flushes: u64,
    /// Snapshots taken.
    pub snapshots: u64,
    /// First index still in the log (everything before is compacted).
    pub first_index: u64,
    /// Snapshots sent to followers (as leader).
    pub snapshots_sent: u64,
    /// Snapshots received from a leader and installed.
    pub snapshots_received: u64,
}

/// One page of a member's applied log, as [`Consensus::export_log`] reads it (the chaos
/// tool replays it to check every index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogPage {
    /// Set when the page starts in the compacted part of the log: the snapshot's index and
    /// its [`StateMachine::snapshot`] bytes, standing for everything up to that index.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Commands in index order, `(index, bytes)`; no-ops and configuration changes left out.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// Where the next page starts (one past the last index this page covers).
    pub next: u64,
    /// The member's applied index when the page was read: the export is complete once
    /// `next > applied`.
    pub applied: u64,
}

/// Errors of starting or running the Raft node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// sled failed.
    #[error("storage: {0}")]
    Storage(String),
    /// raft-rs refused.
    #[error("raft: {0}")]
    Raft(String),
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Handle to a running Raft member. Cheap to clone, `Send + Sync`.
pub struct Consensus<S: StateMachine> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: StateMachine> {
    id: u64,
    /// Peer messages and stop requests.
    control: mpsc::UnboundedSender<Input<S::Output>>,
    /// Proposals, taken in bounded turns after control inputs.
    proposals: mpsc::UnboundedSender<node::Proposal<S::Output>>,
    status: watch::Receiver<RaftStatus>,
    terminated: watch::Receiver<()>,
    shared: Arc<Shared>,
    /// How long a leadership transfer may take before it is reported as timed out.
    transfer_wait: Duration,
    /// How long a read waits for its quorum confirmation and apply.
    read_wait: Duration,
}

impl<S: StateMachine> Clone for Consensus<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S: StateMachine> Consensus<S> {
    /// Starts the member (inside an actix `System`): opens sled in `cfg.data_dir`, bootstraps
    /// from `cfg.peers` when the data dir is empty, and replays the log into `sm`.
    ///
    /// The node runs on a new actix `Arbiter` of its own, so nothing else on the caller's
    /// threads delays its ticks. `sm` must be empty: every committed entry is re-applied.
    pub fn start(cfg: RaftConfig, sm: S) -> Result<Self> {
        validate(&cfg)?;
        if actix::System::try_current().is_none() {
            return Err(Error::Config(
                "Consensus::start must be called inside an actix System".into(),
            ));
        }
        let voters: Vec<u64> = cfg.peers.keys().copied().collect();
        let bootstrap = (!cfg.join).then_some(voters.as_slice());
        let opened = storage::SledStorage::open(&cfg.data_dir, bootstrap, &cfg.peers)?;
        let hs = opened.storage.hard_state().clone();
        let mut sm = sm;
        // A snapshot restores the state machine; only the log after it is replayed.
        let snapshot_index = opened.storage.snapshot_metadata().index;
        if let Some(state) = &opened.state {
            sm.restore(state)
                .map_err(|e| Error::Storage(format!("restore snapshot {snapshot_index}: {e}")))?;
        }
        // Addresses from earlier runs (conf changes, snapshots) win over the configuration;
        // this member's own address is always the configured one.
        let mut addrs = if opened.addrs.is_empty() {
            cfg.peers.clone()
        } else {
            opened.addrs.clone()
        };
        if let Some(own) = cfg.peers.get(&cfg.id) {
            addrs.insert(cfg.id, own.clone());
        }
        tracing::info!(
            member = cfg.id,
            dir = %cfg.data_dir.display(),
            bootstrapped = opened.bootstrapped,
            join = cfg.join,
            snapshot_index,
            term = hs.term,
            commit = hs.commit,
            last_index = opened.storage.last_index_now(),
            "opened raft storage"
        );
        let raft_cfg = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            // The state machine holds the snapshot (if any): raft-rs hands out every committed
            // entry after it again (up to the stored commit index).
            applied: snapshot_index,
            max_size_per_msg: MAX_SIZE_PER_MSG,
            max_inflight_msgs: MAX_INFLIGHT_MSGS,
            check_quorum: true,
            pre_vote: true,
            max_committed_size_per_ready: MAX_COMMITTED_SIZE_PER_READY,
            max_uncommitted_size: MAX_UNCOMMITTED_SIZE,
            // Merge a burst's appends to one peer into one message instead of one per entry.
            batch_append: true,
            ..Default::default()
        };
        raft_cfg
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        let raw = raft::RawNode::new(&raft_cfg, opened.storage, &logger::raft_logger())
            .map_err(|e| Error::Raft(e.to_string()))?;

        let initial = RaftStatus {
            id: cfg.id,
            leader: None,
            term: hs.term,
            role: Role::Follower,
            commit_index: hs.commit,
            applied_index: snapshot_index,
        };
        let shared = Arc::new(Shared::default());
        shared
            .first_index
            .store(raw.store().first_index_now(), Ordering::Relaxed);
        *shared.addrs.write().unwrap_or_else(|p| p.into_inner()) = addrs;
        let (status_tx, status_rx) = watch::channel(initial);
        let (terminated_tx, terminated_rx) = watch::channel(());
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (proposals_tx, proposals_rx) = mpsc::unbounded_channel();
        let parts = NodeParts {
            raw,
            sm: Box::new(sm),
            shared: shared.clone(),
            applied: snapshot_index,
            snapshot_entries: cfg.snapshot_entries,
            snapshot_bytes: cfg.snapshot_bytes,
            snapshot_tail: cfg.snapshot_tail,
            peers: cfg.peers.clone(),
            control_rx,
            control_tx: control_tx.clone(),
            proposals_rx,
            status_tx,
            terminated: terminated_tx,
            tick: cfg.tick,
            election_ticks: cfg.election_ticks,
        };
        let arbiter = actix::Arbiter::new();
        RaftNode::start_in_arbiter(&arbiter.handle(), move |_| RaftNode::new(parts));
        Ok(Self {
            inner: Arc::new(Inner {
                id: cfg.id,
                control: control_tx,
                proposals: proposals_tx,
                status: status_rx,
                terminated: terminated_rx,
                shared,
                transfer_wait: (cfg.tick * (4 * cfg.election_ticks) as u32)
                    .max(Duration::from_secs(2)),
                read_wait: (cfg.tick * (4 * cfg.election_ticks) as u32).max(Duration::from_secs(2)),
            }),
        })
    }

    /// Proposes `command`; resolves once it is applied (with `apply`'s output).
    ///
    /// Errors: [`ProposeError::NotLeader`] when this member is not the leader (nothing was
    /// proposed); [`ProposeError::Dropped`] when the entry certainly did not and will not
    /// apply (raft refused it, or another term's entry was applied at its index);
    /// [`ProposeError::Unknown`] when leadership was lost and the entry's index did not apply
    /// within two election timeouts (or the node stopped) — it may still apply;
    /// [`ProposeError::Stopped`] when the node is gone before the command reached Raft.
    pub async fn propose(&self, command: Vec<u8>) -> Result<S::Output, ProposeError> {
        if command.len() > MAX_COMMAND_SIZE {
            return Err(ProposeError::TooLarge(command.len()));
        }
        let (reply, rx) = oneshot::channel();
        self.inner
            .proposals
            .send((command, reply))
            .map_err(|_| ProposeError::Stopped)?;
        // A dropped reply means the input was discarded unread by a stopping node.
        rx.await.unwrap_or(Err(ProposeError::Stopped))
    }

    /// Feeds Raft messages received from peer `from` (protobuf bytes each). Malformed
    /// messages, and messages whose sender is not `from`, are logged and dropped.
    pub fn step(&self, from: u64, msgs: Vec<Vec<u8>>) {
        // Injected faults: a cut link drops what arrives on it too.
        if !self
            .inner
            .shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allow_in(from)
        {
            return;
        }
        let mut decoded = Vec::with_capacity(msgs.len());
        for bytes in msgs {
            let bytes = if chunk::is_chunk(&bytes) {
                let mut chunks = self
                    .inner
                    .shared
                    .chunks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match chunks.push(from, &bytes) {
                    Ok(Some(whole)) => whole,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(member = self.inner.id, from, error = %e, "malformed snapshot chunk dropped");
                        continue;
                    }
                }
            } else {
                bytes
            };
            match raft::eraftpb::Message::parse_from_bytes(&bytes) {
                Ok(m)
                    if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot
                        && storage::SnapshotData::decode(&m.get_snapshot().data).is_err() =>
                {
                    tracing::warn!(
                        member = self.inner.id,
                        from,
                        "snapshot with undecodable data dropped"
                    )
                }
                Ok(m) if m.from == from && m.to == self.inner.id => decoded.push(m),
                Ok(m) => tracing::warn!(
                    member = self.inner.id,
                    from,
                    msg_from = m.from,
                    msg_to = m.to,
                    "raft message with a foreign sender or recipient dropped"
                ),
                Err(e) => tracing::warn!(
                    member = self.inner.id,
                    from,
                    error = %e,
                    "malformed raft message dropped"
                ),
            }
        }
        if !decoded.is_empty() {
            // A stopped node simply no longer listens.
            let _ = self.inner.control.send(Input::Step(decoded));
        }
    }

    /// Current status (cheap).
    pub fn status(&self) -> RaftStatus {
        self.inner.status.borrow().clone()
    }

    /// A receiver that sees every status change (leader, term, role, commit and applied
    /// index). It is updated after each Raft turn that changed any of them.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<RaftStatus> {
        self.inner.status.clone()
    }

    /// Cluster address of member `id`, if known.
    pub fn peer_addr(&self, id: u64) -> Option<String> {
        self.inner
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// This member's id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Linearizable read barrier (Raft ReadIndex): confirms with a quorum that this member is
    /// still the leader, then waits until everything committed before the read is applied.
    /// Returns the read index. `NotLeader` on followers and on a deposed leader; `Timeout`
    /// when no quorum confirmed in time (a partitioned leader never answers `Ok`).
    /// Concurrent reads share one ReadIndex round.
    pub async fn read_index(&self) -> Result<u64, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .control
            .send(Input::ReadIndex(reply))
            .map_err(|_| ProposeError::Stopped)?;
        match tokio::time::timeout(self.inner.read_wait, rx).await {
            Ok(r) => r.unwrap_or(Err(ProposeError::Stopped)),
            Err(_) => Err(ProposeError::Timeout(
                "read index not confirmed by a quorum".into(),
            )),
        }
    }

    async fn admin(&self, op: AdminOp) -> Result<AdminAnswer, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .control
            .send(Input::Admin(op, reply))
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.unwrap_or(Err(ProposeError::Unknown))
    }

    /// Waits until this member sees `to` as the leader.
    async fn await_leader(&self, to: u64) -> Result<(), ProposeError> {
        let mut rx = self.inner.status.clone();
        let me = self.inner.id;
        let wait = rx.wait_for(|s| s.leader == Some(to) && (to != me || s.role == Role::Leader));
        let r = tokio::time::timeout(self.inner.transfer_wait, wait)
            .await
            .map(|r| r.map(|_| ()));
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ProposeError::Stopped),
            Err(_) => Err(ProposeError::Timeout(format!(
                "member {to} did not take over leadership"
            ))),
        }
    }

    /// Adds member `id` at `addr` as a voter (through a Raft configuration change). Resolves
    /// once the change is applied. Leader only; one configuration change at a time (a second
    /// one while the first is pending is `Invalid`). The new member (started with
    /// `join: true`) is then caught up by a snapshot.
    pub async fn add_member(&self, id: u64, addr: String) -> Result<(), ProposeError> {
        match self.admin(AdminOp::Add(id, addr)).await? {
            AdminAnswer::Done => Ok(()),
            AdminAnswer::Transferring(_) => Err(ProposeError::Unknown),
        }
    }

    /// Removes member `id`. Removing the leader itself hands leadership to the most
    /// up-to-date other voter first (the call then answers `NotLeader` naming the new leader,
    /// where it should be retried; `Timeout` if the transfer did not complete).
    pub async fn remove_member(&self, id: u64) -> Result<(), ProposeError> {
        match self.admin(AdminOp::Remove(id)).await? {
            AdminAnswer::Done => Ok(()),
            AdminAnswer::Transferring(to) => {
                self.await_leader(to).await?;
                Err(ProposeError::NotLeader { leader: Some(to) })
            }
        }
    }

    /// Hands leadership to voter `to`; resolves once `to` leads (`Timeout` otherwise).
    pub async fn transfer_leader(&self, to: u64) -> Result<(), ProposeError> {
        match self.admin(AdminOp::Transfer(to)).await? {
            AdminAnswer::Done => Ok(()),
            AdminAnswer::Transferring(to) => self.await_leader(to).await,
        }
    }

    /// The current configuration as this member knows it (applied configuration changes),
    /// with addresses; match indexes only on the leader.
    pub fn members(&self) -> Vec<Member> {
        self.inner
            .shared
            .members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads one page of this member's applied log from index `from` (at most `max_bytes` of
    /// entries, at least one), on the Raft thread so the log and snapshot are consistent.
    /// Starts with the snapshot's state when `from` lies in the compacted part.
    pub async fn export_log(&self, from: u64, max_bytes: u64) -> Result<LogPage> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .control
            .send(Input::ExportLog {
                from,
                max_bytes,
                reply,
            })
            .map_err(|_| Error::Raft("the node has stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(Error::Raft("the node has stopped".into())))
    }

    /// Replaces the injected faults (see [`FaultConfig`]); `FaultConfig::default()` heals.
    pub fn set_faults(&self, faults: FaultConfig) {
        *self
            .inner
            .shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = fault::Faults::new(faults);
    }

    /// Log-work counters.
    pub fn stats(&self) -> ConsensusStats {
        let s = &self.inner.shared;
        ConsensusStats {
            proposals: s.proposals.load(Ordering::Relaxed),
            entries_persisted: s.entries_persisted.load(Ordering::Relaxed),
            flushes: s.flushes.load(Ordering::Relaxed),
            snapshots: s.snapshots.load(Ordering::Relaxed),
            first_index: s.first_index.load(Ordering::Relaxed),
            snapshots_sent: s.snapshots_sent.load(Ordering::Relaxed),
            snapshots_received: s.snapshots_received.load(Ordering::Relaxed),
        }
    }

    /// Asks the node to stop. Pending proposals then fail with [`ProposeError::Unknown`],
    /// later ones with [`ProposeError::Stopped`]. See [`Consensus::stopped`].
    pub fn stop(&self) {
        let _ = self.inner.control.send(Input::Stop);
    }

    /// True once the node has stopped and released its data dir.
    pub fn is_stopped(&self) -> bool {
        self.inner.terminated.has_changed().is_err()
    }

    /// Resolves once the node has stopped and released its data dir (so a new member may
    /// be started on it).
    pub async fn stopped(&self) {
        let mut rx = self.inner.terminated.clone();
        while rx.changed().await.is_ok() {}
    }
}

fn validate(cfg: &RaftConfig) -> Result<()> {
    if cfg.id == 0 {
        return Err(Error::Config("member id must be ≥ 1".into()));
    }
    if cfg.peers.contains_key(&0) {
        return Err(Error::Config("peer ids must be ≥ 1".into()));
    }
    if !cfg.peers.contains_key(&cfg.id) {
        return Err(Error::Config(format!(
            "member {} is not among the peers {:?}",
            cfg.id,
            cfg.peers.keys().collect::<Vec<_>>()
        )));
    }
    if cfg.tick.is_zero() {
        return Err(Error::Config("tick must be positive".into()));
    }
    if cfg.heartbeat_ticks == 0 || cfg.election_ticks <= cfg.heartbeat_ticks {
        return Err(Error::Config(format!(
            "need 0 < heartbeat_ticks ({}) < election_ticks ({})",
            cfg.heartbeat_ticks, cfg.election_ticks
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl StateMachine for Nop {
        type Output = ();
        fn apply(&mut self, _: u64, _: &[u8]) {}
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn handle_is_clone_send_sync() {
        fn check<T: Clone + Send + Sync + 'static>() {}
        check::<Consensus<Nop>>();
    }

    #[test]
    fn bad_configs_are_refused() {
        let peers: BTreeMap<u64, String> = [(1, "127.0.0.1:1".to_string())].into();
        let dir = std::env::temp_dir().join("hetsched-consensus-never-created");
        let mut cfg = RaftConfig::new(0, peers.clone(), &dir);
        assert!(matches!(validate(&cfg), Err(Error::Config(_))));
        cfg.id = 2;
        assert!(
            matches!(validate(&cfg), Err(Error::Config(_))),
            "not a peer"
        );
        cfg.id = 1;
        assert!(validate(&cfg).is_ok());
        cfg.heartbeat_ticks = cfg.election_ticks;
        assert!(matches!(validate(&cfg), Err(Error::Config(_))));
        let cfg = RaftConfig::new(1, peers, &dir);
        // Outside an actix System.
        assert!(matches!(Consensus::start(cfg, Nop), Err(Error::Config(_))));
    }
}
