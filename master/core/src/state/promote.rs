//! S0.3 promotion: the leader, not the slave, decides when a task queued on a slave starts.
//!
//! A queued assignment holds nothing of its node until it is *promoted*: it moves from the
//! node's queue into its tasks and takes its resources, in the replicated state, before the
//! slave may start it (docs/DESIGN.md, S0.3). That happens when room frees on the node
//! (`promote_queued`, in the log's queue order) or when the slave asks for it
//! (`TaskReport::WantsStart`, batched with its reports, in the slave's order). Either way the
//! room must be there *and unpromised*: the cores a compression holds for a GPU task are not
//! in `free` already, and what a preemptor waiting for its victims to stop needs on that node
//! (its reservation, S1 × S4.5) is left to it. The leader answers the slave's asks from the
//! state once the batch committed (`promoted`), so a slave never runs more than the leader
//! promised.

use super::ClusterState;
use hetsched_common::{Attempt, NodeId, ResourceRequest, TaskId, TaskState};

impl ClusterState {
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
            if let Some(j) = self.jobs.get(&t.job) {
                cpu = cpu.saturating_add(j.spec.resources.cpu_milli);
                mem = mem.saturating_add(j.spec.resources.mem_mib);
            }
        }
        (cpu, mem)
    }

    /// Whether a queued task asking `req` may take room on `node` now: it fits the node's
    /// free resources beside what is promised to waiting preemptors there.
    pub(super) fn room_for_queued(&self, node: NodeId, req: &ResourceRequest) -> bool {
        let Some(n) = self.nodes.get(&node) else {
            return false;
        };
        let (cpu, mem) = self.promised_room(node);
        n.free.fits(req)
            && n.free.cpu_milli >= req.cpu_milli.saturating_add(cpu)
            && n.free.mem_mib >= req.mem_mib.saturating_add(mem)
    }

    /// The queued attempt (task, attempt) of `node`, if it is one still waiting there, with
    /// what it asks.
    fn waiting(&self, node: NodeId, task: TaskId, attempt: Attempt) -> Option<ResourceRequest> {
        let t = self.current(node, task, attempt).ok()?;
        if t.status.state != TaskState::Assigned {
            return None;
        }
        let n = self.nodes.get(&node)?;
        if !n.queued.contains(&task) {
            return None;
        }
        self.jobs.get(&t.job).map(|j| j.spec.resources.clone())
    }

    /// S0.3: `node`'s slave asks to start its queued attempt (task, attempt): it takes its
    /// resources now if the unpromised room is there. Returns whether it changed anything
    /// (a stale ask, one already promoted, or one without room changes nothing).
    pub(super) fn promote_asked(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> bool {
        let Some(req) = self.waiting(node, task, attempt) else {
            return false;
        };
        if !self.room_for_queued(node, &req) {
            return false;
        }
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        let Some(gpus) = n.free.take(&req) else {
            return false;
        };
        n.queued.retain(|t| *t != task);
        n.tasks.insert(task);
        if let Some(t) = self.tasks.get_mut(&task) {
            t.gpus = gpus;
        }
        true
    }

    /// Of the attempts `node`'s slave asked to start, those it may start: the current
    /// attempt there, holding its resources (promoted, or never queued), not ended.
    pub fn promoted(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> Vec<(TaskId, Attempt)> {
        let Some(n) = self.nodes.get(&node) else {
            return Vec::new();
        };
        asks.iter()
            .copied()
            .filter(|(task, attempt)| {
                n.tasks.contains(task)
                    && !n.queued.contains(task)
                    && self.current(node, *task, *attempt).is_ok_and(|t| {
                        matches!(t.status.state, TaskState::Assigned | TaskState::Running)
                    })
            })
            .collect()
    }

    /// Whether committing these asks would promote at least one attempt now (the leader
    /// proposes asks that come without reports only then, so a slave asking again each
    /// heartbeat adds nothing to the log while nothing frees).
    pub fn promotable(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> bool {
        asks.iter().any(|(task, attempt)| {
            self.waiting(node, *task, *attempt)
                .is_some_and(|req| self.room_for_queued(node, &req))
        })
    }
}
