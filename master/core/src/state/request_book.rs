//! The request book: client request de-duplication. Each request id's outcome is kept
//! (compactly) for the retry window, so a retried request applies once and is answered as
//! the first time; `GcJobs` forgets outcomes older than its cut-offs: automatic ids after
//! the retry window, ids made from a user's idempotency key
//! ([`ClientRequestId::is_keyed`]) after their own (24 h). It owns the outcomes, their
//! order in time (derived, rebuilt on restore) and the legacy map of snapshots written
//! before compact outcomes existed; nothing else in the state reads them.

use super::command::Outcome;
use hetsched_common::{ClientRequestId, JobId, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Outcomes of client requests already applied, by request id and in time order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestBook {
    /// Outcomes by request id.
    recent: BTreeMap<ClientRequestId, RecentRequest>,
    /// Snapshots written before compact request outcomes existed carry this; it is folded
    /// into `recent` on restore and never written again.
    legacy: BTreeMap<ClientRequestId, Outcome>,
    /// The automatic ids of `recent` in time order (derived).
    by_time: BTreeSet<(u64, ClientRequestId)>,
    /// The keyed ids of `recent` in time order (derived).
    keyed_by_time: BTreeSet<(u64, ClientRequestId)>,
}

impl RequestBook {
    /// The book a snapshot describes; [`rebuild`](Self::rebuild) must follow.
    pub(super) fn from_snapshot(
        recent: BTreeMap<ClientRequestId, RecentRequest>,
        legacy: BTreeMap<ClientRequestId, Outcome>,
    ) -> Self {
        Self {
            recent,
            legacy,
            by_time: BTreeSet::new(),
            keyed_by_time: BTreeSet::new(),
        }
    }

    /// The outcomes as a snapshot writes them.
    pub(super) fn recent(&self) -> &BTreeMap<ClientRequestId, RecentRequest> {
        &self.recent
    }

    /// The legacy outcomes as a snapshot writes them (empty once rebuilt).
    pub(super) fn legacy(&self) -> &BTreeMap<ClientRequestId, Outcome> {
        &self.legacy
    }

    /// What a retry of `request` is answered with, if it applied and is remembered.
    pub(super) fn outcome_of(&self, request: ClientRequestId) -> Option<Outcome> {
        self.recent.get(&request).map(|r| r.outcome.expand())
    }

    /// Whether a client request id has applied (and its outcome is still remembered).
    pub fn applied(&self, request: ClientRequestId) -> bool {
        self.recent.contains_key(&request)
    }

    /// Remembers `request`'s outcome, applied at `at_ms`.
    pub(super) fn record(&mut self, request: ClientRequestId, at_ms: u64, outcome: &Outcome) {
        self.recent.insert(
            request,
            RecentRequest {
                at_ms,
                outcome: RequestOutcome::compact(outcome),
            },
        );
        self.order_mut(request).insert((at_ms, request));
    }

    /// The time order `request` belongs to.
    fn order_mut(&mut self, request: ClientRequestId) -> &mut BTreeSet<(u64, ClientRequestId)> {
        if request.is_keyed() {
            &mut self.keyed_by_time
        } else {
            &mut self.by_time
        }
    }

    /// Forgets the automatic outcomes recorded before `cut` and the keyed ones recorded
    /// before `keyed_cut` (`None`, as in a log written before keyed ids existed: before
    /// `cut` too); returns how many.
    pub(super) fn forget_before(&mut self, cut: u64, keyed_cut: Option<u64>) -> u64 {
        let keyed_cut = keyed_cut.unwrap_or(cut);
        let due: Vec<(u64, ClientRequestId)> = (self.by_time.range(..(cut, ClientRequestId(0))))
            .chain(self.keyed_by_time.range(..(keyed_cut, ClientRequestId(0))))
            .copied()
            .collect();
        let mut forgotten = 0;
        for key in due {
            self.order_mut(key.1).remove(&key);
            if self.recent.remove(&key.1).is_some() {
                forgotten += 1;
            }
        }
        forgotten
    }

    /// Whether an automatic outcome was recorded before `cut`, or a keyed one before
    /// `keyed_cut`.
    pub(super) fn any_before(&self, cut: u64, keyed_cut: Option<u64>) -> bool {
        self.by_time.first().is_some_and(|r| r.0 < cut)
            || (self.keyed_by_time.first()).is_some_and(|r| r.0 < keyed_cut.unwrap_or(cut))
    }

    /// How many keyed outcomes are remembered.
    pub fn keyed(&self) -> usize {
        self.keyed_by_time.len()
    }

    /// Folds the legacy outcomes in (as applied at `at_ms`, the snapshot's clock) and
    /// rebuilds the time order.
    pub(super) fn rebuild(&mut self, at_ms: u64) {
        for (req, o) in std::mem::take(&mut self.legacy) {
            self.recent.entry(req).or_insert(RecentRequest {
                at_ms,
                outcome: RequestOutcome::compact(&o),
            });
        }
        let (keyed, automatic) = self.recent.iter().partition(|(r, _)| r.is_keyed());
        let order = |m: BTreeMap<&ClientRequestId, &RecentRequest>| {
            m.into_iter().map(|(r, v)| (v.at_ms, *r)).collect()
        };
        self.by_time = order(automatic);
        self.keyed_by_time = order(keyed);
    }
}

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
    /// The compact form of `o`.
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

#[cfg(test)]
#[path = "request_book_tests.rs"]
mod tests;
