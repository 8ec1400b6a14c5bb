//! The slave's listener: what it answers on its port. Masters' commands go to the agent (the
//! one owner of the queue and the store), peers' forwarded calls run on the engines (S0.6),
//! and the call records of program tasks are read from the log directory.

use crate::{agent, forward_serve, logs, program};
use hetsched_common::protocol::{
    ErrorKind, ErrorReply, Message, PeerRequest, SlaveCommand, SlaveCommandReply,
};
use hetsched_common::wire::{self, Handler};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What the listener needs to answer a request: the agent's mailbox for what touches its
/// state, the files for what does not.
#[derive(Clone)]
struct Listener {
    agent: mpsc::UnboundedSender<agent::AgentMsg>,
    log_dir: PathBuf,
    attempts_dir: PathBuf,
    programs: Arc<program::ProgramRuntime>,
}

/// The listener's handler: masters' commands go to the agent (call records are read from
/// the log dir); peers' forwarded calls run on the engines (S0.6); anything else is refused.
pub(crate) fn handler(
    agent: mpsc::UnboundedSender<agent::AgentMsg>,
    log_dir: PathBuf,
    attempts_dir: PathBuf,
    programs: Arc<program::ProgramRuntime>,
) -> Handler {
    let listener = Listener {
        agent,
        log_dir,
        attempts_dir,
        programs,
    };
    Arc::new(move |msg, peer| {
        let l = listener.clone();
        Box::pin(async move { Some(l.answer(msg, peer).await) })
    })
}

/// The answer when the agent is gone.
fn shutting_down() -> Message {
    Message::Error(ErrorReply::new(
        ErrorKind::Unavailable,
        "slave is shutting down",
    ))
}

impl Listener {
    /// The answer to one request.
    async fn answer(self, msg: Message, peer: wire::Peer) -> Message {
        match msg {
            Message::ToSlave(SlaveCommand::AssignBatch(batch)) => {
                agent::assign_batch(&self.agent, batch).await
            }
            Message::Peer(PeerRequest::ForwardedCall {
                from,
                call,
                kinds,
                args,
            }) => {
                let programs = self.programs;
                let run = tokio::task::spawn_blocking(move || {
                    forward_serve::serve(&programs, from, &call, &kinds, &args)
                });
                run.await.map(Message::PeerReply).unwrap_or_else(|e| {
                    Message::Error(ErrorReply::new(
                        ErrorKind::Internal,
                        format!("forwarded call failed: {e}"),
                    ))
                })
            }
            // Reading output files needs nothing of the agent's state.
            Message::ToSlave(SlaveCommand::ReadLog {
                task,
                attempt,
                stderr,
                offset,
                max_bytes,
            }) => {
                let (log, attempts) = (self.log_dir, self.attempts_dir);
                let read = tokio::task::spawn_blocking(move || {
                    logs::read_log(&log, &attempts, task, attempt, stderr, offset, max_bytes)
                });
                read.await.unwrap_or_else(|e| {
                    Message::Error(ErrorReply::new(
                        ErrorKind::Internal,
                        format!("log reader failed: {e}"),
                    ))
                })
            }
            Message::ToSlave(SlaveCommand::Calls { task, attempt }) => {
                match program::read_calls(&self.log_dir, task.0, attempt) {
                    Some(calls) => Message::ToSlaveReply(SlaveCommandReply::Calls(calls)),
                    None => Message::Error(ErrorReply::new(
                        ErrorKind::Invalid,
                        format!(
                            "{task} attempt {attempt} has no call records on this slave \
                             (not a program task, or no call has finished yet)"
                        ),
                    )),
                }
            }
            Message::ToSlave(SlaveCommand::SetCpus {
                task,
                attempt,
                cpu_milli,
            }) => {
                let (done_tx, done_rx) = oneshot::channel();
                let m = agent::AgentMsg::SetCpus {
                    task,
                    attempt,
                    cpu_milli,
                    reply: done_tx,
                };
                if self.agent.send(m).is_err() {
                    return shutting_down();
                }
                // Not running (any more) is no error: nothing is left to change.
                let _ = done_rx.await;
                Message::ToSlaveReply(SlaveCommandReply::Accepted)
            }
            Message::ToSlave(SlaveCommand::Assign(assignment)) => {
                self.ask(|reply| agent::AgentMsg::Assign { assignment, reply })
                    .await
            }
            Message::ToSlave(SlaveCommand::ReleaseQueued { task, attempt }) => {
                self.ask(|reply| agent::AgentMsg::Release {
                    task,
                    attempt,
                    reply,
                })
                .await
            }
            // A preemption's grace period comes with the request; otherwise the slave's own
            // `stop_grace` applies.
            Message::ToSlave(SlaveCommand::StopTask {
                task,
                attempt,
                grace_ms,
            }) => {
                self.ask(|reply| agent::AgentMsg::Stop {
                    task,
                    attempt,
                    grace: grace_ms.map(Duration::from_millis),
                    reply,
                })
                .await
            }
            other => {
                tracing::debug!(%peer, message = ?other, "unsupported request");
                Message::Error(ErrorReply::new(
                    ErrorKind::Unsupported,
                    "a slave serves only Assign, AssignBatch, StopTask, SetCpus, ReleaseQueued, ReadLog, Calls and peers' ForwardedCall",
                ))
            }
        }
    }

    /// Mails the agent the message `m` makes with a reply channel, and waits for its answer.
    async fn ask(&self, m: impl FnOnce(agent::ReplyTx) -> agent::AgentMsg) -> Message {
        let (tx, rx) = oneshot::channel();
        if self.agent.send(m(tx)).is_err() {
            return shutting_down();
        }
        rx.await.unwrap_or_else(|_| shutting_down())
    }
}
