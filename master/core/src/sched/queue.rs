//! S1 — queue order: the pending tasks, higher priority first, then in submission order
//! (a lower task id was submitted earlier). Sits before feasibility so that, when room is
//! short, the most important work is placed first and only it may preempt.

use crate::state::ClusterState;
use hetsched_common::TaskId;
use std::cmp::Reverse;

/// Pending tasks in the order the scheduler considers them.
pub fn queue_order(view: &ClusterState) -> Vec<TaskId> {
    let mut keyed: Vec<(Reverse<i64>, TaskId)> = view
        .pending()
        .iter()
        .map(|t| {
            (
                Reverse(view.tasks().get(t).map_or(i64::MIN, |t| t.priority)),
                *t,
            )
        })
        .collect();
    // Already in id order: a stable sort by priority alone keeps submission order.
    keyed.sort_by_key(|k| k.0);
    keyed.into_iter().map(|k| k.1).collect()
}
