//! Client request de-duplication: each request id's outcome is kept (compactly) for the
//! retry window, so a retried request applies once and is answered as the first time.

use super::*;
use hetsched_common::{JobId, TaskId};
use serde::{Deserialize, Serialize};

/// A client request's outcome, kept in compact form for retries (docs/CONTRACT.md, Retention):
/// a `Submitted` of 100,000 tasks is a job id, its first task id and a count, since a job's
/// task ids are consecutive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOutcome {
    /// A job was submitted: tasks `first_task .. first_task + count`.
    Submitted {
        /// Job.
        job: JobId,
        /// Its first task id.
        first_task: TaskId,
        /// Number of tasks.
        count: u32,
    },
    /// A job was cancelled.
    Cancelled {
        /// Job.
        job: JobId,
        /// Tasks that went to cancelled.
        tasks: u32,
    },
    /// Anything else, kept whole.
    Other(Outcome),
}

impl RequestOutcome {
    pub(super) fn compact(o: &Outcome) -> Self {
        match o {
            // A retried placed submission is answered as submitted: its placements applied
            // (or not) the first time and are dispatched from there.
            Outcome::Submitted { job, tasks } | Outcome::SubmittedPlaced { job, tasks, .. } => {
                let consecutive = tasks.windows(2).all(|w| w[1].0 == w[0].0 + 1);
                match (tasks.first(), consecutive) {
                    (Some(first), true) => RequestOutcome::Submitted {
                        job: *job,
                        first_task: *first,
                        count: tasks.len() as u32,
                    },
                    _ => RequestOutcome::Other(o.clone()),
                }
            }
            Outcome::Cancelled { job, tasks, .. } => RequestOutcome::Cancelled {
                job: *job,
                tasks: *tasks,
            },
            o => RequestOutcome::Other(o.clone()),
        }
    }

    /// The outcome a retried request is answered with. A retried cancel stops nothing:
    /// the first application already did.
    pub fn expand(&self) -> Outcome {
        match self {
            RequestOutcome::Submitted {
                job,
                first_task,
                count,
            } => Outcome::Submitted {
                job: *job,
                tasks: (0..*count as u64)
                    .map(|i| TaskId(first_task.0 + i))
                    .collect(),
            },
            RequestOutcome::Cancelled { job, tasks } => Outcome::Cancelled {
                job: *job,
                tasks: *tasks,
                stop: Vec::new(),
            },
            RequestOutcome::Other(o) => o.clone(),
        }
    }
}

/// One remembered client request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRequest {
    /// Leader's clock when it applied.
    pub at_ms: u64,
    /// What it returned.
    pub outcome: RequestOutcome,
}
