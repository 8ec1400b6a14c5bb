//! Filtered listings of jobs and tasks for clients: newest first, by job, state and user,
//! limited. Read-only views of the state.

use super::ClusterState;
use hetsched_common::protocol::{JobInfo, ListFilter, TaskInfo};
use hetsched_common::TaskState;

/// Why a listing cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// The job asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The filter is invalid (an unknown state).
    #[error("{0}")]
    Invalid(String),
}

/// Job states a filter may name.
pub const JOB_STATES: [&str; 5] = ["pending", "running", "succeeded", "failed", "cancelled"];

/// Task states a filter may name.
pub const TASK_STATES: [TaskState; 6] = [
    TaskState::Pending,
    TaskState::Assigned,
    TaskState::Running,
    TaskState::Succeeded,
    TaskState::Failed,
    TaskState::Cancelled,
];

fn check_state(state: Option<&str>, allowed: &[&str]) -> Result<(), ListError> {
    match state {
        Some(s) if !allowed.contains(&s) => Err(ListError::Invalid(format!(
            "unknown state {s:?} (one of: {})",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

impl ClusterState {
    /// Jobs matching `f`, newest first.
    pub fn list_jobs(&self, f: &ListFilter) -> Result<Vec<JobInfo>, ListError> {
        check_state(f.state.as_deref(), &JOB_STATES)?;
        if let Some(j) = f.job {
            if !self.jobs.contains_key(&j) {
                return Err(ListError::NotFound(self.job_missing_message(j)));
            }
        }
        let limit = f.limit.map_or(usize::MAX, |l| l as usize);
        Ok(self
            .jobs
            .values()
            .rev()
            .filter(|j| f.job.is_none_or(|id| id == j.id))
            .filter(|j| f.user.as_ref().is_none_or(|u| *u == j.spec.user))
            .map(|j| self.job_info(j))
            .filter(|j| f.state.as_ref().is_none_or(|s| *s == j.state))
            .take(limit)
            .collect())
    }

    /// Tasks matching `f`, newest first.
    pub fn list_tasks(&self, f: &ListFilter) -> Result<Vec<TaskInfo>, ListError> {
        let names: Vec<&str> = TASK_STATES.iter().map(|s| s.as_str()).collect();
        check_state(f.state.as_deref(), &names)?;
        let limit = f.limit.map_or(usize::MAX, |l| l as usize);
        let keep = |t: &&super::Task| {
            f.state
                .as_ref()
                .is_none_or(|s| s == t.status.state.as_str())
                && f.user
                    .as_ref()
                    .is_none_or(|u| self.jobs.get(&t.job).is_some_and(|j| j.spec.user == *u))
        };
        let tasks: Vec<TaskInfo> = match f.job {
            Some(j) => {
                let job = self
                    .jobs
                    .get(&j)
                    .ok_or_else(|| ListError::NotFound(self.job_missing_message(j)))?;
                job.tasks
                    .iter()
                    .rev()
                    .filter_map(|t| self.tasks.get(t))
                    .filter(keep)
                    .take(limit)
                    .map(|t| self.task_info(t))
                    .collect()
            }
            None => self
                .tasks
                .values()
                .rev()
                .filter(keep)
                .take(limit)
                .map(|t| self.task_info(t))
                .collect(),
        };
        Ok(tasks)
    }
}
