//! A master's commands that change what is queued here: `Assign` and `AssignBatch` (each
//! assignment accepted only once it is persisted, superseding a lower attempt of the same
//! task) and `ReleaseQueued` (S0.4: a queued task handed over to a thief).
//!
//! Both follow the same rule: the store is flushed before the master hears the answer, so a
//! crash of this slave never loses an accepted task nor brings back a released one. The
//! flush is the batch's ([`super::commit`]): the answers wait in `deferred` until it returns.

use super::stop::StopRequest;
use super::{Agent, AgentMsg, ReplyTx};
use crate::queue::{Offer, Phase};
use crate::store::{StoreError, StoredPhase, StoredTask};
use hetsched_common::protocol::{Assignment, ErrorKind, ErrorReply, Message, SlaveCommandReply};
use hetsched_common::{Attempt, TaskId};

fn storage_error(e: &StoreError) -> Message {
    Message::Error(ErrorReply::new(
        ErrorKind::Unavailable,
        format!("slave storage failed: {e}"),
    ))
}

impl Agent {
    /// Takes an assignment; the answer goes to `reply` (`Accepted` only once the batch's
    /// flush has returned).
    pub(super) fn assign(&mut self, a: Assignment, reply: ReplyTx) {
        let (task, attempt) = (a.task, a.attempt);
        let outcome = self.queue.offer(a.clone());
        match outcome {
            Offer::Duplicate => {
                tracing::debug!(task = %task, attempt, "duplicate assignment acknowledged");
                // The original may be in this very batch, not yet flushed.
                self.deferred
                    .reply(reply, Message::ToSlaveReply(SlaveCommandReply::Accepted));
                return;
            }
            Offer::Stale { held } => {
                tracing::warn!(task = %task, attempt, held, "stale assignment refused");
                let _ = reply.send(Message::Error(ErrorReply::new(
                    ErrorKind::Invalid,
                    format!("{task} is held under attempt {held} > {attempt}"),
                )));
                return;
            }
            Offer::Superseded {
                old_attempt,
                old_phase,
            } => {
                tracing::info!(task = %task, attempt, old_attempt, ?old_phase, "assignment supersedes a lower attempt");
                if old_phase == Phase::Running {
                    if let Some(stop) = self.running.get(&(task, old_attempt)) {
                        let _ = stop.send(StopRequest {
                            reply: None,
                            grace: None,
                        });
                    }
                }
            }
            Offer::Queued => {}
        }
        // Persist, and acknowledge only after the batch's flush: once the master hears
        // Accepted, the task survives a crash of this slave.
        let r = self.store.next_seq().and_then(|seq| {
            self.store.put_task(&StoredTask {
                seq,
                assignment: a,
                phase: StoredPhase::Queued,
            })
        });
        match r {
            Ok(()) => self.deferred.accept(task, attempt, reply),
            Err(e) => {
                tracing::error!(task = %task, attempt, error = %e, "cannot persist assignment; refused");
                self.queue.stop(task, attempt);
                let _ = reply.send(storage_error(&e));
            }
        }
    }

    /// S0.4: hands a queued task over to a thief; the answer (after the batch's flush) says
    /// whether it was released.
    pub(super) fn release(&mut self, task: TaskId, attempt: Attempt, reply: ReplyTx) {
        let released = self.queue.release(task, attempt);
        if released {
            tracing::info!(task = %task, attempt, "queued task released to a thief");
            // The queue no longer holds it: a restart must not bring it back.
            self.deferred.wrote();
            if let Err(e) = self.store.remove_task(task) {
                tracing::error!(task = %task, attempt, error = %e, "cannot forget released task");
            }
        }
        let answer = Message::ToSlaveReply(SlaveCommandReply::Released { released });
        self.deferred.reply(reply, answer);
    }
}

/// A batch of assignments: each goes to the agent as a single one would, in order; the
/// batch is `Accepted` once every one is (a refusal or failure answers for the batch, and
/// the master sends it again: duplicates are acknowledged without running twice).
pub async fn assign_batch(
    agent: &tokio::sync::mpsc::UnboundedSender<AgentMsg>,
    batch: Vec<hetsched_common::protocol::Assignment>,
) -> Message {
    let gone = || {
        Message::Error(ErrorReply::new(
            ErrorKind::Unavailable,
            "slave is shutting down",
        ))
    };
    tracing::debug!(target: "hetsched::trace", tasks = batch.len(), first = ?batch.first().map(|a| a.task), "assign: received");
    let mut replies = Vec::with_capacity(batch.len());
    for assignment in batch {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if agent
            .send(AgentMsg::Assign {
                assignment,
                reply: tx,
            })
            .is_err()
        {
            return gone();
        }
        replies.push(rx);
    }
    for rx in replies {
        match rx.await {
            Ok(Message::ToSlaveReply(hetsched_common::protocol::SlaveCommandReply::Accepted)) => {}
            Ok(other) => return other,
            Err(_) => return gone(),
        }
    }
    Message::ToSlaveReply(hetsched_common::protocol::SlaveCommandReply::Accepted)
}
