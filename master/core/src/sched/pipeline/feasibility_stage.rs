//! FeasibilityStage — the nodes a task may use at all: the up nodes serving its job's
//! partition, within its job's locality (`--nodes`).
//!
//! The rest of feasibility (resources, GPU model) is the S4 index's: this stage's [`Scope`]
//! becomes the index query's candidate constraint in selection, and what engine choice,
//! take-back, preemption and the slave queue are limited to. It sits right after the queue
//! stage because every later stage needs it; its sets are built once per plan (partitions)
//! and once per job per plan (localities), not once per task.

use crate::sched::index::Candidates;
use crate::state::{partition_of, ClusterState, Job, Node};
use hetsched_common::{JobId, NodeId};
use std::collections::{BTreeMap, BTreeSet};

/// Feasibility by partition: the up nodes serving each partition, as a locality
/// constraint for the index; `None` where every up node serves it (no constraint).
pub(super) fn partition_candidates(view: &ClusterState) -> BTreeMap<String, Option<Candidates>> {
    let up: Vec<&Node> = view.nodes().values().filter(|n| n.takes_work()).collect();
    let mut names: BTreeSet<&str> = BTreeSet::from(["default"]);
    for n in &up {
        names.extend(n.partitions.iter().map(String::as_str));
    }
    names
        .into_iter()
        .map(|p| {
            let serving: Candidates = up.iter().filter(|n| n.serves(p)).map(|n| n.id).collect();
            let all = serving.len() == up.len();
            (p.to_string(), (!all).then_some(serving))
        })
        .collect()
}

/// The feasibility stage's sets for one plan.
#[derive(Debug)]
pub(super) struct Feasibility {
    /// [`partition_candidates`] of the plan's view.
    partitions: BTreeMap<String, Option<Candidates>>,
    /// Locality sets (within the job's partition), built once per job per plan.
    localities: BTreeMap<JobId, Candidates>,
    /// No node at all (a partition no up node serves).
    empty: Candidates,
}

/// Where one job's tasks may go.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scope<'a> {
    /// The job's locality within its partition (`None`: the job names no nodes).
    locality: Option<&'a Candidates>,
    /// Its partition's nodes: `None` when no up node serves it, `Some(None)` when every
    /// up node does.
    partition: Option<&'a Option<Candidates>>,
    empty: &'a Candidates,
}

impl Feasibility {
    /// The sets of a plan over `view`.
    pub fn new(view: &ClusterState) -> Self {
        Self {
            partitions: partition_candidates(view),
            localities: BTreeMap::new(),
            empty: Candidates::default(),
        }
    }

    /// Where `job`'s tasks may go (its locality set built at its first task of the plan).
    pub fn scope(&mut self, job: &Job) -> Scope<'_> {
        let partition = self.partitions.get(partition_of(&job.spec));
        if !job.candidates.is_empty() && !self.localities.contains_key(&job.id) {
            let within: Candidates = job
                .candidates
                .iter()
                .copied()
                .filter(|n| match partition {
                    Some(Some(c)) => c.contains(*n),
                    Some(None) => true,
                    None => false,
                })
                .collect();
            self.localities.insert(job.id, within);
        }
        Scope {
            locality: self.localities.get(&job.id),
            partition,
            empty: &self.empty,
        }
    }
}

impl<'a> Scope<'a> {
    /// The job's locality set (`None`: it names no nodes); preemption applies the
    /// partition itself.
    pub fn locality(&self) -> Option<&'a Candidates> {
        self.locality
    }

    /// The candidate constraint for the index (`None`: any node taking work).
    pub fn allowed(&self) -> Option<&'a Candidates> {
        match (self.locality, self.partition) {
            (Some(c), _) | (None, Some(Some(c))) => Some(c),
            (None, Some(None)) => None,
            // No up node serves the partition.
            (None, None) => Some(self.empty),
        }
    }

    /// Whether the job's tasks may use `node`.
    pub fn may_use(&self, node: NodeId) -> bool {
        match (self.locality, self.partition) {
            (Some(c), _) | (None, Some(Some(c))) => c.contains(node),
            (None, Some(None)) => true,
            (None, None) => false,
        }
    }
}

#[cfg(test)]
#[path = "feasibility_stage_tests.rs"]
mod tests;
