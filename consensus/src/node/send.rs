//! Outgoing Raft messages: injected faults applied, encoded, batched per peer and queued on
//! the transport; a `MsgSnapshot` cut into chunks (it may exceed the frame cap). Peers whose
//! queue refused a batch, and snapshot sends that failed, are reported to raft-rs after the
//! Ready (its own state may change only between Readies).

use super::RaftNode;
use crate::chunk;
use crate::transport::Outgoing;
use crate::StateMachine;
use protobuf::Message as _;
use raft::eraftpb::{Message as RaftMsg, MessageType};
use raft::SnapshotStatus;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl<S: StateMachine> RaftNode<S> {
    /// Sends `msgs`; peers that could not be queued to are added to `unreachable`.
    pub(super) fn send(&mut self, msgs: Vec<RaftMsg>, unreachable: &mut BTreeSet<u64>) {
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
                        self.snapshots.send_failures.push(m.to);
                    }
                    continue;
                }
                match m.write_to_bytes() {
                    Ok(b) if is_snapshot => {
                        // One MsgSnapshot may exceed the frame cap: chunks, reassembled by
                        // the receiver before `step`.
                        self.snapshots.next_send_id += 1;
                        snapshots.push((m.to, chunk::split(self.snapshots.next_send_id, &b)));
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
                self.snapshots.send_failures.push(to);
            } else {
                self.shared.snapshots_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Tells raft-rs which peers were unreachable and which snapshot sends failed.
    pub(super) fn report_failures(&mut self, unreachable: BTreeSet<u64>) {
        for to in unreachable {
            self.raw.report_unreachable(to);
        }
        for to in std::mem::take(&mut self.snapshots.send_failures) {
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }
}
