//! The end of an attempt: its exit recorded (written, and reported through the link, which
//! flushes before the report leaves),
//! waiting `StopTask` answers released, and — once the master acknowledges the result — the
//! attempt forgotten except for its done record.
//!
//! Kept together because these steps are the result's life cycle in the store: written
//! `Finished`, reported until acknowledged, then completed.

use super::{Agent, ReplyTx};
use crate::store::StoredPhase;
use hetsched_common::protocol::{Message, SlaveCommandReply};
use hetsched_common::protocol::{TaskReport, UsageRecord};
use hetsched_common::GpuAlloc;
use hetsched_common::{Attempt, TaskId, TaskReason};

impl Agent {
    /// A watcher's (or a program task's) exit: the attempt no longer runs; its result is
    /// recorded and the `StopTask` answers waiting for it go out.
    pub(super) fn exited(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
        usage: Option<UsageRecord>,
        replies: Vec<ReplyTx>,
    ) {
        self.running.remove(&(task, attempt));
        self.finished(task, attempt, exit_code, reason, usage);
        if !replies.is_empty() {
            // The result's record is flushed with this batch before the answers leave.
            self.deferred.wrote();
        }
        for r in replies {
            // After the result is durable, as the finish report.
            self.deferred
                .reply(r, Message::ToSlaveReply(SlaveCommandReply::Stopped));
        }
    }

    /// The master acknowledged this result: it is completed in the store (its done record
    /// keeps the attempt from running again) and its attempt directory removed.
    pub(super) fn acked(&mut self, task: TaskId, attempt: Attempt) {
        if !self.queue.acked(task, attempt) {
            return;
        }
        let pruned = self.queue.prune_done();
        let r = self
            .store
            .complete_task(task, attempt)
            .and_then(|()| self.store.forget_done(&pruned));
        // Losing this write only means the result is reported once more.
        if let Err(e) = r {
            tracing::error!(task = %task, attempt, error = %e, "cannot forget acknowledged result");
        }
        // The done record now keeps the attempt from running again; its directory (spec,
        // status) has served. Output files stay in the log dir.
        if let Err(e) = self.launcher.remove_attempt_dir(task, attempt) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(task = %task, attempt, error = %e, "cannot remove attempt directory");
            }
        }
        tracing::debug!(task = %task, attempt, "result acknowledged");
    }

    /// Records an exit: written (not flushed) and handed to the link, which flushes the
    /// store before it sends a batch holding the report (`Link::deliver`). `usage` (what
    /// the attempt's cgroup counted) gets its GPU seconds here, from the granted shares.
    pub(super) fn finished(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
        usage: Option<UsageRecord>,
    ) {
        self.finished_detail(task, attempt, exit_code, reason, usage, None);
    }

    /// [`finished`](Self::finished) with one line more on why (`reason_detail`).
    pub(super) fn finished_detail(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
        usage: Option<UsageRecord>,
        detail: Option<String>,
    ) {
        self.release_gpus(task, attempt);
        if !self.queue.finished(task, attempt, exit_code) {
            tracing::debug!(task = %task, attempt, exit_code, "exit of a superseded or unknown attempt");
            return;
        }
        let Some(entry) = self.queue.get(task) else {
            return;
        };
        let assignment = entry.assignment.clone();
        let usage = usage.map(|u| with_gpu_seconds(u, &assignment.gpus));
        let r = self.store.put_phase(
            assignment,
            StoredPhase::Finished {
                exit_code,
                reason,
                usage: usage.clone(),
                detail: detail.clone(),
            },
        );
        if let Err(e) = r {
            // TaskReport anyway: the master learning the result beats holding it back; the
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
        let _ = self.reports.send(TaskReport::Finished {
            task,
            attempt,
            exit_code,
            reason,
            reason_detail: detail,
            usage,
        });
    }
}

/// `u` with its GPU seconds: the granted shares (thousandths of a device, summed over the
/// devices) times the wall time; `None` without a wall time, 0 for an attempt with no GPU.
fn with_gpu_seconds(mut u: UsageRecord, gpus: &GpuAlloc) -> UsageRecord {
    let share: u64 = gpus.iter().map(|&(_, milli)| u64::from(milli)).sum();
    u.gpu_s = u.elapsed_ms.map(|ms| share as f64 * ms as f64 / 1e6);
    u
}
