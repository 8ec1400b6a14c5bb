//! What a filtered listing of jobs and tasks may ask (the listings themselves are views,
//! `views.rs`), and why one cannot be answered.

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

/// A filter's state must be one of `allowed`.
pub(super) fn check_state(state: Option<&str>, allowed: &[&str]) -> Result<(), ListError> {
    match state {
        Some(s) if !allowed.contains(&s) => Err(ListError::Invalid(format!(
            "unknown state {s:?} (one of: {})",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}
