//! How attempts start and end: slaves' reports of attempts starting and finishing (one at a
//! time or batched), losses, and the leader's timeouts — fenced by attempt number so a
//! stale report never counts — and re-runs of failed attempts with backoff.
//!
//! ```text
//! running ──fails (exit ≠ 0, timeout)──▶ failures + 1 ─┬─ retries left ─▶ pending, not before
//!                                                      │                  at_ms + backoff·2^(n−1)
//!                                                      └─ none left ────▶ failed (reason)
//! ```

use super::command::{Command, Outcome, TaskRef};
use super::cpu_changes::CpuRules;
use super::grants::Grants;
use super::job_book::JobBook;
use super::node_book::NodeBook;
use super::slave_queue::QueueRules;
use super::task_book::TaskBook;
use hetsched_common::protocol::TaskReport;
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason, TaskState};

/// How an attempt ended, as its slave reported it.
pub(super) struct AttemptEnd {
    /// The process's exit code (−N: killed by signal N).
    pub exit_code: i32,
    /// Why, as the slave saw it (`None` in older reports: the exit code decides).
    pub reason: Option<TaskReason>,
    /// One human line beside the reason.
    pub reason_detail: Option<String>,
}

/// The rules of attempts' starts and ends. Spans the task book (the attempt's state), the
/// node book (an attempt that ends gives its grant back; one that starts from a slave's
/// queue takes it) and the job book (retries and backoff come from the job, and a job is
/// finished when its last task is final).
pub(super) struct ReportRules<'a> {
    /// Grants and queues.
    pub nodes: &'a mut NodeBook,
    /// Attempts.
    pub tasks: &'a mut TaskBook,
    /// Retry policies and open counts.
    pub jobs: &'a mut JobBook,
    /// The command's leader time (starts, backoff).
    pub at_ms: u64,
    /// The state's clock: a job whose last task ends finishes then.
    pub now_ms: u64,
}

impl ReportRules<'_> {
    /// Applies `TaskStarted`, `TaskFinished`, `TaskLost`, `TimeoutTask` or `TaskReports`.
    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::TaskStarted {
                node,
                task,
                attempt,
            } => self.started(node, task, attempt),
            Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            } => {
                let end = AttemptEnd {
                    exit_code,
                    reason,
                    reason_detail: None,
                };
                self.finished(node, task, attempt, end)
            }
            Command::TaskLost {
                node,
                task,
                attempt,
            } => self.lost(node, task, attempt),
            Command::TimeoutTask {
                node,
                task,
                attempt,
            } => self.timed_out(node, task, attempt),
            Command::TaskReports { node, reports } => self.reports(node, reports),
            _ => Outcome::Rejected("not an attempt report".into()),
        }
    }

    /// The grant rules over the same books.
    fn grants(&mut self) -> Grants<'_> {
        Grants {
            nodes: self.nodes,
            tasks: self.tasks,
            jobs: self.jobs,
        }
    }

    /// The slave started the attempt (a slave-queued one takes its room now, S0.3).
    pub(super) fn started(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if let Err(o) = self.tasks.current(node, task, attempt) {
            return o;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let was_running = t.status.state == TaskState::Running;
        match t.status.start(attempt) {
            Ok(()) => {
                if !was_running || t.started_ms.is_none() {
                    t.started_ms = Some(self.at_ms);
                }
                // A task queued on its slave (S0.3) takes its resources when started.
                QueueRules {
                    nodes: self.nodes,
                    tasks: self.tasks,
                    jobs: self.jobs,
                }
                .start_queued(node, task);
                Outcome::TaskUpdated
            }
            Err(e) => Outcome::Ignored(e.to_string()),
        }
    }

    /// The attempt ended: a stopping (preempted) one gives its holdings back; a current one
    /// succeeds, or fails (see [`attempt_failed`](Self::attempt_failed)).
    pub(super) fn finished(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        end: AttemptEnd,
    ) -> Outcome {
        let AttemptEnd {
            exit_code,
            reason,
            reason_detail,
        } = end;
        if self.grants().release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.tasks.current(node, task, attempt) {
            return o;
        }
        if exit_code != 0 {
            // The slave's observation (oom, cannot-start) wins over what the code implies.
            let why = reason.or(TaskReason::of_exit_code(exit_code));
            let o = self.attempt_failed(task, attempt, why, Some(exit_code));
            // The detail goes with the reason just recorded, whether the task ended or
            // waits for its retry.
            if o == Outcome::TaskUpdated {
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.status.explain_reason(reason_detail);
                }
            }
            return o;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if let Err(e) = t.status.finish_because(attempt, exit_code, reason) {
            return Outcome::Ignored(e.to_string());
        }
        t.status.explain_reason(reason_detail);
        let gpus = std::mem::take(&mut t.gpus);
        let job = t.job;
        let now_final = t.status.state.is_final();
        self.grants().release(node, task, job, &gpus);
        if now_final {
            self.jobs.tasks_final(job, &[task], self.now_ms);
        }
        Outcome::TaskUpdated
    }

    /// The attempt is lost (its supervisor is gone): back to the queue, attempt + 1.
    pub(super) fn lost(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if self.grants().release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.tasks.current(node, task, attempt) {
            return o;
        }
        match self.grants().requeue(task, TaskReason::Lost) {
            Some(_) => Outcome::TaskUpdated,
            None => Outcome::Ignored(format!("{task} was not assigned or running")),
        }
    }

    /// The leader found the attempt past its job's timeout: it fails like an exit ≠ 0.
    pub(super) fn timed_out(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if let Err(o) = self.tasks.current(node, task, attempt) {
            return o;
        }
        match self.attempt_failed(task, attempt, Some(TaskReason::Timeout), None) {
            Outcome::TaskUpdated => {
                let retried = self
                    .tasks
                    .get(&task)
                    .is_some_and(|t| t.status.state == TaskState::Pending);
                Outcome::TimedOut {
                    stop: TaskRef {
                        task,
                        node,
                        attempt,
                    },
                    retried,
                }
            }
            other => other,
        }
    }

    /// The current attempt of `task` failed (the caller checked fencing): with retries left
    /// the task goes back to pending, not to be placed before `at_ms` + its backoff;
    /// otherwise it is failed for good. Either way its node's grant is released.
    fn attempt_failed(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        reason: Option<TaskReason>,
        exit_code: Option<i32>,
    ) -> Outcome {
        let Some(t) = self.tasks.get(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let job = t.job;
        let failures = t.failures.saturating_add(1);
        let (retries, delay) = match self.jobs.get(&job) {
            Some(j) => (j.spec.retries, j.spec.retry_delay_ms(failures)),
            None => (0, 0),
        };
        let Some(node) = t.status.node else {
            return Outcome::Ignored(format!("{task} is not on a node"));
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let retry = failures <= retries;
        let changed = if retry {
            t.status.requeue()
        } else {
            // `finish` with a non-zero code marks the task failed.
            t.status.finish(attempt, exit_code.unwrap_or(-1))
        };
        if let Err(e) = changed {
            return Outcome::Ignored(e.to_string());
        }
        t.status.exit_code = exit_code;
        if retry {
            t.not_before_ms = (delay > 0).then(|| self.at_ms.saturating_add(delay));
        }
        t.failures = failures;
        t.status.reason = reason;
        t.started_ms = None;
        let gpus = std::mem::take(&mut t.gpus);
        let now_final = t.status.state.is_final();
        if retry {
            self.tasks.enqueue(task);
        }
        self.grants().release(node, task, job, &gpus);
        if now_final {
            self.jobs.tasks_final(job, &[task], self.now_ms);
        }
        Outcome::TaskUpdated
    }

    /// Applies a slave's batch of reports in order; each is fenced as a single report is.
    pub(super) fn reports(&mut self, node: NodeId, reports: Vec<TaskReport>) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        let updated = reports
            .into_iter()
            .map(|r| self.report(node, r))
            .filter(|o| *o == Outcome::TaskUpdated)
            .count();
        if updated > 0 {
            Outcome::TaskUpdated
        } else {
            Outcome::Ignored("no report in the batch changed anything".into())
        }
    }

    /// One report of a batch.
    fn report(&mut self, node: NodeId, report: TaskReport) -> Outcome {
        match report {
            TaskReport::Started { task, attempt } => self.started(node, task, attempt),
            // A supervisor gone without a status: the attempt is lost (attempt + 1).
            TaskReport::Finished {
                task,
                attempt,
                reason: Some(TaskReason::Lost),
                ..
            } => self.lost(node, task, attempt),
            // The usage record is the accounting book's to keep; the task's state needs
            // only how it ended.
            TaskReport::Finished {
                task,
                attempt,
                exit_code,
                reason,
                reason_detail,
                usage: _,
            } => {
                let end = AttemptEnd {
                    exit_code,
                    reason,
                    reason_detail,
                };
                self.finished(node, task, attempt, end)
            }
            TaskReport::Compressed {
                task,
                attempt,
                cpu_milli,
                gpu_task,
            } => CpuRules {
                nodes: self.nodes,
                tasks: self.tasks,
                jobs: self.jobs,
            }
            .compress(node, task, attempt, cpu_milli, gpu_task),
            // S0.3: the slave asks to start a queued attempt (`promote`).
            TaskReport::WantsStart { task, attempt } => {
                let promoted = QueueRules {
                    nodes: self.nodes,
                    tasks: self.tasks,
                    jobs: self.jobs,
                }
                .promote_asked(node, task, attempt);
                if promoted {
                    Outcome::TaskUpdated
                } else {
                    Outcome::Ignored(format!("{task} attempt {attempt} not promoted"))
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "reports_tests.rs"]
mod tests;
