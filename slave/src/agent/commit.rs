//! Group commit: the one durability barrier of the agent's loop.
//!
//! Handlers write their records to the store without flushing and hand what must wait for
//! durability — `Accepted` answers, `Released`/`Stopped` answers — to [`Deferred`]. The run
//! loop handles every message already waiting in the mailbox, then calls
//! [`Agent::commit`]: one flush (one fsync) for the whole batch, and only then do the
//! answers go out. "Acknowledged ⇒ durable" holds exactly as with a flush per record:
//! nothing deferred leaves before the flush that covers it has returned.
//!
//! Finish reports are the exception: their records are written here unflushed and the
//! reports go to the link at once, which flushes the store before it sends a batch holding
//! one (`Link::deliver`). The link gathers ends for a few milliseconds anyway
//! (`REPORT_LINGER`), so the ends of a batch share one flush there instead of costing one
//! each here, and a finish report still leaves only once its result is durable.
//!
//! A failed flush refuses every assignment of the batch (dequeued, answered with a storage
//! error, so the master sends it again) — as a failed per-record flush did.

use super::{Agent, ReplyTx};
use hetsched_common::protocol::{ErrorKind, ErrorReply, Message, SlaveCommandReply};
use hetsched_common::{Attempt, TaskId};

/// What waits for the next flush.
#[derive(Debug, Default)]
pub(super) struct Deferred {
    /// Records were written since the last flush.
    dirty: bool,
    /// Accepted assignments: answered `Accepted` once durable, refused if the flush fails.
    accepts: Vec<(TaskId, Attempt, ReplyTx)>,
    /// Other answers, sent after the flush whatever its outcome (their handlers logged a
    /// failed write already, as before).
    replies: Vec<(ReplyTx, Message)>,
}

impl Deferred {
    /// Marks the store as written since the last flush.
    pub(super) fn wrote(&mut self) {
        self.dirty = true;
    }

    /// An assignment persisted (not yet flushed): answered once the flush returns.
    pub(super) fn accept(&mut self, task: TaskId, attempt: Attempt, reply: ReplyTx) {
        self.dirty = true;
        self.accepts.push((task, attempt, reply));
    }

    /// An answer sent after the next flush.
    pub(super) fn reply(&mut self, reply: ReplyTx, msg: Message) {
        self.replies.push((reply, msg));
    }

    fn is_empty(&self) -> bool {
        !self.dirty && self.accepts.is_empty() && self.replies.is_empty()
    }
}

impl Agent {
    /// Flushes once for everything written since the last commit, then releases what waited.
    pub(super) async fn commit(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let d = std::mem::take(&mut self.deferred);
        let flushed = if d.dirty {
            metrics::counter!("hetsched_slave_flushes_total").increment(1);
            self.store.flush().await
        } else {
            Ok(())
        };
        tracing::debug!(target: "hetsched::trace", accepted = d.accepts.len(), replies = d.replies.len(), "agent: batch flushed");
        match &flushed {
            Ok(()) => {
                let n = d.accepts.len() as u64;
                metrics::counter!("hetsched_slave_assignments_total").increment(n);
                for (task, attempt, reply) in d.accepts {
                    tracing::info!(task = %task, attempt, "task accepted");
                    let _ = reply.send(Message::ToSlaveReply(SlaveCommandReply::Accepted));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, refused = d.accepts.len(), "cannot flush the store; this batch's assignments are refused");
                for (task, attempt, reply) in d.accepts {
                    self.queue.stop(task, attempt);
                    let _ = reply.send(Message::Error(ErrorReply::new(
                        ErrorKind::Unavailable,
                        format!("slave storage failed: {e}"),
                    )));
                }
            }
        }
        for (reply, msg) in d.replies {
            let _ = reply.send(msg);
        }
    }
}
