//! Snapshots on the node: taking a local one once enough was applied (or raft-rs needs one
//! for a follower), writing it durably on the `raft-N-snap` thread and compacting the log
//! once it is, and installing a snapshot received from the leader.
//!
//! Encoding and fsyncing a snapshot of many MiB takes far longer than a tick, so the Raft
//! thread only takes [`crate::StateMachine::snapshot`] (the state at the applied index) and
//! hands the rest to the thread; [`Input::SnapshotWritten`] brings the result back. One local
//! snapshot is in flight at a time.

use super::{Input, RaftNode};
use crate::storage::{SnapshotData, SnapshotFile};
use crate::StateMachine;
use protobuf::Message as _;
use raft::eraftpb::Snapshot;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// The node's snapshot state: when to take one, the writer thread, and snapshots sent to
/// followers.
pub(super) struct Snapshots {
    /// Take one once this many entries were applied since the last (0 = never) ...
    entries: u64,
    /// ... or once this many entry bytes were (0 = no byte limit).
    bytes: u64,
    /// Entries kept before a snapshot's index when the log is compacted.
    tail: u64,
    /// Entry bytes applied since the last snapshot.
    pub(super) bytes_since: u64,
    /// A local snapshot is being written: no new one until it is done.
    in_flight: bool,
    /// To the snapshot thread: a local snapshot and the index to compact to once durable.
    tx: Option<std::sync::mpsc::Sender<(Snapshot, u64)>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Id of the last snapshot sent to a follower (names its chunks).
    pub(super) next_send_id: u64,
    /// Snapshot sends that failed during a Ready, reported to raft-rs after it.
    pub(super) send_failures: Vec<u64>,
}

impl Snapshots {
    /// Starts the snapshot thread of member `id`, writing to `file` and reporting to `back`.
    pub(super) fn start<O: Send + 'static>(
        id: u64,
        file: Arc<SnapshotFile>,
        back: mpsc::UnboundedSender<Input<O>>,
        entries: u64,
        bytes: u64,
        tail: u64,
    ) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("raft-{id}-snap"))
            .spawn(move || snapshot_loop(file, rx, back))
            .ok();
        Self {
            entries,
            bytes,
            tail,
            bytes_since: 0,
            in_flight: false,
            tx: Some(tx),
            thread,
            next_send_id: 0,
            send_failures: Vec::new(),
        }
    }

    /// Whether a snapshot is due at `applied`, the last one being at `last`.
    fn due(&self, force: bool, applied: u64, last: u64) -> bool {
        let since = applied.saturating_sub(last);
        let due = force
            || (self.entries > 0 && since >= self.entries)
            || (self.bytes > 0 && self.bytes_since >= self.bytes);
        due && applied > last && !self.in_flight
    }

    /// Ends the snapshot thread (after the snapshot it is writing, if any).
    pub(super) fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn snapshot_loop<O>(
    file: Arc<SnapshotFile>,
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

impl<S: StateMachine> RaftNode<S> {
    /// Takes a snapshot at the applied index and compacts the log when enough was applied
    /// since the last one (or `force`: raft-rs needs one for a follower).
    pub(super) fn maybe_snapshot(&mut self, force: bool) -> Result<(), crate::Error> {
        let last = self.raw.store().snapshot_metadata().index;
        let applied = self.applied;
        if !self.snapshots.due(force, applied, last) {
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
        let compact_to = applied.saturating_sub(self.snapshots.tail).max(1);
        let sent = self
            .snapshots
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((snap, compact_to)).is_ok());
        if !sent {
            return Err(crate::Error::Storage("snapshot thread is gone".into()));
        }
        self.snapshots.in_flight = true;
        self.snapshots.bytes_since = 0;
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
    pub(super) fn on_snapshot_written(
        &mut self,
        written: Result<(Snapshot, u64), String>,
    ) -> Result<(), crate::Error> {
        self.snapshots.in_flight = false;
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

    /// Installs a snapshot received from the leader: sled (log replaced), addresses,
    /// transport, then the state machine.
    pub(super) fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), crate::Error> {
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
        self.snapshots.bytes_since = 0;
        self.shared
            .snapshots_received
            .fetch_add(1, Ordering::Relaxed);
        self.proposals.snapshot_installed(index);
        tracing::info!(
            member = self.id,
            index,
            "snapshot from the leader installed"
        );
        Ok(())
    }
}
