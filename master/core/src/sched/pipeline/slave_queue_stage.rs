//! SlaveQueueStage — S0.3 (docs/DESIGN.md, S0.3; `--queue-depth`): a task that fits
//! nowhere now and can preempt nothing waits in a slave's local queue, beyond that node's
//! free resources, and starts there as soon as the node has room (idle slaves steal from
//! long queues, S0.4, `sched::steal`).
//!
//! It is the last stage of the chain because a queued task holds no resources and only
//! waits: anything that runs it now — a free node, a preemption — is better. Engine choice
//! queues program tasks on their target engines' slaves with the same rule
//! (`stage::queue_node`).

use super::context::Decision;
use super::stage::{queue_node, PendingTask, Scope, Stage, Step};
use crate::state::{Assign, ClusterState};
use hetsched_common::NodeId;
use std::collections::BTreeMap;

/// The slave-queue stage: the queue depth.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlaveQueueStage {
    /// Most queued assignments per node (0: no slave queues).
    pub depth: u32,
}

impl SlaveQueueStage {
    /// The task queued on the node [`queue_node`] picks among those its `scope` permits,
    /// or stuck when there is none.
    pub fn decide(
        &self,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
        queued_now: &BTreeMap<NodeId, u32>,
    ) -> Decision {
        let may_use = |n: NodeId| scope.may_use(n);
        match queue_node(self.depth, view, head.req, &may_use, queued_now, None) {
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

impl Stage for SlaveQueueStage {
    fn name(&self) -> &'static str {
        "slave-queue"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let queued_now = &step.decided.queued_now;
        match self.decide(step.view, step.head, &step.scope, queued_now) {
            Decision::Stuck => None, // the end of the chain says it
            d => Some(d),
        }
    }
}

#[cfg(test)]
#[path = "slave_queue_stage_tests.rs"]
mod tests;
