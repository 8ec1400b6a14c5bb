//! Node lifecycle in the log: registration (and re-registration), down and up, and putting a
//! lost node's tasks back in the queue with the next attempt.

use super::command::Outcome;
use super::command::TaskRef;
use super::model::NodeLiveness;
use super::ClusterState;
use hetsched_common::{Attempt, GpuAlloc, JobId, NodeId, TaskId, TaskReason};

impl ClusterState {
    pub(super) fn node_down(&mut self, node: NodeId) -> Outcome {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if n.liveness == NodeLiveness::Down {
            return Outcome::Ignored("node already down".into());
        }
        n.liveness = NodeLiveness::Down;
        let stopping: Vec<(TaskId, Attempt)> =
            n.stopping.iter().map(|s| (s.task, s.attempt)).collect();
        for (t, a) in stopping {
            self.release_stopping(node, t, a);
        }
        let requeued = self.requeue_node(node, TaskReason::Lost);
        Outcome::NodeDown { node, requeued }
    }

    /// Takes a task off its node (releasing its grant) and puts it back in the queue.
    /// Returns the attempt that was lost.
    pub(super) fn requeue(&mut self, task: TaskId, reason: TaskReason) -> Option<TaskRef> {
        let t = self.tasks.get_mut(&task)?;
        let node = t.status.node?;
        let attempt = t.status.attempt;
        t.status.requeue_because(reason).ok()?;
        let gpus = std::mem::take(&mut t.gpus);
        let job = t.job;
        self.release(node, task, job, &gpus);
        self.tasks.enqueue(task);
        Some(TaskRef {
            task,
            node,
            attempt,
        })
    }

    /// Re-queues every task on `node` (node lost, drain deadline); returns the attempts
    /// that ended.
    pub(super) fn requeue_node(&mut self, node: NodeId, reason: TaskReason) -> Vec<TaskRef> {
        let held: Vec<TaskId> = self
            .nodes
            .get(&node)
            .map(|n| n.tasks.iter().chain(n.queued.iter()).copied().collect())
            .unwrap_or_default();
        held.into_iter()
            .filter_map(|t| self.requeue(t, reason))
            .collect()
    }

    pub(super) fn release(&mut self, node: NodeId, task: TaskId, job: JobId, gpus: &GpuAlloc) {
        let Some(mut req) = self.jobs.get(&job).map(|j| j.spec.resources.clone()) else {
            return;
        };
        if let Some(c) = self.tasks.get(&task).and_then(|t| t.cpu_milli) {
            req.cpu_milli = c;
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.tasks.remove(&task) {
                n.free.give_back(&req, gpus, &n.capacity);
                let booked = self.tasks.get_mut(&task).and_then(|t| t.booked.take());
                self.unbook(node, booked);
                self.promote_queued(node);
            } else {
                n.queued.retain(|t| *t != task);
            }
        }
        self.end_reserves_for(node, task);
    }

    pub(super) fn task_lost(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if self.release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.requeue(task, TaskReason::Lost) {
            Some(_) => Outcome::TaskUpdated,
            None => Outcome::Ignored(format!("{task} was not assigned or running")),
        }
    }
}
