//! What a task holds on its node, and how it is given back. A grant lives in two books at
//! once: the node's free resources, task set and slave queue (`NodeBook`), and the task's
//! devices, live CPU allocation and booked engine unit (`TaskBook`); its size is the request
//! of the task's job (`JobBook`, read only). Every rule that takes a task off its node (a
//! finish, a loss, a cancel, a drain, a stop after preemption) gives the grant back here, so
//! both sides change by the same amount and `free` stays capacity minus what is held.

use super::command::TaskRef;
use super::job_book::JobBook;
use super::node_book::NodeBook;
use super::slave_queue::QueueRules;
use super::task_book::TaskBook;
use hetsched_common::{Attempt, GpuAlloc, JobId, NodeId, TaskId, TaskReason};

/// The grants of tasks on nodes. Spans the node and task books, which each hold one side of
/// a grant, and reads the job book for its size.
pub(super) struct Grants<'a> {
    /// Free resources, task sets, queues, stopping attempts.
    pub nodes: &'a mut NodeBook,
    /// Devices, CPU allocations and bookings of attempts; the pending queue.
    pub tasks: &'a mut TaskBook,
    /// What each job's tasks ask for.
    pub jobs: &'a JobBook,
}

impl Grants<'_> {
    /// Takes a task off `node`: its grant returns to the node (which may promote the head
    /// of its queue into the room, S0.3), or it leaves the node's queue if it was queued;
    /// cores held for it by compressions return too.
    pub(super) fn release(&mut self, node: NodeId, task: TaskId, job: JobId, gpus: &GpuAlloc) {
        let Some(mut req) = self.jobs.resources(job).cloned() else {
            return;
        };
        if let Some(c) = self.tasks.get(&task).and_then(|t| t.cpu_milli) {
            req.cpu_milli = c;
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.tasks.remove(&task) {
                n.free.give_back(&req, gpus, &n.capacity);
                let booked = self.tasks.get_mut(&task).and_then(|t| t.booked.take());
                self.nodes.unbook(node, booked);
                self.queue().promote_queued(node);
            } else {
                n.queued.retain(|t| *t != task);
            }
        }
        self.nodes.end_reserves_for(node, task);
    }

    /// A stopping (preempted) attempt ended: its resources return to the node. Returns
    /// whether it was one.
    pub(super) fn release_stopping(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        let Some(i) = n
            .stopping
            .iter()
            .position(|s| s.task == task && s.attempt == attempt)
        else {
            return false;
        };
        let s = n.stopping.remove(i);
        if let Some(mut req) = self.jobs.resources(s.job).cloned() {
            if let Some(c) = s.cpu_milli {
                req.cpu_milli = c;
            }
            n.free.give_back(&req, &s.gpus, &n.capacity);
        }
        self.nodes.unbook(node, s.booked);
        self.nodes.end_reserves_for(node, task);
        true
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

    /// Re-queues every task on `node`, held or queued (node lost, drain deadline); returns
    /// the attempts that ended.
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

    /// The slave-queue rules over the same books.
    fn queue(&mut self) -> QueueRules<'_> {
        QueueRules {
            nodes: self.nodes,
            tasks: self.tasks,
            jobs: self.jobs,
        }
    }
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
