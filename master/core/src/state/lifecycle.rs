//! Operator- and failure-driven ends of attempts: a node lost, a drain's deadline, a job or
//! a task cancelled. Pure like the rest of `apply`: time comes only from commands' `at_ms`,
//! and the leader asks [`ClusterState::drains_due`](super::ClusterState::drains_due) with
//! its clock which drains are due.
//!
//! ```text
//! node lost: its attempts (held or queued) ─▶ pending, attempt + 1 (reason lost)
//! node draining: no new placements; at the deadline its attempts ─▶ pending (reason drained)
//! cancel: pending, assigned or running ─▶ cancelled; a held grant is given back
//! ```

use super::command::{Command, Outcome, TaskRef};
use super::grants::Grants;
use super::job_book::JobBook;
use super::node_book::NodeBook;
use super::task_book::TaskBook;
use hetsched_common::{JobId, NodeId, TaskId, TaskReason, TaskState};

/// The life-cycle rules. Spans the node book (a node's liveness and drain, and the grants
/// its tasks give back), the task book (the attempts that end) and the job book (a job
/// whose tasks are all cancelled is finished).
pub(super) struct LifecycleRules<'a> {
    /// Liveness, drains, grants.
    pub nodes: &'a mut NodeBook,
    /// Attempts and the pending queue.
    pub tasks: &'a mut TaskBook,
    /// Open counts.
    pub jobs: &'a mut JobBook,
    /// The state's clock: a job whose last task ends finishes then.
    pub now_ms: u64,
}

impl LifecycleRules<'_> {
    /// Applies `NodeDown`, `RequeueDrained`, `CancelJob` or `CancelTask`.
    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::NodeDown { node } => self.node_down(node),
            Command::RequeueDrained { node } => self.requeue_drained(node),
            Command::CancelJob { job } => self.cancel_job(job),
            Command::CancelTask { task } => self.cancel_task(task),
            _ => Outcome::Rejected("not a life-cycle command".into()),
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

    /// A node is lost: what stops there gives its holdings back, and its attempts go back
    /// to the queue with the next attempt.
    pub(super) fn node_down(&mut self, node: NodeId) -> Outcome {
        let stopping = match self.nodes.down(node) {
            Ok(s) => s,
            Err(o) => return o,
        };
        for (t, a) in stopping {
            self.grants().release_stopping(node, t, a);
        }
        let requeued = self.grants().requeue_node(node, TaskReason::Lost);
        Outcome::NodeDown { node, requeued }
    }

    /// A draining node's deadline passed: what still runs there goes back to the queue.
    pub(super) fn requeue_drained(&mut self, node: NodeId) -> Outcome {
        let Some(n) = self.nodes.get(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if n.drain.is_none() {
            return Outcome::Ignored(format!("{node} is not draining"));
        }
        let requeued = self.grants().requeue_node(node, TaskReason::Drained);
        Outcome::Drained { node, requeued }
    }

    /// Cancels every task of `job` not final yet; those on a node are to be stopped.
    pub(super) fn cancel_job(&mut self, job: JobId) -> Outcome {
        let Some(j) = self.jobs.get(&job) else {
            return Outcome::Rejected(format!("unknown {job}"));
        };
        let mut cancelled = Vec::new();
        let mut stop = Vec::new();
        for t in j.tasks.clone() {
            if let Some(on_node) = self.cancel_one(t) {
                cancelled.push(t);
                stop.extend(on_node);
            }
        }
        self.jobs.tasks_final(job, &cancelled, self.now_ms);
        Outcome::Cancelled {
            job,
            tasks: cancelled.len() as u32,
            stop,
        }
    }

    /// Cancels one task (none when it is final already).
    pub(super) fn cancel_task(&mut self, task: TaskId) -> Outcome {
        let Some(job) = self.tasks.get(&task).map(|t| t.job) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let Some(on_node) = self.cancel_one(task) else {
            return Outcome::Cancelled {
                job,
                tasks: 0,
                stop: Vec::new(),
            };
        };
        self.jobs.tasks_final(job, &[task], self.now_ms);
        Outcome::Cancelled {
            job,
            tasks: 1,
            stop: on_node.into_iter().collect(),
        }
    }

    /// Cancels `task` unless it is final or unknown (`None`): it leaves the queue
    /// and the waiting preemptors, and an attempt on a node gives its grant back and is
    /// returned, to be stopped there.
    fn cancel_one(&mut self, task: TaskId) -> Option<Option<TaskRef>> {
        let t = self.tasks.get_mut(&task)?;
        let was = t.status.clone();
        t.status.cancel().ok()?;
        t.status.reason = Some(TaskReason::Cancelled);
        t.not_before_ms = None;
        let job = t.job;
        let on_node = match (was.state, was.node) {
            (TaskState::Assigned | TaskState::Running, Some(node)) => {
                Some((node, std::mem::take(&mut t.gpus)))
            }
            _ => None,
        };
        self.tasks.dequeue(&task);
        self.tasks.stop_awaiting(&task);
        let Some((node, gpus)) = on_node else {
            return Some(None);
        };
        self.grants().release(node, task, job, &gpus);
        Some(Some(TaskRef {
            task,
            node,
            attempt: was.attempt,
        }))
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
