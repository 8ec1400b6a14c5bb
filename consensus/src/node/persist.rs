//! Durability: the `raft-N-flush` thread and the messages that wait for it.
//!
//! sled's flush is a blocking fsync, so it never runs on the thread that ticks Raft. The
//! Ready cycle writes a Ready's entries and hard state to sled and asks for a flush; the
//! thread coalesces requests (one fsync for every Ready written meanwhile) and answers
//! [`Input::Persisted`] with the highest Ready number it covered. Until then the messages of
//! those Readies that depend on the writes (a follower's append response, a vote) wait here,
//! oldest first; [`RaftNode::on_persisted`] sends them and tells raft-rs.

use super::{Input, RaftNode, Shared};
use crate::StateMachine;
use raft::eraftpb::Message as RaftMsg;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The flush thread and what waits on it.
pub(super) struct Persist {
    /// Messages of readies whose writes are not durable yet, oldest first: (Ready number,
    /// entries written, messages).
    awaiting: VecDeque<(u64, u64, Vec<RaftMsg>)>,
    tx: Option<std::sync::mpsc::Sender<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Persist {
    /// Starts the flush thread of member `id` over `db`, reporting to `back`.
    pub(super) fn start<O: Send + 'static>(
        id: u64,
        db: sled::Db,
        back: mpsc::UnboundedSender<Input<O>>,
        shared: Arc<Shared>,
    ) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("raft-{id}-flush"))
            .spawn(move || flush_loop(db, rx, back, shared))
            .ok();
        Self {
            awaiting: VecDeque::new(),
            tx: Some(tx),
            thread,
        }
    }

    /// Whether messages of earlier Readies still wait for a flush (a later Ready's must then
    /// wait too, to keep their order).
    pub(super) fn is_waiting(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Holds Ready `number`'s messages (and the count of its entries) until its writes are
    /// durable, and asks the thread for a flush.
    pub(super) fn wait(
        &mut self,
        number: u64,
        entries: u64,
        msgs: Vec<RaftMsg>,
    ) -> Result<(), crate::Error> {
        self.awaiting.push_back((number, entries, msgs));
        let sent = self.tx.as_ref().map(|tx| tx.send(number).is_ok());
        if sent == Some(true) {
            Ok(())
        } else {
            Err(crate::Error::Storage("storage thread is gone".into()))
        }
    }

    /// Takes the oldest waiting Ready if the flush up to `number` covered it.
    fn pop_flushed(&mut self, number: u64) -> Option<(u64, Vec<RaftMsg>)> {
        if self.awaiting.front().is_some_and(|(n, _, _)| *n <= number) {
            self.awaiting.pop_front().map(|(_, e, m)| (e, m))
        } else {
            None
        }
    }

    /// Ends the flush thread, releasing its sled handle so the data dir can be reopened.
    pub(super) fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn flush_loop<O>(
    db: sled::Db,
    rx: std::sync::mpsc::Receiver<u64>,
    back: mpsc::UnboundedSender<Input<O>>,
    shared: Arc<Shared>,
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

impl<S: StateMachine> RaftNode<S> {
    /// The flush thread made everything up to Ready `number` durable: the messages that
    /// waited for it leave, and raft-rs learns what is persisted.
    pub(super) fn on_persisted(&mut self, number: u64) {
        let mut unreachable = BTreeSet::new();
        while let Some((entries, msgs)) = self.persist.pop_flushed(number) {
            self.shared
                .entries_persisted
                .fetch_add(entries, Ordering::Relaxed);
            self.send(msgs, &mut unreachable);
        }
        self.raw.on_persist_ready(number);
        self.advance_apply();
        self.report_failures(unreachable);
    }
}
