//! A task's life: its states, the transitions the state machine allows, and the status
//! each task carries (attempt, node, exit code, reason). Split from `spec.rs`, which keeps
//! what a job asks for.

use crate::{Attempt, NodeId, TaskReason};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Waiting in the global queue.
    Pending,
    /// Placed on a node, not yet reported started.
    Assigned,
    /// Its process runs.
    Running,
    /// Exited with code 0.
    Succeeded,
    /// Exited non-zero (or could not start).
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl TaskState {
    /// Whether the task has ended for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled
        )
    }

    /// Lowercase name, as in `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Assigned => "assigned",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused transition of the task state machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("task cannot go from {from} to {to}")]
pub struct TransitionError {
    /// State the task was in.
    pub from: TaskState,
    /// State that was asked for.
    pub to: TaskState,
}

/// The task state machine: state plus where and which attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// Current state.
    pub state: TaskState,
    /// Node of the current attempt (while assigned or running, and kept after it ends).
    pub node: Option<NodeId>,
    /// Current attempt, starting at 1 on first assignment (0 = never assigned).
    pub attempt: Attempt,
    /// Exit code once finished.
    pub exit_code: Option<i32>,
    /// Why the last attempt ended (`None` for a normal exit or while it runs): docs/CONTRACT.md's
    /// vocabulary. Kept while a lost or preempted task waits for its next attempt.
    #[serde(default)]
    pub reason: Option<TaskReason>,
    /// One human line beside `reason` (which job a `dependency` end followed, which image
    /// step failed); `None` when there is nothing to add. Left out of the encoding when unset,
    /// so snapshots written before it existed encode (and hash) the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_detail: Option<String>,
}

impl Default for TaskStatus {
    fn default() -> Self {
        Self::new()
    }
}

impl TaskStatus {
    /// A fresh pending task.
    pub fn new() -> Self {
        Self {
            state: TaskState::Pending,
            node: None,
            attempt: 0,
            exit_code: None,
            reason: None,
            reason_detail: None,
        }
    }

    fn refuse(&self, to: TaskState) -> TransitionError {
        TransitionError {
            from: self.state,
            to,
        }
    }

    /// pending → assigned(node, attempt + 1). Returns the new attempt.
    pub fn assign(&mut self, node: NodeId) -> Result<Attempt, TransitionError> {
        if self.state != TaskState::Pending {
            return Err(self.refuse(TaskState::Assigned));
        }
        self.state = TaskState::Assigned;
        self.node = Some(node);
        self.attempt += 1;
        self.reason = None;
        self.reason_detail = None;
        Ok(self.attempt)
    }

    /// assigned → running (only for the current attempt; running → running is a no-op).
    pub fn start(&mut self, attempt: Attempt) -> Result<(), TransitionError> {
        match self.state {
            TaskState::Assigned | TaskState::Running if attempt == self.attempt => {
                self.state = TaskState::Running;
                Ok(())
            }
            _ => Err(self.refuse(TaskState::Running)),
        }
    }

    /// assigned | running → succeeded | failed(code), for the current attempt; the reason is
    /// the one the exit code implies ([`TaskReason::of_exit_code`]).
    pub fn finish(&mut self, attempt: Attempt, exit_code: i32) -> Result<(), TransitionError> {
        self.finish_because(attempt, exit_code, TaskReason::of_exit_code(exit_code))
    }

    /// As [`finish`](Self::finish), with the reason the slave observed (`oom`,
    /// `cannot-start`, …). A non-zero code never ends `succeeded`, whatever the reason.
    pub fn finish_because(
        &mut self,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
    ) -> Result<(), TransitionError> {
        let to = if exit_code == 0 {
            TaskState::Succeeded
        } else {
            TaskState::Failed
        };
        if attempt != self.attempt
            || !matches!(self.state, TaskState::Assigned | TaskState::Running)
        {
            return Err(self.refuse(to));
        }
        self.state = to;
        self.exit_code = Some(exit_code);
        self.reason = if exit_code == 0 {
            reason
        } else {
            reason.or(TaskReason::of_exit_code(exit_code))
        };
        self.reason_detail = None;
        Ok(())
    }

    /// Adds the human line that goes with the reason just recorded (a finish report's
    /// `reason_detail`, the job a `dependency` end followed). Every transition clears it, so
    /// it always belongs to the current `reason`.
    pub fn explain_reason(&mut self, detail: Option<String>) {
        self.reason_detail = detail;
    }

    /// assigned | running → pending (its node was lost or it was preempted); the next
    /// assignment gets attempt + 1.
    pub fn requeue(&mut self) -> Result<(), TransitionError> {
        self.requeue_because(TaskReason::Lost)
    }

    /// As [`requeue`](Self::requeue), recording why the attempt ended (`lost`, `preempted`,
    /// `drained`).
    pub fn requeue_because(&mut self, reason: TaskReason) -> Result<(), TransitionError> {
        if !matches!(self.state, TaskState::Assigned | TaskState::Running) {
            return Err(self.refuse(TaskState::Pending));
        }
        self.state = TaskState::Pending;
        self.node = None;
        self.reason = Some(reason);
        self.reason_detail = None;
        Ok(())
    }

    /// any non-final state → cancelled.
    pub fn cancel(&mut self) -> Result<(), TransitionError> {
        if self.state.is_final() {
            return Err(self.refuse(TaskState::Cancelled));
        }
        self.state = TaskState::Cancelled;
        self.reason = Some(TaskReason::Cancelled);
        self.reason_detail = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn happy_path() {
        let mut t = TaskStatus::new();
        assert_eq!(t.assign(NodeId(3)), Ok(1));
        t.start(1).expect("start");
        t.finish(1, 0).expect("finish");
        assert_eq!(t.state, TaskState::Succeeded);
        assert_eq!(t.exit_code, Some(0));
    }

    #[test]
    fn lost_task_comes_back_with_next_attempt_and_stale_reports_are_refused() {
        let mut t = TaskStatus::new();
        t.assign(NodeId(1)).expect("assign");
        t.start(1).expect("start");
        t.requeue().expect("requeue");
        assert_eq!(t.state, TaskState::Pending);
        assert_eq!(t.assign(NodeId(2)), Ok(2));
        assert!(
            t.finish(1, 0).is_err(),
            "a stale attempt must not finish the task"
        );
        assert!(t.start(1).is_err());
        t.finish(2, 7).expect("finish");
        assert_eq!(t.state, TaskState::Failed);
    }

    #[test]
    fn final_states_are_final() {
        let mut t = TaskStatus::new();
        t.cancel().expect("cancel");
        assert!(t.assign(NodeId(1)).is_err());
        assert!(t.cancel().is_err());
        assert!(t.requeue().is_err());
    }
}
