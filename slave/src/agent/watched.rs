//! Watching one started attempt: its end (announced by the supervisor pool, or polled through
//! its `status.json` and its supervisor's `/proc` entry after a restart), stopping its task on
//! request, and collecting the exit the supervisor recorded (in `status.json`, or in the
//! pool's journal should a machine crash have lost the former).
//!
//! Each watcher is a small tokio task of its own so the agent's mailbox never waits on a
//! process; it ends by mailing [`AgentMsg::Exited`] back. An attempt whose supervisor is gone
//! with no recorded exit has its leftovers killed and is reported `lost`.

use super::stop::StopRequest;
use super::AgentMsg;
use crate::attempt::files::{self, ExitRecord, SupervisorRecord, STATUS_FILE, SUPERVISOR_FILE};
use crate::attempt::{self, procfs, Launcher};
use crate::cgroup::AttemptCgroup;
use hetsched_common::protocol::UsageRecord;
use hetsched_common::{Attempt, TaskId, TaskReason};
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often an attempt without the pool's announcement (re-adopted after a restart, or its
/// connection lost) is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

/// How often an attempt whose end the pool will announce is checked all the same (should an
/// announcement be lost).
const ANNOUNCED_POLL: Duration = Duration::from_secs(1);

/// One started attempt, watched until its supervisor is gone.
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) task: TaskId,
    pub(super) attempt: Attempt,
    dir: PathBuf,
    /// Where its output is kept once it ended.
    log_dir: PathBuf,
    /// The pool's directory (its exit journal).
    pool_dir: PathBuf,
    cgroup: AttemptCgroup,
    /// The supervisor's pid and start time, when known.
    pub(super) supervisor: Option<(i32, u64)>,
    /// Fires when the supervisor pool announces this attempt's end (not after a restart).
    pub(super) ended: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Process group of a task started by an agent without supervisors.
    legacy_pgid: Option<i32>,
    /// When this agent started it (the slave's monotonic clock); `None` for an attempt
    /// re-adopted after a restart (its elapsed time is then not known).
    started_at: Option<Instant>,
    /// The slave's containers (a container attempt's end is theirs to finish).
    containers: Option<std::sync::Arc<crate::container::Containers>>,
}

impl Watched {
    /// The watch of (task, attempt) from what its directory and the store say.
    pub(super) fn recovered(
        launcher: &Launcher,
        task: TaskId,
        attempt: Attempt,
        stored: Option<(i32, u64)>,
        legacy_pgid: Option<i32>,
    ) -> Self {
        let mut w = Self::started(launcher, task, attempt, stored, None);
        // The supervisor's own record wins: it is written by the process itself.
        if let Some(r) = files::read_json::<SupervisorRecord>(&w.dir.join(SUPERVISOR_FILE)) {
            w.supervisor = Some((r.pid, r.start_time));
        }
        w.legacy_pgid = legacy_pgid;
        w.started_at = None;
        w
    }

    /// The watch of an attempt `supervisor` (pid and start time) has just started; its end
    /// is announced on `ended` when the pool started it. Nothing is read: the pool's record
    /// in the attempt directory says the same (and is often not written yet).
    pub(super) fn started(
        launcher: &Launcher,
        task: TaskId,
        attempt: Attempt,
        supervisor: Option<(i32, u64)>,
        ended: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Self {
        Self {
            task,
            attempt,
            cgroup: launcher
                .cgroups
                .attempt(&attempt::attempt_name(task, attempt)),
            dir: launcher.attempt_dir(task, attempt),
            log_dir: launcher.log_dir.clone(),
            pool_dir: launcher.pool_dir(),
            supervisor,
            ended,
            legacy_pgid: None,
            started_at: Some(Instant::now()),
            containers: launcher.containers.clone(),
        }
    }

    fn supervisor_alive(&self) -> bool {
        self.supervisor
            .is_some_and(|(pid, start)| procfs::is_alive(pid, start))
    }

    /// Whether the attempt has ended: its exit is recorded, or its supervisor is gone (the
    /// pool supervises many attempts, so its liveness alone says nothing of this one).
    fn ended_now(&self) -> bool {
        self.dir.join(STATUS_FILE).exists() || !self.supervisor_alive()
    }

    /// Waits until the attempt has ended (see [`ended_now`](Self::ended_now)): woken by the
    /// pool's announcement, checked every [`ADOPTED_POLL`] without one.
    async fn supervisor_gone(&mut self) {
        loop {
            // With the pool's announcement to come, it is awaited before each look (a look
            // is a stat and a read of the pool's `/proc` entry, per task).
            if let Some(rx) = &mut self.ended {
                tokio::select! {
                    _ = rx => self.ended = None,
                    _ = tokio::time::sleep(ANNOUNCED_POLL) => {}
                }
            }
            if self.ended_now() {
                return;
            }
            if self.ended.is_none() {
                tokio::time::sleep(ADOPTED_POLL).await;
            }
        }
    }

    /// The task's process group, from the supervisor's record (it may take a moment to
    /// appear after the start).
    async fn task_pgid(&self) -> Option<i32> {
        for _ in 0..100 {
            if let Some(r) = files::read_json::<SupervisorRecord>(&self.dir.join(SUPERVISOR_FILE)) {
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
            attempt::signal_group(pgid, Signal::SIGTERM);
        }
        if tokio::time::timeout(grace, self.supervisor_gone())
            .await
            .is_err()
        {
            if let Some(pgid) = pgid {
                attempt::signal_group(pgid, Signal::SIGKILL);
            }
            let cg = self.cgroup.clone();
            let _ = tokio::task::spawn_blocking(move || cg.kill_all()).await;
        }
    }

    /// Watches until the supervisor is gone (stopping the task when asked), then mails the
    /// attempt's result.
    pub(super) async fn run(
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
        let elapsed_ms = self.started_at.map(|t| t.elapsed().as_millis() as u64);
        let ((exit_code, reason), usage) =
            tokio::task::spawn_blocking(move || self.collect(elapsed_ms))
                .await
                .unwrap_or(((attempt::EXIT_LOST, Some(TaskReason::Lost)), None));
        let _ = mailbox.send(AgentMsg::Exited {
            task,
            attempt,
            exit_code,
            reason,
            usage,
            replies,
        });
    }

    /// After the supervisor is gone: the recorded exit, or — with no record — the attempt's
    /// leftovers killed and the attempt reported lost. What it used is read from its cgroup
    /// (with `elapsed_ms`, its wall time) before the cgroup is removed; a lost attempt has
    /// no usage record.
    fn collect(self, elapsed_ms: Option<u64>) -> ((i32, Option<TaskReason>), Option<UsageRecord>) {
        let name = attempt::attempt_name(self.task, self.attempt);
        let status = files::read_json::<ExitRecord>(&self.dir.join(STATUS_FILE))
            .or_else(|| attempt::pool::protocol::journaled_exit(&self.pool_dir, &name));
        let mut emptied = false;
        let result = match status {
            Some(rec) => {
                // Whatever outlived the task in its cgroup (the supervisor already killed its
                // process group) goes with it.
                emptied = self.cgroup.kill_all();
                outcome_of(&rec)
            }
            None => {
                let pgid = files::read_json::<SupervisorRecord>(&self.dir.join(SUPERVISOR_FILE))
                    .map(|r| r.task_pid)
                    .or(self.legacy_pgid);
                let found = attempt::kill_attempt_leftovers(
                    self.task,
                    self.attempt,
                    &self.dir,
                    &self.cgroup,
                    pgid,
                );
                tracing::warn!(task = %self.task, attempt = self.attempt, leftovers = found, "supervisor gone without an exit status; attempt lost");
                (attempt::EXIT_LOST, Some(TaskReason::Lost))
            }
        };
        let usage = (result.1 != Some(TaskReason::Lost)).then(|| {
            let read = self.cgroup.usage();
            UsageRecord {
                elapsed_ms,
                cpu_s: read.cpu_s,
                max_mem_mib: read.peak_bytes.map(|b| b / (1024 * 1024)),
                ..UsageRecord::default()
            }
        });
        if let Some(c) = &self.containers {
            // Issue 52: after the counters were read, the runtime deletes the container
            // (and removes the cgroups it joined), its bundle goes, its image is released.
            c.finish(&attempt::attempt_name(self.task, self.attempt));
        }
        if emptied {
            self.cgroup.retire_emptied();
        } else {
            self.cgroup.retire();
        }
        // The supervisor keeps the output before it records the end; this keeps what one
        // that vanished (or an older one) left behind.
        crate::logs::keep_attempt(&self.log_dir, &self.dir, self.task, self.attempt);
        (result, usage)
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
