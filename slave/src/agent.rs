//! The agent: the one task that owns the local queue and the store, and turns their decisions
//! into I/O (persist, spawn, kill, report).
//!
//! ```text
//!  masters ──Assign/StopTask──▶ listener ─┐
//!  supervisors ──Exited──────────────────┤  AgentMsg   ┌─────────┐   Report   ┌──────┐
//!  link ──Acked / Held?──────────────────┴───────────▶ │  Agent  │ ─────────▶ │ Link │──▶ leader
//!                                                      └─────────┘            └──────┘
//! ```
//!
//! It is actor-shaped (one mailbox, state touched only here) but a plain tokio task: every
//! message is handled to the end, flushes included, before the next, which keeps "persist
//! before acknowledging" obvious. Each running process has a small supervisor task that waits
//! for it (or kills it on request) and mails `Exited` back.

use crate::exec;
use crate::queue::{LocalQueue, Offer, Phase, Stop};
use crate::store::{Store, StoreError, StoredPhase, StoredTask};
use hetsched_common::protocol::{
    Assignment, ErrorKind, ErrorReply, HeldTask, Message, SlaveCommandReply,
};
use hetsched_common::{Attempt, TaskId};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A reply to a master's command.
pub type ReplyTx = oneshot::Sender<Message>;

/// Messages to the agent.
#[derive(Debug)]
pub enum AgentMsg {
    /// A master's `Assign`.
    Assign {
        /// The assignment.
        assignment: Assignment,
        /// Where the answer goes.
        reply: ReplyTx,
    },
    /// A master's `StopTask`.
    Stop {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Where the answer goes (after the process has exited).
        reply: ReplyTx,
    },
    /// A task's process ended (or could not start).
    Exited {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code, per [`exec`]'s convention.
        exit_code: i32,
        /// `StopTask` answers waiting for this exit.
        replies: Vec<ReplyTx>,
    },
    /// The master acknowledged this result.
    Acked {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// What is held, for a heartbeat or registration.
    Held {
        /// Where the answer goes.
        reply: oneshot::Sender<Vec<HeldTask>>,
    },
}

/// A report for the masters, delivered by the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The process started (best effort: the finish report and heartbeats supersede it).
    Started {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// The process ended; persisted, retried until acknowledged.
    Finished {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code.
        exit_code: i32,
    },
}

/// A running process's stop line: each message asks the supervisor to kill the group, with
/// an optional answer to send once it has exited.
type StopTx = mpsc::UnboundedSender<Option<ReplyTx>>;

/// What the agent needs to run API-program tasks (S0) in-process.
#[derive(Clone, Debug)]
pub struct ProgramHooks {
    /// Engines, selection table, node name.
    pub runtime: std::sync::Arc<crate::program::ProgramRuntime>,
    /// Where call summaries go (to the masters).
    pub announce: mpsc::UnboundedSender<crate::announce::Announcement>,
}

/// The agent's state.
pub struct Agent {
    queue: LocalQueue,
    store: Store,
    log_dir: PathBuf,
    grace: Duration,
    running: HashMap<(TaskId, Attempt), StopTx>,
    mailbox: mpsc::UnboundedSender<AgentMsg>,
    reports: mpsc::UnboundedSender<Report>,
    programs: Option<ProgramHooks>,
}

fn storage_error(e: &StoreError) -> Message {
    Message::Error(ErrorReply::new(
        ErrorKind::Unavailable,
        format!("slave storage failed: {e}"),
    ))
}

impl Agent {
    /// Builds the agent from what the store holds: queued tasks and tasks that were running
    /// when the slave stopped are queued (the latter after their leftover process group is
    /// killed); unacknowledged results are reported again.
    pub fn restore(
        store: Store,
        cpu_capacity_milli: u64,
        log_dir: PathBuf,
        grace: Duration,
        mailbox: mpsc::UnboundedSender<AgentMsg>,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Result<Self, StoreError> {
        let loaded = store.load()?;
        let mut queue = LocalQueue::new(cpu_capacity_milli);
        for t in loaded.tasks {
            let task = t.assignment.task;
            let attempt = t.assignment.attempt;
            let phase = match t.phase {
                StoredPhase::Queued => Phase::Queued,
                StoredPhase::Running { pgid } => {
                    let killed = exec::kill_leftover(pgid, task.0);
                    tracing::warn!(
                        task = %task, attempt, pgid, killed_leftover = killed,
                        "task was running when the slave stopped; running it again under the same attempt"
                    );
                    Phase::Running
                }
                StoredPhase::Finished { exit_code } => {
                    let _ = reports.send(Report::Finished {
                        task,
                        attempt,
                        exit_code,
                    });
                    Phase::Finished { exit_code }
                }
            };
            queue.restore(t.assignment, phase);
        }
        for (task, attempt) in loaded.done {
            queue.restore_done(task, attempt);
        }
        Ok(Self {
            queue,
            store,
            log_dir,
            grace,
            running: HashMap::new(),
            mailbox,
            reports,
            programs: None,
        })
    }

    /// Runs API-program tasks in-process with these hooks (without them a program task's
    /// marker command fails to start).
    pub fn with_programs(mut self, hooks: ProgramHooks) -> Self {
        self.programs = Some(hooks);
        self
    }

    /// Starts a program task: it runs on a blocking thread; a stop request takes effect
    /// between calls. Its store record stays `Queued`, so a slave restart runs it again.
    async fn start_program(
        &mut self,
        a: Assignment,
        program: Result<hetsched_common::program::Program, String>,
        hooks: ProgramHooks,
    ) {
        let (task, attempt) = (a.task, a.attempt);
        let program = match program {
            Ok(p) => p,
            Err(why) => {
                tracing::error!(task = %task, attempt, %why, "program task cannot start");
                exec::note_in_err_log(&self.log_dir, &a, &format!("hetsched: {why}"));
                self.finished(task, attempt, crate::program::EXIT_BAD_PROGRAM)
                    .await;
                return;
            }
        };
        metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
        tracing::info!(task = %task, attempt, calls = program.calls.len(), "program task started");
        let _ = self.reports.send(Report::Started { task, attempt });
        let (stop_tx, mut stop_rx) = mpsc::unbounded_channel::<Option<ReplyTx>>();
        self.running.insert((task, attempt), stop_tx);
        let (log_dir, mailbox) = (self.log_dir.clone(), self.mailbox.clone());
        tokio::spawn(async move {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (flag, rt) = (stop.clone(), hooks.runtime.clone());
            let mut job =
                tokio::task::spawn_blocking(move || rt.run(&a, &program, &log_dir, &flag));
            let mut replies = Vec::new();
            let result = loop {
                tokio::select! {
                    r = &mut job => break r,
                    Some(r) = stop_rx.recv() => {
                        stop.store(true, std::sync::atomic::Ordering::SeqCst);
                        replies.extend(r);
                    }
                }
            };
            let (records, exit_code) = result.unwrap_or_else(|e| {
                tracing::error!(task = %task, attempt, error = %e, "program runner failed");
                (Vec::new(), crate::program::EXIT_BAD_PROGRAM)
            });
            if !records.is_empty() {
                let summary = hetsched_common::program::CallSummary::of(&records);
                let _ = hooks.announce.send(crate::announce::Announcement::Calls {
                    task,
                    attempt,
                    summary,
                });
            }
            while let Ok(r) = stop_rx.try_recv() {
                replies.extend(r);
            }
            let _ = mailbox.send(AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                replies,
            });
        });
    }

    /// Handles messages until every sender is gone.
    pub async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<AgentMsg>) {
        self.pump().await;
        self.gauges();
        while let Some(msg) = inbox.recv().await {
            self.handle(msg).await;
            self.pump().await;
            self.gauges();
        }
    }

    fn gauges(&self) {
        metrics::gauge!("hetsched_slave_tasks_queued").set(self.queue.queued_len() as f64);
        metrics::gauge!("hetsched_slave_cpu_running_milli")
            .set(self.queue.cpu_running_milli() as f64);
    }

    async fn handle(&mut self, msg: AgentMsg) {
        match msg {
            AgentMsg::Assign { assignment, reply } => {
                let answer = self.assign(assignment).await;
                let _ = reply.send(answer);
            }
            AgentMsg::Stop {
                task,
                attempt,
                reply,
            } => self.stop(task, attempt, reply).await,
            AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                replies,
            } => {
                self.running.remove(&(task, attempt));
                self.finished(task, attempt, exit_code).await;
                for r in replies {
                    let _ = r.send(Message::ToSlaveReply(SlaveCommandReply::Stopped));
                }
            }
            AgentMsg::Acked { task, attempt } => {
                if self.queue.acked(task, attempt) {
                    let r = self.store.complete_task(task, attempt);
                    // Losing this write only means the result is reported once more.
                    if let Err(e) = r {
                        tracing::error!(task = %task, attempt, error = %e, "cannot forget acknowledged result");
                    }
                    tracing::debug!(task = %task, attempt, "result acknowledged");
                }
            }
            AgentMsg::Held { reply } => {
                let _ = reply.send(self.queue.held());
            }
        }
    }

    async fn assign(&mut self, a: Assignment) -> Message {
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
                        let _ = stop.send(None);
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

    async fn stop(&mut self, task: TaskId, attempt: Attempt, reply: ReplyTx) {
        let stopped = Message::ToSlaveReply(SlaveCommandReply::Stopped);
        match self.queue.stop(task, attempt) {
            Stop::Dequeued => {
                tracing::info!(task = %task, attempt, "queued task stopped before it ran");
                let r = async {
                    self.store.remove_task(task)?;
                    self.store.flush().await
                }
                .await;
                if let Err(e) = r {
                    tracing::error!(task = %task, attempt, error = %e, "cannot forget stopped task");
                }
                let _ = reply.send(stopped);
            }
            Stop::Kill => match self.running.get(&(task, attempt)) {
                Some(tx) => {
                    tracing::info!(task = %task, attempt, "stopping task");
                    if let Err(mpsc::error::SendError(Some(reply))) = tx.send(Some(reply)) {
                        let _ = reply.send(stopped);
                    }
                }
                None => {
                    let _ = reply.send(stopped);
                }
            },
            Stop::NotRunning => {
                let _ = reply.send(stopped);
            }
        }
    }

    /// Starts every task the queue lets start.
    async fn pump(&mut self) {
        while let Some(a) = self.queue.start_next() {
            if let Some(hooks) = self.programs.clone() {
                if let Some(program) = crate::program::carried(&a) {
                    self.start_program(a, program, hooks).await;
                    continue;
                }
            }
            let (task, attempt) = (a.task, a.attempt);
            match exec::spawn(&a, &self.log_dir) {
                Ok((child, pgid)) => {
                    let seq = self.store.get_task(task).ok().flatten().map(|t| t.seq);
                    let r = async {
                        let seq = match seq {
                            Some(s) => s,
                            None => self.store.next_seq()?,
                        };
                        self.store.put_task(&StoredTask {
                            seq,
                            assignment: a.clone(),
                            phase: StoredPhase::Running { pgid },
                        })?;
                        self.store.flush().await
                    }
                    .await;
                    if let Err(e) = r {
                        // The process runs anyway; only a crash-restart would miss its pgid.
                        tracing::error!(task = %task, attempt, error = %e, "cannot persist running state");
                    }
                    metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
                    tracing::info!(task = %task, attempt, pgid, command = ?a.command, "task started");
                    let _ = self.reports.send(Report::Started { task, attempt });
                    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
                    self.running.insert((task, attempt), stop_tx);
                    tokio::spawn(supervise(
                        child,
                        pgid,
                        task,
                        attempt,
                        self.grace,
                        stop_rx,
                        self.mailbox.clone(),
                    ));
                }
                Err(e) => {
                    tracing::error!(task = %task, attempt, error = %e, exit_code = exec::EXIT_CANNOT_START, "task cannot start");
                    exec::note_in_err_log(&self.log_dir, &a, &format!("hetsched: {e}"));
                    self.finished(task, attempt, exec::EXIT_CANNOT_START).await;
                }
            }
        }
    }

    /// Records an exit: persisted (flushed) before it is reported.
    async fn finished(&mut self, task: TaskId, attempt: Attempt, exit_code: i32) {
        if !self.queue.finished(task, attempt, exit_code) {
            tracing::debug!(task = %task, attempt, exit_code, "exit of a superseded or unknown attempt");
            return;
        }
        let Some(entry) = self.queue.get(task) else {
            return;
        };
        let seq = self.store.get_task(task).ok().flatten().map(|t| t.seq);
        let assignment = entry.assignment.clone();
        let r = async {
            let seq = match seq {
                Some(s) => s,
                None => self.store.next_seq()?,
            };
            self.store.put_task(&StoredTask {
                seq,
                assignment,
                phase: StoredPhase::Finished { exit_code },
            })?;
            self.store.flush().await
        }
        .await;
        if let Err(e) = r {
            // Report anyway: the master learning the result beats holding it back; only a
            // crash before the ack would lose it (the task would then rerun).
            tracing::error!(task = %task, attempt, error = %e, "cannot persist result");
        }
        let outcome = if exit_code == 0 { "success" } else { "failure" };
        metrics::counter!("hetsched_slave_tasks_finished_total", "outcome" => outcome).increment(1);
        tracing::info!(task = %task, attempt, exit_code, "task finished");
        let _ = self.reports.send(Report::Finished {
            task,
            attempt,
            exit_code,
        });
    }
}

/// Waits for a task's process, or kills its group when asked, then mails `Exited`.
async fn supervise(
    mut child: tokio::process::Child,
    pgid: i32,
    task: TaskId,
    attempt: Attempt,
    grace: Duration,
    mut stop_rx: mpsc::UnboundedReceiver<Option<ReplyTx>>,
    mailbox: mpsc::UnboundedSender<AgentMsg>,
) {
    let mut replies = Vec::new();
    let status = tokio::select! {
        s = child.wait() => s,
        Some(r) = stop_rx.recv() => {
            replies.extend(r);
            exec::terminate(&mut child, pgid, grace).await
        }
    };
    // Whatever the task left behind in its group (background children) ends with it.
    exec::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
    while let Ok(r) = stop_rx.try_recv() {
        replies.extend(r);
    }
    let exit_code = match status {
        Ok(s) => exec::exit_code_of(s),
        Err(e) => {
            tracing::error!(task = %task, attempt, error = %e, "cannot wait for task process");
            exec::EXIT_CANNOT_START
        }
    };
    let _ = mailbox.send(AgentMsg::Exited {
        task,
        attempt,
        exit_code,
        replies,
    });
}
