//! FeasibilityStage — the nodes a task may use at all: the up nodes serving its job's
//! partition, within its job's locality (`--nodes`), and for a container job (issue 52,
//! `--image`) only nodes whose slave runs containers.
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

/// The node sets feasibility reads: per partition, the up nodes serving it (`None`: every
/// up node does), and the up nodes that run containers.
#[derive(Debug, Default)]
pub(super) struct PartitionSets {
    by_name: BTreeMap<String, Option<Candidates>>,
    containers: Candidates,
}

impl PartitionSets {
    /// The set of `partition` (`None`: no up node serves it; `Some(None)`: every one does).
    fn get(&self, partition: &str) -> Option<&Option<Candidates>> {
        self.by_name.get(partition)
    }
}

/// Feasibility by partition: the up nodes serving each partition, as a locality
/// constraint for the index; `None` where every up node serves it (no constraint). And the
/// up nodes that run containers (issue 52).
pub(super) fn partition_candidates(view: &ClusterState) -> PartitionSets {
    let up: Vec<&Node> = view.nodes().values().filter(|n| n.takes_work()).collect();
    let mut names: BTreeSet<&str> = BTreeSet::from(["default"]);
    for n in &up {
        names.extend(n.partitions.iter().map(String::as_str));
    }
    let by_name = names
        .into_iter()
        .map(|p| {
            let serving: Candidates = up.iter().filter(|n| n.serves(p)).map(|n| n.id).collect();
            let all = serving.len() == up.len();
            (p.to_string(), (!all).then_some(serving))
        })
        .collect();
    let containers = up
        .iter()
        .filter(|n| n.runs_containers())
        .map(|n| n.id)
        .collect();
    PartitionSets {
        by_name,
        containers,
    }
}

/// What [`PartitionSets`] depend on of one node: whether it takes work, its partitions,
/// whether it runs containers.
type BuiltFrom = (bool, Vec<String>, bool);

fn built_from(n: &Node) -> BuiltFrom {
    (n.takes_work(), n.partitions.clone(), n.runs_containers())
}

/// [`partition_candidates`] kept across plans. The sets depend only on which nodes take
/// work and their partitions, so they are rebuilt when a node's pair differs from the one
/// they were built from (the scheduler reports every node an applied entry touched, as it
/// does for the index); derived data, like the index, dropped on reset.
#[derive(Debug, Default)]
pub(super) struct PartitionCache {
    sets: Option<Arc<PartitionSets>>,
    /// Per node: what the sets depend on ([`BuiltFrom`]) when `sets` was built.
    built_from: BTreeMap<NodeId, BuiltFrom>,
}

impl PartitionCache {
    /// `node` may have changed in `view`: drops the sets when what they depend on did.
    pub fn node_changed(&mut self, view: &ClusterState, node: NodeId) {
        if self.sets.is_none() {
            return;
        }
        let now = view.nodes().get(&node).map(built_from);
        let same = self.built_from.get(&node) == now.as_ref();
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
            .map(|n| (n.id, built_from(n)))
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
    /// Locality sets (within the job's partition; for a container job, of the nodes that
    /// run containers), built once per job per plan.
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
        let container = job.spec.image.is_some();
        if (container || !job.candidates.is_empty()) && !self.localities.contains_key(&job.id) {
            let containers = &self.partitions.containers;
            let base = if job.candidates.is_empty() {
                containers.as_slice()
            } else {
                &job.candidates[..]
            };
            let within: Candidates = base
                .iter()
                .copied()
                .filter(|n| !container || containers.contains(*n))
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
