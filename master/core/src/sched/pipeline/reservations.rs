//! Preemptors' reservations (S1 × S4.5, docs/DESIGN.md): kept at the start of each plan,
//! before any stage runs.
//!
//! One index reservation per preemptor waiting for its victims to stop, on the node it
//! preempted: the resources the victims give back are seen by that preemptor alone, so
//! lower-priority pending tasks (the victims themselves, typically) cannot take them first
//! and set off another round of preemption. Kept before the stages so that every stage of
//! the plan — engine choice, selection, take-back — sees those nodes as held.

use crate::sched::index::PlacementIndex;
use crate::state::ClusterState;
use hetsched_common::{NodeId, ResourceRequest, TaskId, TaskState};
use std::collections::{BTreeMap, BTreeSet};

/// Brings `index`'s reservations in line with `view`'s waiting preemptors: drops those
/// whose preemptor no longer waits (or waits elsewhere), adds the missing ones. `reserved`:
/// the nodes holding one, kept in step.
pub(super) fn sync(
    index: &mut PlacementIndex,
    reserved: &mut BTreeSet<NodeId>,
    view: &ClusterState,
) {
    let desired: BTreeMap<NodeId, (TaskId, &ResourceRequest)> = view
        .awaiting()
        .iter()
        .filter_map(|(task, (node, _))| {
            let t = view.tasks().get(task)?;
            if t.status.state != TaskState::Pending {
                return None;
            }
            Some((*node, (*task, view.job_resources(t.job)?)))
        })
        .collect();
    for node in std::mem::take(reserved) {
        let holder = index.reservation(node).map(|r| r.task);
        match desired.get(&node) {
            Some((task, _)) if holder == Some(*task) => {
                reserved.insert(node);
            }
            _ => {
                index.unreserve(node);
            }
        }
    }
    for (node, (task, req)) in desired {
        if index.reserve(node, task, req).is_ok() {
            reserved.insert(node);
        }
    }
}

#[cfg(test)]
#[path = "reservations_tests.rs"]
mod tests;
