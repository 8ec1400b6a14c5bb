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

/// Senders to every peer. Dropping it ends the peer tasks (and closes their connections).
pub struct Transport {
    peers: HashMap<u64, mpsc::Sender<Vec<Vec<u8>>>>,
    runtime: Option<tokio::runtime::Runtime>,
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
    pub fn start(self_id: u64, peers: &BTreeMap<u64, String>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("raft-{self_id}-net"))
            .enable_all()
            .build()?;
        let mut senders = HashMap::new();
        for (&id, addr) in peers {
            if id == self_id {
                continue;
            }
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            runtime.spawn(peer_loop(self_id, id, addr.clone(), rx));
            senders.insert(id, tx);
        }
        Ok(Self {
            peers: senders,
            runtime: Some(runtime),
        })
    }

    /// Queues encoded messages for `to`, never waiting.
    pub fn send(&self, to: u64, msgs: Vec<Vec<u8>>) -> Result<(), SendError> {
        let tx = self.peers.get(&to).ok_or(SendError::UnknownPeer)?;
        tx.try_send(msgs).map_err(|_| SendError::Full)
    }
}

async fn peer_loop(self_id: u64, to: u64, addr: String, mut rx: mpsc::Receiver<Vec<Vec<u8>>>) {
    let mut conn: Option<Connection> = None;
    let mut backoff = BACKOFF_MIN;
    let mut next_attempt = Instant::now();
    while let Some(first) = rx.recv().await {
        // Coalesce whatever else is queued into one frame.
        let mut size: usize = first.iter().map(Vec::len).sum();
        let mut batch = first;
        while size < MAX_FRAME_RAFT_BYTES {
            match rx.try_recv() {
                Ok(more) => {
                    size += more.iter().map(Vec::len).sum::<usize>();
                    batch.extend(more);
                }
                Err(_) => break,
            }
        }

        if conn.as_ref().is_none_or(Connection::is_closed) {
            conn = None;
            if Instant::now() < next_attempt {
                // Backing off: drop rather than queue stale traffic; raft resends.
                continue;
            }
            match Connection::connect(&addr, CONNECT_TIMEOUT).await {
                Ok(c) => {
                    tracing::debug!(peer = to, %addr, "connected to raft peer");
                    backoff = BACKOFF_MIN;
                    conn = Some(c);
                }
                Err(e) => {
                    tracing::debug!(peer = to, %addr, error = %e, ?backoff, "raft peer unreachable");
                    next_attempt = Instant::now() + backoff;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            }
        }
        let Some(c) = conn.as_ref() else { continue };
        tracing::trace!(
            peer = to,
            msgs = batch.len(),
            bytes = size,
            "sending raft frame"
        );
        let body = Message::Raft {
            from: MasterId(self_id),
            msgs: batch.into_iter().map(ByteBuf::from).collect(),
        };
        if let Err(e) = c.send(body).await {
            tracing::debug!(peer = to, %addr, error = %e, "raft send failed; reconnecting");
            conn = None;
            next_attempt = Instant::now() + backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}
