//! S0.3 slave queues and promotion: the leader, not the slave, decides when a task queued on
//! a slave starts.
//!
//! A queued assignment (beyond the node's free resources) holds nothing of its node until it
//! is *promoted*: it moves from the node's queue into its tasks and takes its resources, in
//! the replicated state, before the slave may start it (docs/DESIGN.md, S0.3). That happens
//! when room frees on the node ([`QueueRules::promote_queued`], in the log's queue order) or
//! when the slave asks for it (`TaskReport::WantsStart`, batched with its reports, in the
//! slave's order). Either way the room must be there *and unpromised*: the cores a
//! compression holds for a GPU task are not in `free` already, and what a preemptor waiting
//! for its victims to stop needs on that node (its reservation, S1 × S4.5) is left to it.
//! The leader answers the slave's asks from the state once the batch committed
//! ([`QueueView::promoted`]), so a slave never runs more than the leader promised.

use super::job_book::JobBook;
use super::model::Task;
use super::node_book::NodeBook;
use super::task_book::TaskBook;
use hetsched_common::{Attempt, NodeId, ResourceRequest, TaskId, TaskState};

/// What the queue rules read: which queued attempts may take room now. Spans the node book
/// (queues, free room), the task book (attempts, waiting preemptors) and the job book (what
/// each asks for).
#[derive(Clone, Copy)]
pub(super) struct QueueView<'a> {
    /// Queues and free room.
    pub nodes: &'a NodeBook,
    /// Attempts and waiting preemptors.
    pub tasks: &'a TaskBook,
    /// Requests.
    pub jobs: &'a JobBook,
}

impl QueueView<'_> {
    /// CPU and memory that preemptors waiting on `node` for their victims to stop will take
    /// there: promotions leave them alone.
    fn promised_room(&self, node: NodeId) -> (u64, u64) {
        let mut cpu = 0u64;
        let mut mem = 0u64;
        for (task, (n, _)) in self.tasks.awaiting() {
            if *n != node {
                continue;
            }
            let Some(t) = self.tasks.get(task) else {
                continue;
            };
            if t.status.state != TaskState::Pending {
                continue;
            }
            if let Some(r) = self.jobs.resources(t.job) {
                cpu = cpu.saturating_add(r.cpu_milli);
                mem = mem.saturating_add(r.mem_mib);
            }
        }
        (cpu, mem)
    }

    /// Whether a queued task asking `req` may take room on `node` now: it fits the node's
    /// free resources beside what is promised to waiting preemptors there.
    fn room_for_queued(&self, node: NodeId, req: &ResourceRequest) -> bool {
        let Some(n) = self.nodes.get(&node) else {
            return false;
        };
        let (cpu, mem) = self.promised_room(node);
        n.free.fits(req)
            && n.free.cpu_milli >= req.cpu_milli.saturating_add(cpu)
            && n.free.mem_mib >= req.mem_mib.saturating_add(mem)
    }

    /// What the queued task `task` asks, if it has a job.
    fn request_of(&self, task: &TaskId) -> Option<ResourceRequest> {
        self.tasks
            .get(task)
            .and_then(|t| self.jobs.resources(t.job))
            .cloned()
    }

    /// The queued attempt (task, attempt) of `node`, if it is one still waiting there, with
    /// what it asks.
    fn waiting(&self, node: NodeId, task: TaskId, attempt: Attempt) -> Option<ResourceRequest> {
        let t = self.tasks.current(node, task, attempt).ok()?;
        if t.status.state != TaskState::Assigned {
            return None;
        }
        let n = self.nodes.get(&node)?;
        if !n.queued.contains(&task) {
            return None;
        }
        self.jobs.resources(t.job).cloned()
    }

    /// Of the attempts `node`'s slave asked to start, those it may start: the current
    /// attempt there, holding its resources (promoted, or never queued), not ended.
    pub(super) fn promoted(
        &self,
        node: NodeId,
        asks: &[(TaskId, Attempt)],
    ) -> Vec<(TaskId, Attempt)> {
        let Some(n) = self.nodes.get(&node) else {
            return Vec::new();
        };
        let live = |t: &Task| matches!(t.status.state, TaskState::Assigned | TaskState::Running);
        asks.iter()
            .copied()
            .filter(|(task, attempt)| {
                n.tasks.contains(task)
                    && !n.queued.contains(task)
                    && self.tasks.current(node, *task, *attempt).is_ok_and(live)
            })
            .collect()
    }

    /// Whether committing these asks would promote at least one attempt now.
    pub(super) fn promotable(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> bool {
        asks.iter().any(|(task, attempt)| {
            self.waiting(node, *task, *attempt)
                .is_some_and(|req| self.room_for_queued(node, &req))
        })
    }
}

/// The queue rules: promotions into the room a node has. Spans the node book (its queue
/// and free resources) and the task book (the promoted attempt's devices), reading the job
/// book for sizes: a promotion moves a task from a node's queue into its tasks and takes
/// the task's request from its free resources at once.
pub(super) struct QueueRules<'a> {
    /// Queues and free room.
    pub nodes: &'a mut NodeBook,
    /// Attempts (their devices) and waiting preemptors.
    pub tasks: &'a mut TaskBook,
    /// Requests.
    pub jobs: &'a JobBook,
}

impl QueueRules<'_> {
    /// The same books, read only.
    fn view(&self) -> QueueView<'_> {
        QueueView {
            nodes: self.nodes,
            tasks: self.tasks,
            jobs: self.jobs,
        }
    }

    /// Moves queued `task` into `node`'s tasks with `req` taken from its free resources;
    /// false (nothing changed) when it does not fit.
    fn take_room(&mut self, node: NodeId, task: TaskId, req: &ResourceRequest) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        let Some(gpus) = n.free.take(req) else {
            return false;
        };
        if let Some(pos) = n.queued.iter().position(|t| *t == task) {
            n.queued.remove(pos);
        }
        n.tasks.insert(task);
        if let Some(t) = self.tasks.get_mut(&task) {
            t.gpus = gpus;
        }
        true
    }

    /// Queued tasks of `node` whose resources are free now (and promised to no waiting
    /// preemptor) take them, head first (the head blocks those behind it, as in the slave's
    /// own queue). The slave learns of it when it next asks (`promote`).
    pub(super) fn promote_queued(&mut self, node: NodeId) {
        loop {
            let Some(&head) = self.nodes.get(&node).and_then(|n| n.queued.first()) else {
                return;
            };
            let Some(req) = self.view().request_of(&head) else {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.queued.remove(0);
                }
                continue;
            };
            // Room promised to a waiting preemptor stays its own.
            if !self.view().room_for_queued(node, &req) || !self.take_room(node, head, &req) {
                return;
            }
        }
    }

    /// A queued task of `node` started on its slave before its turn here (the slave's
    /// queue order, or its view of its cores, can differ from the log's): it takes its
    /// resources now if they are free. If not, it moves to the head of the queue, holding
    /// nothing here, and takes them first once they free up ([`promote_queued`]
    /// (Self::promote_queued)): the node's free vector stays capacity minus what its tasks
    /// hold, never below it, so no shortfall is forgotten (and over-reported as free) when
    /// grants come back.
    pub(super) fn start_queued(&mut self, node: NodeId, task: TaskId) {
        let req = self.view().request_of(&task);
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let Some(pos) = n.queued.iter().position(|t| *t == task) else {
            return;
        };
        let Some(req) = req else {
            n.queued.remove(pos);
            n.tasks.insert(task);
            return;
        };
        if !self.take_room(node, task, &req) {
            if let Some(n) = self.nodes.get_mut(&node) {
                n.queued.remove(pos);
                n.queued.insert(0, task);
            }
        }
    }

    /// `node`'s slave asks to start its queued attempt (task, attempt): it takes its
    /// resources now if the unpromised room is there. Returns whether it changed anything
    /// (a stale ask, one already promoted, or one without room changes nothing).
    pub(super) fn promote_asked(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> bool {
        let view = self.view();
        let Some(req) = view.waiting(node, task, attempt) else {
            return false;
        };
        view.room_for_queued(node, &req) && self.take_room(node, task, &req)
    }
}

#[cfg(test)]
#[path = "slave_queue_tests.rs"]
mod tests;
