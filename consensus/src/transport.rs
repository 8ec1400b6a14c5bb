//! Outgoing Raft traffic: one task per peer, each with a bounded queue, a
//! `wire::Connection` to the peer's cluster address, and reconnection with backoff.
//!
//! The tasks run on a small tokio runtime of their own, not on the Raft actor's arbiter:
//! there they would share one thread (and actix's `LocalSet`) with a busy actor, and under a
//! flood of proposals they starved for hundreds of milliseconds — heartbeats included, so
//! followers started elections. Frame encoding and socket writes also stay off the Raft
//! thread this way.
//!
//! The Raft actor only ever calls [`Transport::send`], which never waits: when a peer's queue
//! is full (the peer is slow, down, or we are backing off) the messages are dropped and the
//! caller is told, so it can `report_unreachable`. Raft retransmits what matters.

use hetsched_common::backoff::Backoff;
use hetsched_common::protocol::Message;
use hetsched_common::wire::Connection;
use hetsched_common::MasterId;
use serde_bytes::ByteBuf;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Batches queued per peer before new ones are dropped.
const PEER_QUEUE: usize = 4096;
/// Upper bound on the raft bytes put into one frame (the frame cap is 16 MiB; raft's own
/// `max_size_per_msg` is 1 MiB and one command at most [`crate::MAX_COMMAND_SIZE`]).
const MAX_FRAME_RAFT_BYTES: usize = 8 * 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Called by a peer task once a snapshot's chunks were written to the socket (`true`) or
/// could not be (`false`), so the leader can `report_snapshot`.
pub type SnapshotReport = std::sync::Arc<dyn Fn(u64, bool) + Send + Sync>;

/// One queued unit: messages (or a snapshot's chunks) for one peer.
pub struct Outgoing {
    /// Encoded raft messages or chunks.
    pub msgs: Vec<Vec<u8>>,
    /// Not to be written before this instant (injected delay).
    pub not_before: Instant,
    /// The chunks of one snapshot: report its delivery.
    pub snapshot: bool,
}

struct Peer {
    addr: String,
    tx: mpsc::Sender<Outgoing>,
}

/// Senders to every peer. Dropping it ends the peer tasks (and closes their connections).
pub struct Transport {
    self_id: u64,
    peers: HashMap<u64, Peer>,
    runtime: Option<tokio::runtime::Runtime>,
    report: SnapshotReport,
}

impl Drop for Transport {
    fn drop(&mut self) {
        // Dropped from inside the actor's runtime, where a blocking shutdown would panic.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Why a batch was not queued.
#[derive(Debug)]
pub enum SendError {
    /// No address is known for this member.
    UnknownPeer,
    /// The peer's queue is full or its task ended.
    Full,
}

impl Transport {
    /// Starts one task per peer other than `self_id`, on a new single-threaded runtime.
    pub fn start(
        self_id: u64,
        peers: &BTreeMap<u64, String>,
        report: SnapshotReport,
    ) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("raft-{self_id}-net"))
            .enable_all()
            .build()?;
        let mut t = Self {
            self_id,
            peers: HashMap::new(),
            runtime: Some(runtime),
            report,
        };
        t.set_peers(peers);
        Ok(t)
    }

    /// Makes the peer tasks match `addrs` (membership changes): starts tasks for new members,
    /// restarts those whose address changed, ends those of members no longer listed.
    pub fn set_peers(&mut self, addrs: &BTreeMap<u64, String>) {
        self.peers
            .retain(|id, p| addrs.get(id).is_some_and(|a| *a == p.addr));
        let Some(rt) = self.runtime.as_ref() else {
            return;
        };
        for (&id, addr) in addrs {
            if id == self.self_id || self.peers.contains_key(&id) {
                continue;
            }
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            rt.spawn(peer_loop(
                self.self_id,
                id,
                addr.clone(),
                rx,
                self.report.clone(),
            ));
            tracing::debug!(member = self.self_id, peer = id, %addr, "raft peer task started");
            self.peers.insert(
                id,
                Peer {
                    addr: addr.clone(),
                    tx,
                },
            );
        }
    }

    /// Queues messages for `to`, never waiting.
    pub fn send(&self, to: u64, out: Outgoing) -> Result<(), SendError> {
        let p = self.peers.get(&to).ok_or(SendError::UnknownPeer)?;
        p.tx.try_send(out).map_err(|_| SendError::Full)
    }
}

async fn peer_loop(
    self_id: u64,
    to: u64,
    addr: String,
    mut rx: mpsc::Receiver<Outgoing>,
    report: SnapshotReport,
) {
    let mut conn: Option<Connection> = None;
    let mut backoff = Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
    let mut next_attempt = Instant::now();
    // An item taken from the queue that must wait for its injected delay.
    let mut held: Option<Outgoing> = None;
    loop {
        let first = match held.take() {
            Some(x) => x,
            None => match rx.recv().await {
                Some(x) => x,
                None => break,
            },
        };
        if first.not_before > Instant::now() {
            tokio::time::sleep_until(first.not_before.into()).await;
        }
        // Coalesce whatever else is queued (and due) into this write.
        let mut size: usize = first.msgs.iter().map(Vec::len).sum();
        let mut items = vec![first];
        while size < MAX_FRAME_RAFT_BYTES {
            match rx.try_recv() {
                Ok(more) if more.not_before > Instant::now() => {
                    held = Some(more);
                    break;
                }
                Ok(more) => {
                    size += more.msgs.iter().map(Vec::len).sum::<usize>();
                    items.push(more);
                }
                Err(_) => break,
            }
        }
        let snapshots = items.iter().filter(|i| i.snapshot).count();

        if conn.as_ref().is_none_or(Connection::is_closed) {
            conn = None;
            if Instant::now() < next_attempt {
                // Backing off: drop rather than queue stale traffic; raft resends.
                (0..snapshots).for_each(|_| report(to, false));
                continue;
            }
            match Connection::connect(&addr, CONNECT_TIMEOUT).await {
                Ok(c) => {
                    tracing::debug!(peer = to, %addr, "connected to raft peer");
                    backoff.reset();
                    conn = Some(c);
                }
                Err(e) => {
                    let wait = backoff.next_delay();
                    tracing::debug!(peer = to, %addr, error = %e, ?wait, "raft peer unreachable");
                    next_attempt = Instant::now() + wait;
                    (0..snapshots).for_each(|_| report(to, false));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_ref() else { continue };
        // Frames stay under the cap however much was coalesced (a snapshot's chunks span
        // several frames).
        let mut ok = true;
        let mut frame: Vec<ByteBuf> = Vec::new();
        let mut frame_size = 0usize;
        let msgs = items.into_iter().flat_map(|i| i.msgs);
        let mut msgs = msgs.peekable();
        while let Some(m) = msgs.next() {
            frame_size += m.len();
            frame.push(ByteBuf::from(m));
            let full = msgs
                .peek()
                .is_none_or(|n| frame_size + n.len() > MAX_FRAME_RAFT_BYTES);
            if !full {
                continue;
            }
            tracing::trace!(
                peer = to,
                msgs = frame.len(),
                bytes = frame_size,
                "sending raft frame"
            );
            let body = Message::Raft {
                from: MasterId(self_id),
                msgs: std::mem::take(&mut frame),
            };
            frame_size = 0;
            if let Err(e) = c.send(body).await {
                tracing::debug!(peer = to, %addr, error = %e, "raft send failed; reconnecting");
                conn = None;
                next_attempt = Instant::now() + backoff.next_delay();
                ok = false;
                break;
            }
        }
        (0..snapshots).for_each(|_| report(to, ok));
    }
}
