//! Node lifecycle in the log: registration (and re-registration), down and up, and putting a
//! lost node's tasks back in the queue with the next attempt.

use super::*;
use hetsched_common::{Attempt, GpuAlloc, JobId, NodeId, TaskId, TaskReason};
use std::collections::{BTreeMap, BTreeSet};

impl ClusterState {
    pub(super) fn register_node(&mut self, registration: Command) -> Outcome {
        let Command::RegisterNode {
            key,
            node: claimed,
            name,
            addr,
            capacity,
            labels,
            partitions,
        } = registration
        else {
            return Outcome::Rejected("not a registration".into());
        };
        let known = self.node_keys.get(&key).copied();
        if let (Some(c), Some(k)) = (claimed, known) {
            if c != k {
                return Outcome::Rejected(format!(
                    "registration key belongs to {k}, not the claimed {c}"
                ));
            }
        }
        match known {
            Some(id) => {
                let Some(n) = self.nodes.get_mut(&id) else {
                    return Outcome::Rejected(format!("{id} is missing from the node table"));
                };
                n.name = name;
                n.addr = addr;
                n.labels = labels;
                n.partitions = partitions;
                n.liveness = NodeLiveness::Up;
                // A node's capacity can only change while it holds nothing: its free vector
                // is capacity minus its tasks' grants and its stopping (preempted) attempts'
                // holdings, and must stay consistent. A slave agent restarted while
                // preempted attempts still stop there holds no tasks but still those.
                if n.tasks.is_empty() && n.queued.is_empty() && n.stopping.is_empty() {
                    n.free = capacity.clone();
                    n.capacity = capacity;
                }
                Outcome::Registered { node: id }
            }
            None => {
                self.next_node += 1;
                let id = NodeId(self.next_node);
                self.node_keys.insert(key, id);
                self.nodes.insert(
                    id,
                    Node {
                        id,
                        key,
                        name,
                        addr,
                        labels,
                        free: capacity.clone(),
                        capacity,
                        liveness: NodeLiveness::Up,
                        tasks: BTreeSet::new(),
                        partitions,
                        stopping: Vec::new(),
                        drain: None,
                        compress_reserves: Vec::new(),
                        queued: Vec::new(),
                        steals_in: 0,
                        steals_out: 0,
                        booked: BTreeMap::new(),
                    },
                );
                Outcome::Registered { node: id }
            }
        }
    }

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

    pub(super) fn node_up(&mut self, node: NodeId) -> Outcome {
        match self.nodes.get_mut(&node) {
            Some(n) if n.liveness == NodeLiveness::Down => {
                n.liveness = NodeLiveness::Up;
                Outcome::NodeUp { node }
            }
            Some(_) => Outcome::Ignored("node already up".into()),
            None => Outcome::Rejected(format!("unknown {node}")),
        }
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
        self.pending.insert(task);
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
