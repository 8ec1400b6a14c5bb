//! FeasibilityStage — the nodes a task may use at all: the up nodes serving its job's
//! partition, within its job's locality (`--nodes`).
//!
//! The rest of feasibility (resources, GPU model) is the S4 index's: this stage's [`Scope`]
//! becomes the index query's candidate constraint in selection, and what engine choice,
//! take-back, preemption and the slave queue are limited to. It sits right after the queue
//! stage because every later stage needs it; its partition sets are kept across plans and
//! rebuilt only when a node joins, leaves, starts or stops taking work or changes its
//! partitions ([`PartitionCache`]: rebuilding them per plan was a sixth of a plan's cost on
//! a trace that barely queues), its locality sets built once per job per plan, not once per
//! task.

use super::stage::Scope;
use crate::sched::index::Candidates;
use crate::state::{partition_of, ClusterState, Job, Node};
use hetsched_common::{JobId, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Per partition, the up nodes serving it (`None`: every up node does).
pub(super) type PartitionSets = BTreeMap<String, Option<Candidates>>;

/// Feasibility by partition: the up nodes serving each partition, as a locality
/// constraint for the index; `None` where every up node serves it (no constraint).
pub(super) fn partition_candidates(view: &ClusterState) -> PartitionSets {
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

/// [`partition_candidates`] kept across plans. The sets depend only on which nodes take
/// work and their partitions, so they are rebuilt when a node's pair differs from the one
/// they were built from (the scheduler reports every node an applied entry touched, as it
/// does for the index); derived data, like the index, dropped on reset.
#[derive(Debug, Default)]
pub(super) struct PartitionCache {
    sets: Option<Arc<PartitionSets>>,
    /// Per node: whether it took work and its partitions when `sets` was built.
    built_from: BTreeMap<NodeId, (bool, Vec<String>)>,
}

impl PartitionCache {
    /// `node` may have changed in `view`: drops the sets when what they depend on did.
    pub fn node_changed(&mut self, view: &ClusterState, node: NodeId) {
        if self.sets.is_none() {
            return;
        }
        let now = view
            .nodes()
            .get(&node)
            .map(|n| (n.takes_work(), &n.partitions));
        let same = match (self.built_from.get(&node), now) {
            (Some((w, p)), Some((w2, p2))) => *w == w2 && p == p2,
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.sets = None;
        }
    }

    /// Forgets the sets (a rebuild of everything derived follows).
    pub fn clear(&mut self) {
        self.sets = None;
    }

    /// The sets of `view`, built when they were dropped.
    pub fn sets(&mut self, view: &ClusterState) -> Arc<PartitionSets> {
        if let Some(s) = &self.sets {
            return Arc::clone(s);
        }
        self.built_from = view
            .nodes()
            .values()
            .map(|n| (n.id, (n.takes_work(), n.partitions.clone())))
            .collect();
        let s = Arc::new(partition_candidates(view));
        self.sets = Some(Arc::clone(&s));
        s
    }
}

/// The feasibility stage's sets for one plan.
#[derive(Debug)]
pub(super) struct Feasibility {
    /// [`partition_candidates`] of the plan's view.
    partitions: Arc<PartitionSets>,
    /// Locality sets (within the job's partition), built once per job per plan.
    localities: BTreeMap<JobId, Candidates>,
    /// No node at all (a partition no up node serves).
    empty: Candidates,
}

impl Feasibility {
    /// The sets of a plan over `view`.
    #[cfg(test)]
    pub fn new(view: &ClusterState) -> Self {
        Self::with(Arc::new(partition_candidates(view)))
    }

    /// The sets of a plan whose partition sets are `partitions`.
    pub fn with(partitions: Arc<PartitionSets>) -> Self {
        Self {
            partitions,
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
        Scope::new(self.localities.get(&job.id), partition, &self.empty)
    }

    /// The scope of `job` once [`scope`](Self::scope) built its sets this plan, read-only
    /// (what the parallel groups read from their threads, `parallel.rs`).
    pub fn scope_built(&self, job: &Job) -> Scope<'_> {
        let partition = self.partitions.get(partition_of(&job.spec));
        Scope::new(self.localities.get(&job.id), partition, &self.empty)
    }
}

#[cfg(test)]
#[path = "feasibility_stage_tests.rs"]
mod tests;
