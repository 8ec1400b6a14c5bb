//! Slaves' reports of attempts starting and finishing, fenced by attempt number so a stale
//! report never counts.

use super::command::Outcome;
use super::model::Task;
use super::ClusterState;
use hetsched_common::protocol::TaskReport;
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason, TaskState};

impl ClusterState {
    /// The task's current attempt on `node`, if the report is about it (fencing).
    pub(super) fn current(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> Result<&Task, Outcome> {
        let t = self
            .tasks
            .get(&task)
            .ok_or_else(|| Outcome::Rejected(format!("unknown {task}")))?;
        if t.status.attempt != attempt || t.status.node != Some(node) {
            return Err(Outcome::Ignored(format!(
                "stale report: {task} is at attempt {} on {:?}",
                t.status.attempt, t.status.node
            )));
        }
        Ok(t)
    }

    pub(super) fn task_started(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        at_ms: u64,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let was_running = t.status.state == TaskState::Running;
        match t.status.start(attempt) {
            Ok(()) => {
                if !was_running || t.started_ms.is_none() {
                    t.started_ms = Some(at_ms);
                }
                self.start_queued(node, task);
                Outcome::TaskUpdated
            }
            Err(e) => Outcome::Ignored(e.to_string()),
        }
    }

    pub(super) fn task_finished(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        end: AttemptEnd,
        at_ms: u64,
    ) -> Outcome {
        let AttemptEnd {
            exit_code,
            reason,
            reason_detail,
        } = end;
        if self.release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        if exit_code != 0 {
            // The slave's observation (oom, cannot-start) wins over what the code implies.
            let o = self.attempt_failed(
                task,
                attempt,
                reason.or(TaskReason::of_exit_code(exit_code)),
                Some(exit_code),
                at_ms,
            );
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
        self.release(node, task, job, &gpus);
        if now_final {
            self.tasks_became_final(job, &[task]);
        }
        Outcome::TaskUpdated
    }

    /// Applies a slave's batch of reports in order; each is fenced as a single report is.
    pub(super) fn task_reports(
        &mut self,
        node: NodeId,
        reports: Vec<TaskReport>,
        at_ms: u64,
    ) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        let mut updated = 0usize;
        for r in reports {
            let o = match r {
                TaskReport::Started { task, attempt } => {
                    self.task_started(node, task, attempt, at_ms)
                }
                // A supervisor gone without a status: the attempt is lost (attempt + 1).
                TaskReport::Finished {
                    task,
                    attempt,
                    reason: Some(TaskReason::Lost),
                    ..
                } => self.task_lost(node, task, attempt),
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
                    self.task_finished(node, task, attempt, end, at_ms)
                }
                TaskReport::Compressed {
                    task,
                    attempt,
                    cpu_milli,
                    gpu_task,
                } => self.compress_task(node, task, attempt, cpu_milli, gpu_task),
                // S0.3: the slave asks to start a queued attempt (`promote`).
                TaskReport::WantsStart { task, attempt } => {
                    if self.promote_asked(node, task, attempt) {
                        Outcome::TaskUpdated
                    } else {
                        Outcome::Ignored(format!("{task} attempt {attempt} not promoted"))
                    }
                }
            };
            if o == Outcome::TaskUpdated {
                updated += 1;
            }
        }
        if updated > 0 {
            Outcome::TaskUpdated
        } else {
            Outcome::Ignored("no report in the batch changed anything".into())
        }
    }
}

/// How an attempt ended, as its slave reported it.
pub(super) struct AttemptEnd {
    /// The process's exit code (−N: killed by signal N).
    pub exit_code: i32,
    /// Why, as the slave saw it (`None` in older reports: the exit code decides).
    pub reason: Option<hetsched_common::TaskReason>,
    /// One human line beside the reason.
    pub reason_detail: Option<String>,
}
