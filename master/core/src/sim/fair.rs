//! The simulator's fair share (issue 53, `sim --fairshare-half-life`): the leader's rule on
//! the virtual clock. Each ended attempt charges its user its dominant share of the
//! cluster's capacity times its run time, decayed with the half-life
//! ([`AccountingBook::charge`]); before each plan the scheduler is handed every user's
//! factor ([`AccountingBook::fair_share`], the priority configuration's `[shares]`), as
//! the leader hands it before each of its plans.

use crate::sched::multiqueue::{cluster_capacity, DrfUsage};
use crate::state::{AccountingBook, ClusterState};
use hetsched_common::protocol::AttemptRecord;
use hetsched_common::TaskId;
use std::collections::BTreeMap;

/// Fair share's part of a simulated run.
pub(super) struct FairShare {
    half_life_ms: u64,
    book: AccountingBook,
    /// Running attempts' starts (virtual ms).
    started: BTreeMap<TaskId, u64>,
}

impl FairShare {
    /// Fair share with half-life `half_life_ms` (virtual time).
    pub fn new(half_life_ms: u64) -> Self {
        Self {
            half_life_ms,
            book: AccountingBook::default(),
            started: BTreeMap::new(),
        }
    }

    /// `task` started at `now_ms`.
    pub fn started(&mut self, task: TaskId, now_ms: u64) {
        self.started.insert(task, now_ms);
    }

    /// `task`'s attempt ended at `now_ms` (finished or stopped): its user is charged.
    pub fn ended(&mut self, view: &ClusterState, task: TaskId, now_ms: u64) {
        let Some(from) = self.started.remove(&task) else {
            return;
        };
        let Some(job) = view
            .tasks()
            .get(&task)
            .and_then(|t| view.jobs().get(&t.job))
        else {
            return;
        };
        let share = DrfUsage::of(&job.spec.resources).dominant_share(&cluster_capacity(view));
        let seconds = now_ms.saturating_sub(from) as f64 / 1000.0;
        let r = AttemptRecord {
            user: job.spec.user.clone(),
            ended_ms: now_ms,
            dominant_s: Some(share as f64 / 1e9 * seconds),
            ..Default::default()
        };
        self.book.charge(&r, self.half_life_ms);
    }

    /// Every user's factor at `now_ms`, for the next plan.
    pub fn factors(&self, view: &ClusterState, now_ms: u64) -> BTreeMap<String, f64> {
        self.book
            .fair_share(now_ms, self.half_life_ms, &view.priority().shares)
            .into_iter()
            .map(|f| (f.user, f.factor))
            .collect()
    }
}
