//! Stopping an attempt on a master's `StopTask`: a queued one is dequeued and forgotten, a
//! running one is handed to its watcher ([`super::watched`]) through its stop line, and the
//! answer goes out once the process has exited.
//!
//! The stop line's types live here because everything that can end a running attempt early
//! (a `StopTask`, a superseding assignment) sends a [`StopRequest`] down it.

use super::{Agent, ReplyTx};
use crate::queue::Stop;
use hetsched_common::protocol::{Message, SlaveCommandReply};
use hetsched_common::{Attempt, TaskId};
use std::time::Duration;
use tokio::sync::mpsc;

/// A running process's stop line: each message asks the supervisor to kill the group, with
/// an optional answer to send once it has exited.
pub(super) type StopTx = mpsc::UnboundedSender<StopRequest>;

/// A request to stop a running attempt: who waits for the answer, and the grace period.
#[derive(Debug)]
pub(super) struct StopRequest {
    pub(super) reply: Option<ReplyTx>,
    pub(super) grace: Option<Duration>,
}

impl Agent {
    pub(super) fn stop(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        grace: Option<Duration>,
        reply: ReplyTx,
    ) {
        let stopped = Message::ToSlaveReply(SlaveCommandReply::Stopped);
        match self.queue.stop(task, attempt) {
            Stop::Dequeued => {
                tracing::info!(task = %task, attempt, "queued task stopped before it ran");
                self.deferred.wrote();
                if let Err(e) = self.store.remove_task(task) {
                    tracing::error!(task = %task, attempt, error = %e, "cannot forget stopped task");
                }
                // Answered once forgetting it is durable (the batch's flush).
                self.deferred.reply(reply, stopped);
            }
            Stop::Kill => match self.running.get(&(task, attempt)) {
                Some(tx) => {
                    tracing::info!(task = %task, attempt, "stopping task");
                    let req = StopRequest {
                        reply: Some(reply),
                        grace,
                    };
                    if let Err(mpsc::error::SendError(StopRequest {
                        reply: Some(reply), ..
                    })) = tx.send(req)
                    {
                        let _ = reply.send(stopped);
                    }
                }
                None => match self.fetching.get_mut(&(task, attempt)) {
                    // Its image is being got: stopped when it is there.
                    Some(stops) => stops.push(reply),
                    None => {
                        let _ = reply.send(stopped);
                    }
                },
            },
            Stop::NotRunning => {
                let _ = reply.send(stopped);
            }
        }
    }
}
