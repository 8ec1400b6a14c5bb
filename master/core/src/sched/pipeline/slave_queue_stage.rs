//! SlaveQueueStage — S0.3 (docs/DESIGN.md, S0.3; `--queue-depth`): a task that fits
//! nowhere now and can preempt nothing waits in a slave's local queue, beyond that node's
//! free resources, and starts there as soon as the node has room (idle slaves steal from
//! long queues, S0.4, `sched::steal`).
//!
//! It is the last stage of the chain because a queued task holds no resources and only
//! waits: anything that runs it now — a free node, a preemption — is better. Engine choice
//! queues program tasks on their target engines' slaves with the same rule
//! (`stage::queue_node`).
//!
//! Fair share (issue 53): a slave queue fills with whoever was waiting when it had room, and
//! a slave starts its queue in order, so without more a user ahead in fair share who submits
//! a moment later would wait behind every queued task of a user behind it. When every queue
//! the task may use is full, a queued (not promoted) attempt of a user with a strictly lower
//! fair-share factor at the same S1 priority gives its place to the task: the plan takes it
//! back to the pending queue (`Plan::unqueue`, its slave drops it) and queues the task there.
//! The victim is the lowest factor's, latest in its queue (it would start last), on the
//! lowest node id on ties: the choice depends only on the state and the factors.

use super::context::Decision;
use super::stage::{queue_node, PendingTask, Scope, Stage, Step};
use crate::state::{Assign, ClusterState, TaskRef};
use hetsched_common::{NodeId, TaskState};
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// How a fair-share victim is chosen, least first: its user's factor, then the latest in its
/// queue, then the lower node id.
type VictimKey = (u64, Reverse<usize>, NodeId);

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

    /// Issue 53: with every queue `head` may use full, the queued attempt it takes the
    /// place of (see the module docs) and its queued assignment there; `None` when no queued
    /// task of a user behind it in fair share (`factors`, parts per billion, users absent:
    /// no usage, 1) at its priority sits on a node that could run it. `taken`: attempts
    /// this plan took back already.
    pub fn displace(
        &self,
        view: &ClusterState,
        head: &PendingTask<'_>,
        scope: &Scope<'_>,
        factors: &BTreeMap<String, u64>,
        taken: &[TaskRef],
    ) -> Option<(Assign, TaskRef)> {
        if self.depth == 0 || !head.req.gpu.is_none() || !head.req.engines.is_empty() {
            return None;
        }
        let factor = |user: &str| factors.get(user).copied().unwrap_or(1_000_000_000);
        let own = factor(&head.job.spec.user);
        let mut best: Option<(VictimKey, TaskRef)> = None;
        for n in view.nodes().values() {
            if !(n.takes_work() && scope.may_use(n.id) && n.capacity.fits(head.req)) {
                continue;
            }
            for (pos, q) in n.queued.iter().enumerate() {
                let Some(t) = view.tasks().get(q) else {
                    continue;
                };
                let Some(job) = view.jobs().get(&t.job) else {
                    continue;
                };
                let movable = t.status.state == TaskState::Assigned
                    && t.priority == head.t.priority
                    && job.candidates.is_empty()
                    && t.engine.is_none()
                    && !view.is_gang(t.job)
                    && !taken.iter().any(|r| r.task == *q);
                let f = factor(&job.spec.user);
                if !movable || f >= own {
                    continue;
                }
                let key = (f, Reverse(pos), n.id);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    let victim = TaskRef {
                        task: *q,
                        node: n.id,
                        attempt: t.status.attempt,
                    };
                    best = Some((key, victim));
                }
            }
        }
        let (_, victim) = best?;
        let assign = Assign {
            task: head.task,
            node: victim.node,
            queued: true,
            engine: None,
            borrowed: false,
        };
        Some((assign, victim))
    }
}

impl Stage for SlaveQueueStage {
    fn name(&self) -> &'static str {
        "slave-queue"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let queued_now = &step.decided.queued_now;
        match self.decide(step.view, step.head, &step.scope, queued_now) {
            Decision::Stuck => {
                // The queues are full: a user ahead in fair share may take a place in one
                // (a queue's length is unchanged by it, so `queued_now` stays an upper
                // bound). Otherwise the end of the chain says it is stuck.
                let factors = step.pools.fair_share()?;
                let taken = &step.decided.plan.unqueue;
                let (assign, victim) =
                    self.displace(step.view, step.head, &step.scope, factors, taken)?;
                step.decided.plan.unqueue.push(victim);
                Some(Decision::Assign(assign))
            }
            d => Some(d),
        }
    }
}

#[cfg(test)]
#[path = "slave_queue_stage_tests.rs"]
mod tests;
