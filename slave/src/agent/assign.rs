//! A master's commands that change what is queued here: `Assign` (accepted only once it is
//! persisted, superseding a lower attempt of the same task) and `ReleaseQueued` (S0.4: a
//! queued task handed over to a thief).
//!
//! Both follow the same rule: the store is flushed before the master hears the answer, so a
//! crash of this slave never loses an accepted task nor brings back a released one.

use super::stop::StopRequest;
use super::Agent;
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
    pub(super) async fn assign(&mut self, a: Assignment) -> Message {
        let (task, attempt) = (a.task, a.attempt);
        let accepted = Message::ToSlaveReply(SlaveCommandReply::Accepted);
        let outcome = self.queue.offer(a.clone());
        match outcome {
            Offer::Duplicate => {
                tracing::debug!(task = %task, attempt, "duplicate assignment acknowledged");
                return accepted;
            }
            Offer::Stale { held } => {
                tracing::warn!(task = %task, attempt, held, "stale assignment refused");
                return Message::Error(ErrorReply::new(
                    ErrorKind::Invalid,
                    format!("{task} is held under attempt {held} > {attempt}"),
                ));
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
        // Persist and flush before acknowledging: once the master hears Accepted, the task
        // survives a crash of this slave.
        let r = async {
            let rec = StoredTask {
                seq: self.store.next_seq()?,
                assignment: a,
                phase: StoredPhase::Queued,
            };
            self.store.put_task(&rec)?;
            self.store.flush().await
        }
        .await;
        match r {
            Ok(()) => {
                metrics::counter!("hetsched_slave_assignments_total").increment(1);
                tracing::info!(task = %task, attempt, "task accepted");
                accepted
            }
            Err(e) => {
                tracing::error!(task = %task, attempt, error = %e, "cannot persist assignment; refused");
                self.queue.stop(task, attempt);
                storage_error(&e)
            }
        }
    }

    /// S0.4: hands a queued task over to a thief; the answer says whether it was released.
    pub(super) async fn release(&mut self, task: TaskId, attempt: Attempt) -> Message {
        let released = self.queue.release(task, attempt);
        if released {
            tracing::info!(task = %task, attempt, "queued task released to a thief");
            // The queue no longer holds it: a restart must not bring it back.
            let r = async {
                self.store.remove_task(task)?;
                self.store.flush().await
            }
            .await;
            if let Err(e) = r {
                tracing::error!(task = %task, attempt, error = %e, "cannot forget released task");
            }
        }
        Message::ToSlaveReply(SlaveCommandReply::Released { released })
    }
}
