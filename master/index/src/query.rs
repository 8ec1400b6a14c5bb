//! What a search is asked: a task's request plus its constraints (docs/DESIGN.md §S4.3–5).

use super::coord::DimOrder;
use hetsched_common::{NodeId, ResourceRequest, TaskId};

/// A locality constraint: the nodes a task may run on, sorted and deduplicated so that
/// membership is a binary search and a uniform draw is one index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidates(Vec<NodeId>);

impl Candidates {
    /// Whether `node` is a candidate.
    #[inline]
    pub fn contains(&self, node: NodeId) -> bool {
        self.0.binary_search(&node).is_ok()
    }

    /// The candidates, ascending.
    pub fn as_slice(&self) -> &[NodeId] {
        &self.0
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (then nothing fits).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<NodeId> for Candidates {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Self {
        let mut v: Vec<NodeId> = iter.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        Self(v)
    }
}

/// One placement question.
///
/// Categorical requirements live in the request itself: `request.gpu.models` (the trace's
/// `gpu_spec`, e.g. `V100M16|V100M32`) and `request.engines` (engine kinds and counts).
#[derive(Clone, Copy, Debug)]
pub struct PlacementQuery<'a> {
    /// What the task needs.
    pub request: &'a ResourceRequest,
    /// Dimension order of the comparison (most significant first).
    pub order: DimOrder,
    /// Locality constraint; `None` means any node.
    pub candidates: Option<&'a Candidates>,
    /// The task asking, so that nodes reserved for it are seen whole.
    pub task: Option<TaskId>,
}

impl<'a> PlacementQuery<'a> {
    /// A query for `request` in canonical order, with no constraints.
    pub fn new(request: &'a ResourceRequest) -> Self {
        Self {
            request,
            order: DimOrder::CANONICAL,
            candidates: None,
            task: None,
        }
    }

    /// Compare dimensions in `order`.
    pub fn with_order(mut self, order: DimOrder) -> Self {
        self.order = order;
        self
    }

    /// Only these nodes.
    pub fn with_candidates(mut self, candidates: &'a Candidates) -> Self {
        self.candidates = Some(candidates);
        self
    }

    /// Asked by `task` (sees its reservations whole).
    pub fn for_task(mut self, task: TaskId) -> Self {
        self.task = Some(task);
        self
    }
}
