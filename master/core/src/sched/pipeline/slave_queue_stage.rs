//! SlaveQueueStage — S0.3 (docs/DESIGN.md, S0.3; `--queue-depth`): a task that fits
//! nowhere now and can preempt nothing waits in a slave's local queue, beyond that node's
//! free resources, and starts there as soon as the node has room (idle slaves steal from
//! long queues, S0.4, `sched::steal`).
//!
//! It is the last stage of the chain because a queued task holds no resources and only
//! waits: anything that runs it now — a free node, a preemption — is better. Engine choice
//! also uses it, to queue a program task on one of its target engines' slaves.

use super::context::Decision;
use super::feasibility_stage::Scope;
use super::queue_stage::PendingTask;
use crate::state::{Assign, ClusterState, Node};
use hetsched_common::{NodeId, ResourceRequest};
use std::collections::BTreeMap;

/// The slave-queue stage: the queue depth.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlaveQueueStage {
    /// Most queued assignments per node (0: no slave queues).
    pub depth: u32,
}

impl SlaveQueueStage {
    /// The node where `req` may wait in the local queue: one the task may use (`allowed`),
    /// that could run it at all, with room in its queue (counting `queued_now`, this plan's
    /// queued assignments); the shortest queue first, ties to the lower id. Only tasks that
    /// ask no devices or engine counts queue (devices are granted at assignment). `among`:
    /// restrict to these nodes.
    pub fn node(
        &self,
        view: &ClusterState,
        req: &ResourceRequest,
        allowed: &dyn Fn(NodeId) -> bool,
        queued_now: &BTreeMap<NodeId, u32>,
        among: Option<&[NodeId]>,
    ) -> Option<NodeId> {
        if self.depth == 0 || !req.gpu.is_none() || !req.engines.is_empty() {
            return None;
        }
        let depth = self.depth as usize;
        let len = |n: &Node| n.queued.len() + queued_now.get(&n.id).copied().unwrap_or(0) as usize;
        view.nodes()
            .values()
            .filter(|n| among.is_none_or(|a| a.contains(&n.id)))
            .filter(|n| n.takes_work() && allowed(n.id) && n.capacity.fits(req) && len(n) < depth)
            .min_by_key(|n| (len(n), n.id))
            .map(|n| n.id)
    }

    /// The task queued on the node [`node`](Self::node) picks among those its `scope`
    /// permits, or stuck when there is none.
    pub fn decide(
        &self,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
        queued_now: &BTreeMap<NodeId, u32>,
    ) -> Decision {
        let may_use = |n: NodeId| scope.may_use(n);
        match self.node(view, head.req, &may_use, queued_now, None) {
            Some(node) => Decision::Assign(Assign {
                task: head.task,
                node,
                queued: true,
                engine: None,
                borrowed: false,
            }),
            None => Decision::Stuck,
        }
    }
}

#[cfg(test)]
#[path = "slave_queue_stage_tests.rs"]
mod tests;
