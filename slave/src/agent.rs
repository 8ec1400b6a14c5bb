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
//! before acknowledging" obvious.
//!
//! Each attempt runs under a supervisor *process* of its own ([`crate::supervisor`]) that
//! outlives the agent. Here a small watcher task per attempt waits for that supervisor (as its
//! child, or by polling `/proc` for one re-adopted after a restart), stops the task when asked,
//! then reads the exit status the supervisor wrote and mails `Exited` back.
//!
//! # Restart: re-adopt, never run twice
//! An attempt counts as started once its directory exists. On start every attempt the store
//! holds as started is watched again: a live supervisor (same pid *and* start time) is
//! re-adopted; one that ended while the agent was down has its recorded exit reported; one
//! that is gone with no record has whatever is left of the attempt killed and is reported
//! `lost`, which the master answers with a new attempt. Restarting the agent kills nothing.

use crate::cgroup::AttemptCgroup;
use crate::exec::{self, Launcher, SpawnError};
use crate::queue::{LocalQueue, Offer, Phase, Stop};
use crate::store::{Store, StoreError, StoredPhase, StoredTask};
use crate::supervisor::{self, ExitRecord, SupervisorRecord, STATUS_FILE, SUPERVISOR_FILE};
use hetsched_common::protocol::{
    Assignment, ErrorKind, ErrorReply, HeldTask, Message, SlaveCommandReply,
};
use hetsched_common::{Attempt, TaskId, TaskReason};
use nix::sys::signal::Signal;
use std::collections::{BTreeSet, HashMap};
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
        /// Time between SIGTERM and SIGKILL (`None`: the slave's `stop_grace`); a
        /// preemption carries the master's `--preempt-grace`.
        grace: Option<Duration>,
        /// Where the answer goes (after the process has exited).
        reply: ReplyTx,
    },
    /// A task's process ended (or could not start, or was lost).
    Exited {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Exit code, per [`exec`]'s convention.
        exit_code: i32,
        /// Why it ended (`None`: a normal exit).
        reason: Option<TaskReason>,
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
    /// The attempts whose processes run now, for the probes.
    Running {
        /// Whether to list their processes (real probes need them; reading `/proc` for
        /// each task every second is wasted on emulated ones).
        with_pids: bool,
        /// Where the answer goes.
        reply: oneshot::Sender<Vec<RunningAttempt>>,
    },
    /// Change a running attempt's CPUs live (S3.2 search from the master, S3.6 compression
    /// from the contention rule): its cgroup quota and its `HETSCHED_CPUS_FILE`.
    SetCpus {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// New allocation, millicores.
        cpu_milli: u64,
        /// Whether it ran and was changed.
        reply: oneshot::Sender<bool>,
    },
    /// S0.4: a master's `ReleaseQueued` (another slave steals the task).
    Release {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Where the answer goes.
        reply: ReplyTx,
    },
    /// S0.4: whether the slave should ask for work to steal.
    WantsWork {
        /// Where the answer goes.
        reply: oneshot::Sender<bool>,
    },
}

/// A running attempt as the probes see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningAttempt {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// Its CPU allocation now, millicores.
    pub cpu_milli: u64,
    /// Its name, directory, processes and GPUs.
    pub target: crate::probe::ProbeTarget,
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
        /// Why (`None`: a normal exit; `lost`: the attempt vanished, to be run again).
        reason: Option<TaskReason>,
    },
    /// S3.6: the contention rule halved a CPU task's cores (already applied live).
    Compressed {
        /// The CPU task.
        task: TaskId,
        /// Its attempt.
        attempt: Attempt,
        /// Its new allocation, millicores.
        cpu_milli: u64,
        /// The GPU task that suffered.
        gpu_task: TaskId,
    },
}

/// A running process's stop line: each message asks the supervisor to kill the group, with
/// an optional answer to send once it has exited.
type StopTx = mpsc::UnboundedSender<StopRequest>;

/// A request to stop a running attempt: who waits for the answer, and the grace period.
#[derive(Debug)]
struct StopRequest {
    reply: Option<ReplyTx>,
    grace: Option<Duration>,
}

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
    launcher: Launcher,
    grace: Duration,
    running: HashMap<(TaskId, Attempt), StopTx>,
    /// Started attempts found at restore, watched once `run` starts.
    adopt: Vec<Watched>,
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
    /// Builds the agent from what the store holds: queued tasks are queued again; started
    /// attempts (their supervisor recorded, or their directory present) are watched again —
    /// re-adopted, collected or reported lost, never started a second time; unacknowledged
    /// results are reported again. Stale cgroups of attempts no longer held are removed.
    pub fn restore(
        store: Store,
        cpu_capacity_milli: u64,
        launcher: Launcher,
        grace: Duration,
        mailbox: mpsc::UnboundedSender<AgentMsg>,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Result<Self, StoreError> {
        let loaded = store.load()?;
        let mut queue = LocalQueue::new(cpu_capacity_milli);
        let mut adopt = Vec::new();
        for t in loaded.tasks {
            let task = t.assignment.task;
            let attempt = t.assignment.attempt;
            let dir = launcher.attempt_dir(task, attempt);
            let phase = match t.phase {
                StoredPhase::Queued if !dir.exists() => Phase::Queued,
                // Its directory exists: the agent stopped while starting it.
                StoredPhase::Queued => {
                    adopt.push(Watched::recovered(&launcher, task, attempt, None, None));
                    Phase::Running
                }
                StoredPhase::Supervised { pid, start_time } => {
                    adopt.push(Watched::recovered(
                        &launcher,
                        task,
                        attempt,
                        Some((pid, start_time)),
                        None,
                    ));
                    Phase::Running
                }
                StoredPhase::Running { pgid } => {
                    // Started by an agent without supervisors: nothing recorded its exit.
                    tracing::warn!(task = %task, attempt, pgid, "task of an older slave version was running; reporting it lost");
                    adopt.push(Watched::recovered(
                        &launcher,
                        task,
                        attempt,
                        None,
                        Some(pgid),
                    ));
                    Phase::Running
                }
                StoredPhase::Finished { exit_code, reason } => {
                    let _ = reports.send(Report::Finished {
                        task,
                        attempt,
                        exit_code,
                        reason,
                    });
                    Phase::Finished { exit_code }
                }
            };
            queue.restore(t.assignment, phase);
        }
        for (task, attempt) in loaded.done {
            queue.restore_done(task, attempt);
        }
        let keep: BTreeSet<String> = adopt
            .iter()
            .map(|w| exec::attempt_name(w.task, w.attempt))
            .collect();
        let held: BTreeSet<String> = queue
            .held()
            .iter()
            .map(|h| exec::attempt_name(h.task, h.attempt))
            .collect();
        sweep_unheld_attempts(&launcher, &held);
        let removed = launcher.cgroups.clean_stale(&keep);
        if !removed.is_empty() {
            tracing::info!(
                count = removed.len(),
                "removed stale cgroups of a previous run"
            );
        }
        Ok(Self {
            queue,
            store,
            launcher,
            grace,
            running: HashMap::new(),
            adopt,
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
                exec::note_in_err_log(&self.launcher.log_dir, &a, &format!("hetsched: {why}"));
                self.finished(
                    task,
                    attempt,
                    crate::program::EXIT_BAD_PROGRAM,
                    Some(TaskReason::CannotStart),
                )
                .await;
                return;
            }
        };
        metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
        tracing::info!(task = %task, attempt, calls = program.calls.len(), "program task started");
        let _ = self.reports.send(Report::Started { task, attempt });
        let (stop_tx, mut stop_rx) = mpsc::unbounded_channel::<StopRequest>();
        self.running.insert((task, attempt), stop_tx);
        let (log_dir, mailbox) = (self.launcher.log_dir.clone(), self.mailbox.clone());
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
                        replies.extend(r.reply);
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
                replies.extend(r.reply);
            }
            let _ = mailbox.send(AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                reason: TaskReason::of_exit_code(exit_code),
                replies,
            });
        });
    }

    /// Handles messages until every sender is gone.
    pub async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<AgentMsg>) {
        for w in std::mem::take(&mut self.adopt) {
            // Started before this agent: re-adopted, collected or reported lost.
            metrics::counter!("hetsched_slave_attempts_recovered_total").increment(1);
            tracing::info!(task = %w.task, attempt = w.attempt, supervisor = ?w.supervisor, "watching a task started before this agent");
            self.watch(w);
        }
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
                grace,
                reply,
            } => self.stop(task, attempt, grace, reply).await,
            AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                reason,
                replies,
            } => {
                self.running.remove(&(task, attempt));
                self.finished(task, attempt, exit_code, reason).await;
                for r in replies {
                    let _ = r.send(Message::ToSlaveReply(SlaveCommandReply::Stopped));
                }
            }
            AgentMsg::Acked { task, attempt } => {
                if self.queue.acked(task, attempt) {
                    let pruned = self.queue.prune_done();
                    let r = self
                        .store
                        .complete_task(task, attempt)
                        .and_then(|()| self.store.forget_done(&pruned));
                    // Losing this write only means the result is reported once more.
                    if let Err(e) = r {
                        tracing::error!(task = %task, attempt, error = %e, "cannot forget acknowledged result");
                    }
                    // The done record now keeps the attempt from running again; its
                    // directory (spec, status) has served. Output files stay in the log dir.
                    let dir = self.launcher.attempt_dir(task, attempt);
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::debug!(dir = %dir.display(), error = %e, "cannot remove attempt directory");
                        }
                    }
                    tracing::debug!(task = %task, attempt, "result acknowledged");
                }
            }
            AgentMsg::Held { reply } => {
                let _ = reply.send(self.queue.held());
            }
            AgentMsg::Running { with_pids, reply } => {
                let _ = reply.send(self.running_attempts(with_pids));
            }
            AgentMsg::SetCpus {
                task,
                attempt,
                cpu_milli,
                reply,
            } => {
                let _ = reply.send(self.set_cpus(task, attempt, cpu_milli));
            }
            AgentMsg::Release {
                task,
                attempt,
                reply,
            } => {
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
                let _ = reply.send(Message::ToSlaveReply(SlaveCommandReply::Released {
                    released,
                }));
            }
            AgentMsg::WantsWork { reply } => {
                let _ = reply.send(self.queue.wants_work());
            }
        }
    }

    /// Attempts with a process running (program tasks run in-process and are left out).
    fn running_attempts(&self, with_pids: bool) -> Vec<RunningAttempt> {
        self.queue
            .running()
            .into_iter()
            .filter(|a| self.running.contains_key(&(a.task, a.attempt)))
            .filter(|a| a.command != [hetsched_common::program::PROGRAM_COMMAND])
            .map(|a| {
                let name = exec::attempt_name(a.task, a.attempt);
                let dir = self.launcher.attempt_dir(a.task, a.attempt);
                let mut pids = BTreeSet::new();
                if with_pids {
                    pids = self.launcher.cgroups.attempt(&name).pids();
                }
                if with_pids && pids.is_empty() {
                    // No cgroup: the processes marked with this attempt.
                    pids.extend(exec::marked_processes(a.task, a.attempt, &dir));
                }
                RunningAttempt {
                    task: a.task,
                    attempt: a.attempt,
                    cpu_milli: a.resources.cpu_milli,
                    target: crate::probe::ProbeTarget {
                        name,
                        dir,
                        pids,
                        gpus: a.gpus.iter().map(|(d, _)| *d).collect(),
                    },
                }
            })
            .collect()
    }

    /// Applies a live CPU change to a running attempt; false when it does not run here.
    fn set_cpus(&mut self, task: TaskId, attempt: Attempt, cpu_milli: u64) -> bool {
        if cpu_milli == 0 || !self.running.contains_key(&(task, attempt)) {
            return false;
        }
        let Some(old) = self
            .queue
            .get(task)
            .filter(|e| e.assignment.attempt == attempt)
            .map(|e| e.assignment.resources.cpu_milli)
        else {
            return false;
        };
        if !self.queue.set_cpus(task, attempt, cpu_milli) {
            return false;
        }
        let name = exec::attempt_name(task, attempt);
        let dir = self.launcher.attempt_dir(task, attempt);
        match exec::set_cpus(&dir, &self.launcher.cgroups.attempt(&name), cpu_milli) {
            Ok(()) => {
                if old != cpu_milli {
                    tracing::info!(task = %task, attempt, from_milli = old, to_milli = cpu_milli, "CPU allocation changed live");
                }
                true
            }
            Err(e) => {
                tracing::warn!(task = %task, attempt, error = %e, "cannot change the CPU allocation live");
                false
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

    async fn stop(
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
            match self.launcher.launch(&a) {
                Ok(launched) => {
                    let (pid, start_time) = (launched.pid, launched.start_time);
                    let seq = self.store.get_task(task).ok().flatten().map(|t| t.seq);
                    let r = async {
                        let seq = match seq {
                            Some(s) => s,
                            None => self.store.next_seq()?,
                        };
                        self.store.put_task(&StoredTask {
                            seq,
                            assignment: a.clone(),
                            phase: StoredPhase::Supervised { pid, start_time },
                        })?;
                        self.store.flush().await
                    }
                    .await;
                    if let Err(e) = r {
                        // The attempt directory still marks it started, and the supervisor
                        // records itself there: a restart finds it all the same.
                        tracing::error!(task = %task, attempt, error = %e, "cannot persist running state");
                    }
                    metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
                    tracing::info!(task = %task, attempt, supervisor = pid, command = ?a.command, "task started");
                    let _ = self.reports.send(Report::Started { task, attempt });
                    let mut w = Watched::recovered(
                        &self.launcher,
                        task,
                        attempt,
                        Some((pid, start_time)),
                        None,
                    );
                    w.child = Some(launched.child);
                    self.watch(w);
                }
                Err(SpawnError::AlreadyStarted(dir)) => {
                    // Never start an attempt twice: watch what is there instead.
                    tracing::warn!(task = %task, attempt, dir = %dir.display(), "attempt was started before; watching it instead of starting it again");
                    let w = Watched::recovered(&self.launcher, task, attempt, None, None);
                    self.watch(w);
                }
                Err(e) => {
                    tracing::error!(task = %task, attempt, error = %e, exit_code = exec::EXIT_CANNOT_START, "task cannot start");
                    exec::note_in_err_log(&self.launcher.log_dir, &a, &format!("hetsched: {e}"));
                    self.finished(
                        task,
                        attempt,
                        exec::EXIT_CANNOT_START,
                        Some(TaskReason::CannotStart),
                    )
                    .await;
                }
            }
        }
    }

    /// Starts the watcher of an attempt.
    fn watch(&mut self, w: Watched) {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        self.running.insert((w.task, w.attempt), stop_tx);
        tokio::spawn(w.run(self.grace, stop_rx, self.mailbox.clone()));
    }

    /// Records an exit: persisted (flushed) before it is reported.
    async fn finished(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
    ) {
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
                phase: StoredPhase::Finished { exit_code, reason },
            })?;
            self.store.flush().await
        }
        .await;
        if let Err(e) = r {
            // Report anyway: the master learning the result beats holding it back; the
            // supervisor's status file still holds it for a restart.
            tracing::error!(task = %task, attempt, error = %e, "cannot persist result");
        }
        let outcome = match reason {
            None => "success",
            Some(TaskReason::Lost) => "lost",
            Some(TaskReason::Oom) => "oom",
            Some(_) => "failure",
        };
        metrics::counter!("hetsched_slave_tasks_finished_total", "outcome" => outcome).increment(1);
        tracing::info!(task = %task, attempt, exit_code, reason = ?reason, "task finished");
        let _ = self.reports.send(Report::Finished {
            task,
            attempt,
            exit_code,
            reason,
        });
    }
}

/// How often a re-adopted supervisor (not a child of this agent) is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

/// One started attempt, watched until its supervisor is gone.
#[derive(Debug)]
struct Watched {
    task: TaskId,
    attempt: Attempt,
    dir: PathBuf,
    cgroup: AttemptCgroup,
    /// The supervisor's pid and start time, when known.
    supervisor: Option<(i32, u64)>,
    /// The supervisor as a child of this agent (not after a restart).
    child: Option<tokio::process::Child>,
    /// Process group of a task started by an agent without supervisors.
    legacy_pgid: Option<i32>,
}

impl Watched {
    /// The watch of (task, attempt) from what its directory and the store say.
    fn recovered(
        launcher: &Launcher,
        task: TaskId,
        attempt: Attempt,
        stored: Option<(i32, u64)>,
        legacy_pgid: Option<i32>,
    ) -> Self {
        let dir = launcher.attempt_dir(task, attempt);
        // The supervisor's own record wins: it is written by the process itself.
        let recorded = supervisor::read_json::<SupervisorRecord>(&dir.join(SUPERVISOR_FILE))
            .map(|r| (r.pid, r.start_time));
        Self {
            task,
            attempt,
            cgroup: launcher.cgroups.attempt(&exec::attempt_name(task, attempt)),
            dir,
            supervisor: recorded.or(stored),
            child: None,
            legacy_pgid,
        }
    }

    fn supervisor_alive(&self) -> bool {
        self.supervisor
            .is_some_and(|(pid, start)| supervisor::is_alive(pid, start))
    }

    /// Waits until the supervisor has exited.
    async fn supervisor_gone(&mut self) {
        if let Some(child) = &mut self.child {
            if let Err(e) = child.wait().await {
                tracing::warn!(task = %self.task, error = %e, "cannot wait for the supervisor; polling it");
            } else {
                return;
            }
        }
        while self.supervisor_alive() {
            tokio::time::sleep(ADOPTED_POLL).await;
        }
    }

    /// The task's process group, from the supervisor's record (it may take a moment to
    /// appear after the start).
    async fn task_pgid(&self) -> Option<i32> {
        for _ in 0..100 {
            if let Some(r) =
                supervisor::read_json::<SupervisorRecord>(&self.dir.join(SUPERVISOR_FILE))
            {
                return Some(r.task_pid);
            }
            if !self.supervisor_alive() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Stops the task: SIGTERM to its process group, SIGKILL to the group and its cgroup after
    /// `grace`. The supervisor sees the exit and records it.
    async fn stop(&mut self, grace: Duration) {
        let pgid = self.task_pgid().await;
        if let Some(pgid) = pgid {
            exec::signal_group(pgid, Signal::SIGTERM);
        }
        if tokio::time::timeout(grace, self.supervisor_gone())
            .await
            .is_err()
        {
            if let Some(pgid) = pgid {
                exec::signal_group(pgid, Signal::SIGKILL);
            }
            let cg = self.cgroup.clone();
            let _ = tokio::task::spawn_blocking(move || cg.kill_all()).await;
        }
    }

    /// Watches until the supervisor is gone (stopping the task when asked), then mails the
    /// attempt's result.
    async fn run(
        mut self,
        grace: Duration,
        mut stop_rx: mpsc::UnboundedReceiver<StopRequest>,
        mailbox: mpsc::UnboundedSender<AgentMsg>,
    ) {
        let mut replies = Vec::new();
        let stop = tokio::select! {
            _ = self.supervisor_gone() => None,
            Some(r) = stop_rx.recv() => {
                replies.extend(r.reply);
                Some(r.grace.unwrap_or(grace))
            }
        };
        if let Some(grace) = stop {
            self.stop(grace).await;
            self.supervisor_gone().await;
        }
        while let Ok(r) = stop_rx.try_recv() {
            replies.extend(r.reply);
        }
        let (task, attempt) = (self.task, self.attempt);
        let (exit_code, reason) = tokio::task::spawn_blocking(move || self.collect())
            .await
            .unwrap_or((exec::EXIT_LOST, Some(TaskReason::Lost)));
        let _ = mailbox.send(AgentMsg::Exited {
            task,
            attempt,
            exit_code,
            reason,
            replies,
        });
    }

    /// After the supervisor is gone: the recorded exit, or — with no record — the attempt's
    /// leftovers killed and the attempt reported lost. The attempt's cgroup is removed.
    fn collect(self) -> (i32, Option<TaskReason>) {
        let status = supervisor::read_json::<ExitRecord>(&self.dir.join(STATUS_FILE));
        let result = match status {
            Some(rec) => {
                // Whatever outlived the task in its cgroup (the supervisor already killed its
                // process group) goes with it.
                self.cgroup.kill_all();
                outcome_of(&rec)
            }
            None => {
                let pgid =
                    supervisor::read_json::<SupervisorRecord>(&self.dir.join(SUPERVISOR_FILE))
                        .map(|r| r.task_pid)
                        .or(self.legacy_pgid);
                let found = exec::kill_attempt_leftovers(
                    self.task,
                    self.attempt,
                    &self.dir,
                    &self.cgroup,
                    pgid,
                );
                tracing::warn!(task = %self.task, attempt = self.attempt, leftovers = found, "supervisor gone without an exit status; attempt lost");
                (exec::EXIT_LOST, Some(TaskReason::Lost))
            }
        };
        self.cgroup.remove();
        result
    }
}

/// Ends and removes the attempt directories no held task names: attempts superseded by a
/// newer one while the agent was down (whatever still runs of them is killed), and leftovers
/// of acknowledged ones.
fn sweep_unheld_attempts(launcher: &Launcher, held: &BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(&launcher.attempts_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if held.contains(&name) {
            continue;
        }
        let parsed = name
            .strip_prefix("task-")
            .and_then(|r| r.split_once('-'))
            .and_then(|(t, a)| Some((TaskId(t.parse().ok()?), a.parse::<Attempt>().ok()?)));
        if let Some((task, attempt)) = parsed {
            let pgid = supervisor::read_json::<SupervisorRecord>(&e.path().join(SUPERVISOR_FILE))
                .map(|r| r.task_pid);
            let cg = launcher.cgroups.attempt(&name);
            let found = exec::kill_attempt_leftovers(task, attempt, &e.path(), &cg, pgid);
            if found > 0 {
                tracing::warn!(task = %task, attempt, processes = found, "killed a superseded attempt left from before the restart");
            }
        }
        if let Err(err) = std::fs::remove_dir_all(e.path()) {
            tracing::debug!(dir = %e.path().display(), error = %err, "cannot remove a stale attempt directory");
        }
    }
}

/// The exit code and reason of a recorded exit.
pub fn outcome_of(rec: &ExitRecord) -> (i32, Option<TaskReason>) {
    let reason = if rec.cannot_start.is_some() {
        Some(TaskReason::CannotStart)
    } else if rec.oom_kills > 0 && rec.exit_code != 0 {
        Some(TaskReason::Oom)
    } else {
        TaskReason::of_exit_code(rec.exit_code)
    };
    (rec.exit_code, reason)
}
