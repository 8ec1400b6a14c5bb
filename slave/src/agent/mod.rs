//! The agent: the one task that owns the local queue and the store, and turns their decisions
//! into I/O (persist, spawn, kill, report).
//!
//! ```text
//!  masters ──Assign/StopTask──▶ listener ─┐
//!  supervisors ──Exited──────────────────┤  AgentMsg   ┌─────────┐ TaskReport ┌──────┐
//!  link ──Acked / Held?──────────────────┴───────────▶ │  Agent  │ ─────────▶ │ Link │──▶ leader
//!                                                      └─────────┘            └──────┘
//!
//! The agent's reports are the wire's [`TaskReport`]s: the link sends them as they are.
//! ```
//!
//! It is actor-shaped (one mailbox, state touched only here) but a plain tokio task. It takes
//! every message already waiting in its mailbox as one batch, handles each (store writes
//! included, no flush), then flushes once and only then sends the batch's answers (`commit`:
//! group commit, one fsync per batch of assignments, with "persist before acknowledging" kept
//! exactly). Finish reports go to the link as soon as their result is written; the link
//! flushes before it sends them, one fsync per batch of reports.
//!
//! Each attempt runs under the slave's long-lived supervisor *process*
//! ([`crate::attempt::pool`]), which outlives the agent (attempts of an older agent may run
//! under a per-attempt supervisor; they read the same, [`crate::attempt::files`]). Here a
//! small watcher task per attempt waits for the attempt's end (announced by the pool, or seen
//! by polling its `status.json` and its supervisor's `/proc` entry after a restart), stops
//! the task when asked, then reads the exit status the supervisor wrote and mails `Exited`
//! back.
//!
//! # Restart: re-adopt, never run twice
//! An attempt counts as started once its directory exists. On start every attempt the store
//! holds as started is watched again: a live supervisor (same pid *and* start time) is
//! re-adopted; one that ended while the agent was down has its recorded exit reported; one
//! that is gone with no record has whatever is left of the attempt killed and is reported
//! `lost`, which the master answers with a new attempt. Restarting the agent kills nothing.
//!
//! # Layout
//! - this module — the actor: its messages, its state, the run loop that dispatches each
//!   message, and the answers read straight off its state (running attempts, live CPUs);
//! - `commit` — the batch's flush, and what waits for it;
//! - `restore` — building the agent from the store and sweeping unheld attempts;
//! - `assign` — a master's `Assign`, `AssignBatch` and `ReleaseQueued`;
//! - `stop` — a master's `StopTask` and the stop line to a running attempt;
//! - `start` — the pump that starts what the queue lets start (processes and programs);
//! - `promote` — S0.3: asking the leader to start queued tasks, and its answer;
//! - `watched` — one supervised attempt watched, stopped and collected;
//! - `finish` — an exit recorded and reported, and forgotten once acknowledged.

mod assign;
mod commit;
mod finish;
mod gpu_holds;
mod promote;
mod restore;
mod start;
mod stop;
mod watched;

pub use assign::assign_batch;
pub use watched::outcome_of;

use crate::attempt::{self, Launcher};
use crate::probe::RunningAttempt;
use crate::queue::LocalQueue;
use crate::store::Store;
use hetsched_common::protocol::{Assignment, HeldTask, Message, TaskReport};
use hetsched_common::{Attempt, TaskId, TaskReason};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use stop::StopTx;
use tokio::sync::{mpsc, oneshot};
use watched::Watched;

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
        /// Exit code, per [`attempt`]'s convention.
        exit_code: i32,
        /// Why it ended (`None`: a normal exit).
        reason: Option<TaskReason>,
        /// What it used, as its cgroup counted (`None`: not measured).
        usage: Option<hetsched_common::protocol::UsageRecord>,
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
    /// S0.3: the queued attempts to ask the leader to start now (the link asks again with
    /// each heartbeat).
    Asks {
        /// Where the answer goes.
        reply: oneshot::Sender<Vec<(TaskId, Attempt)>>,
    },
    /// S0.3: the leader committed the start of these queued attempts.
    Promoted {
        /// The attempts.
        tasks: Vec<(TaskId, Attempt)>,
    },
    /// Issue 52: a container task's image, got from the store (or why not).
    ImageReady {
        /// The task.
        assignment: Assignment,
        /// The image, held for it.
        image: Result<crate::container::store::Image, crate::container::store::ImageError>,
    },
}

/// The probes' sampling loop's way to the agent and the masters
/// ([`crate::probe::SamplerPort`]): the agent's mailbox and the link's reports.
#[derive(Clone, Debug)]
pub struct SamplerLink {
    /// The agent's mailbox.
    pub mailbox: mpsc::UnboundedSender<AgentMsg>,
    /// The reports to the masters.
    pub reports: mpsc::UnboundedSender<TaskReport>,
}

impl crate::probe::SamplerPort for SamplerLink {
    fn running(&self, with_pids: bool) -> Option<oneshot::Receiver<Vec<RunningAttempt>>> {
        let (reply, rx) = oneshot::channel();
        let msg = AgentMsg::Running { with_pids, reply };
        self.mailbox.send(msg).ok().map(|()| rx)
    }

    fn set_cpus(&self, c: &crate::contention::Compression) -> Option<oneshot::Receiver<bool>> {
        let (reply, rx) = oneshot::channel();
        let msg = AgentMsg::SetCpus {
            task: c.task,
            attempt: c.attempt,
            cpu_milli: c.cpu_milli,
            reply,
        };
        self.mailbox.send(msg).ok().map(|()| rx)
    }

    fn compressed(&self, c: &crate::contention::Compression) {
        let _ = self.reports.send(TaskReport::Compressed {
            task: c.task,
            attempt: c.attempt,
            cpu_milli: c.cpu_milli,
            gpu_task: c.gpu_task,
        });
    }
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
    reports: mpsc::UnboundedSender<TaskReport>,
    programs: Option<ProgramHooks>,
    asked: promote::Asked,
    /// S0.2: the GPU engine units each running command task's granted devices take out of
    /// the program pool (`gpu_holds.rs`).
    gpu_holds: HashMap<(TaskId, Attempt), crate::engine::held::HeldUnits>,
    /// Answers waiting for the batch's flush (`commit`).
    deferred: commit::Deferred,
    /// What starts command tasks ([`crate::attempt::Launch`]): the slave's long-lived
    /// supervisor pool, which starts and reaps every task.
    launch: std::sync::Arc<dyn crate::attempt::Launch>,
    /// Container attempts whose image is being got, with the stops that came meanwhile.
    fetching: HashMap<(TaskId, Attempt), Vec<ReplyTx>>,
}

/// The most messages handled before one flush: bounds how long the first answer of a
/// batch waits behind the others.
const MAX_BATCH: usize = 4096;

impl Agent {
    /// Runs API-program tasks in-process with these hooks (without them a program task's
    /// marker command fails to start).
    pub fn with_programs(mut self, hooks: ProgramHooks) -> Self {
        self.programs = Some(hooks);
        self
    }

    /// Handles messages until every sender is gone.
    pub async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<AgentMsg>) {
        for w in std::mem::take(&mut self.adopt) {
            // Started before this agent: re-adopted, collected or reported lost.
            metrics::counter!("hetsched_slave_attempts_recovered_total").increment(1);
            tracing::info!(task = %w.task, attempt = w.attempt, supervisor = ?w.supervisor, "watching a task started before this agent");
            self.watch(w);
        }
        self.pump();
        self.commit().await;
        self.ask_to_start();
        self.gauges();
        while let Some(msg) = inbox.recv().await {
            // Group commit: whatever else is already waiting joins this batch.
            self.handle(msg);
            for _ in 1..MAX_BATCH {
                match inbox.try_recv() {
                    Ok(m) => self.handle(m),
                    Err(_) => break,
                }
            }
            // Accepted assignments are durable (and answered) before any of them starts.
            self.commit().await;
            self.pump();
            self.commit().await;
            self.ask_to_start();
            self.gauges();
        }
    }

    fn gauges(&self) {
        metrics::gauge!("hetsched_slave_tasks_queued").set(self.queue.queued_len() as f64);
        metrics::gauge!("hetsched_slave_cpu_running_milli")
            .set(self.queue.cpu_running_milli() as f64);
    }

    fn handle(&mut self, msg: AgentMsg) {
        match msg {
            AgentMsg::Assign { assignment, reply } => self.assign(assignment, reply),
            AgentMsg::Stop {
                task,
                attempt,
                grace,
                reply,
            } => self.stop(task, attempt, grace, reply),
            AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                reason,
                usage,
                replies,
            } => self.exited(task, attempt, exit_code, reason, usage, replies),
            AgentMsg::Acked { task, attempt } => self.acked(task, attempt),
            AgentMsg::ImageReady { assignment, image } => self.image_ready(assignment, image),
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
            } => self.release(task, attempt, reply),
            AgentMsg::WantsWork { reply } => {
                let _ = reply.send(self.queue.wants_work());
            }
            AgentMsg::Asks { reply } => {
                let _ = reply.send(self.queue.asks());
            }
            AgentMsg::Promoted { tasks } => self.promoted(&tasks),
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
                let name = attempt::attempt_name(a.task, a.attempt);
                let dir = self.launcher.attempt_dir(a.task, a.attempt);
                let mut pids = BTreeSet::new();
                if with_pids {
                    pids = self.launcher.cgroups.attempt(&name).pids();
                }
                if with_pids && pids.is_empty() {
                    // No cgroup: the processes marked with this attempt.
                    pids.extend(attempt::marked_processes(a.task, a.attempt, &dir));
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
        let name = attempt::attempt_name(task, attempt);
        let dir = self.launcher.attempt_dir(task, attempt);
        match attempt::set_cpus(&dir, &self.launcher.cgroups.attempt(&name), cpu_milli) {
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
}
