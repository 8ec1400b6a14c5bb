//! [`Consensus`], the handle to a running member: starting it (opening the store, restoring
//! the snapshot, building the `RawNode` and the actor), and the calls other threads make —
//! proposals, peer messages in (with snapshot-chunk reassembly and injected faults), reads,
//! membership changes, status, counters and log export. Every call reaches the actor through
//! a channel or reads the state it publishes.

use crate::config::validate;
use crate::node::{self, AdminAnswer, AdminOp, Input, NodeParts, RaftNode, Shared};
use crate::{
    chunk, fault, logger, storage, ConsensusStats, Error, FaultConfig, LogPage, Member,
    ProposeError, RaftConfig, RaftStatus, Result, Role, StateMachine, MAX_COMMAND_SIZE,
    MAX_COMMITTED_SIZE_PER_READY, MAX_INFLIGHT_MSGS, MAX_SIZE_PER_MSG, MAX_UNCOMMITTED_SIZE,
};
use actix::Actor as _;
use protobuf::Message as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

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
    /// How long before a transfer that did not take is asked for again (two election
    /// timeouts: the leader gives a transfer up after one).
    transfer_retry: Duration,
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
                transfer_retry: cfg.tick * (2 * cfg.election_ticks) as u32,
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

    /// Asks for `op` (a transfer, or the leader's own removal, which transfers first) and,
    /// when a transfer starts, waits until this member sees its target lead.
    ///
    /// Why the request is repeated: the target ignores the leader's `TimeoutNow` while it
    /// still has a configuration change to apply (raft-rs will not campaign then; a removal
    /// right after another removal hits this), and the leader gives the transfer up after an
    /// election timeout. So each `transfer_retry` without a new leader asks again, until
    /// `transfer_wait` has passed.
    async fn hand_off(&self, op: impl Fn() -> AdminOp) -> Result<AdminAnswer, ProposeError> {
        let deadline = tokio::time::Instant::now() + self.inner.transfer_wait;
        let me = self.inner.id;
        loop {
            let to = match self.admin(op()).await? {
                AdminAnswer::Transferring(to) => to,
                done => return Ok(done),
            };
            let mut rx = self.inner.status.clone();
            let wait =
                rx.wait_for(|s| s.leader == Some(to) && (to != me || s.role == Role::Leader));
            let slice = tokio::time::Instant::now() + self.inner.transfer_retry;
            let led = tokio::time::timeout_at(slice.min(deadline), wait)
                .await
                .map(|r| r.map(|_| ()));
            match led {
                Ok(Ok(())) => return Ok(AdminAnswer::Transferring(to)),
                Ok(Err(_)) => return Err(ProposeError::Stopped),
                Err(_) if tokio::time::Instant::now() < deadline => continue,
                Err(_) => {
                    return Err(ProposeError::Timeout(format!(
                        "member {to} did not take over leadership"
                    )))
                }
            }
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
        match self.hand_off(|| AdminOp::Remove(id)).await? {
            AdminAnswer::Done => Ok(()),
            AdminAnswer::Transferring(to) => Err(ProposeError::NotLeader { leader: Some(to) }),
        }
    }

    /// Hands leadership to voter `to`; resolves once `to` leads (`Timeout` otherwise).
    pub async fn transfer_leader(&self, to: u64) -> Result<(), ProposeError> {
        self.hand_off(|| AdminOp::Transfer(to)).await.map(|_| ())
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

#[cfg(test)]
#[path = "handle_tests.rs"]
mod tests;
