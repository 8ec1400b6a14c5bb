//! Slave queues (S0.3) and work stealing (S0.4) as the log sees them: tasks queued on a slave
//! beyond its free resources, their promotion when room frees, and a committed steal moving one
//! to another slave with the next attempt.

use super::command::Outcome;
use super::command::TaskRef;
use super::model::partition_of;
use super::ClusterState;
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason, TaskState};

impl ClusterState {
    /// S0.3: queued tasks of `node` whose resources are free now (and promised to no
    /// waiting preemptor) take them, head first (the head blocks those behind it, as in the
    /// slave's own queue). The slave learns of it when it next asks (`promote`).
    pub(super) fn promote_queued(&mut self, node: NodeId) {
        loop {
            let Some(n) = self.nodes.get(&node) else {
                return;
            };
            let Some(&head) = n.queued.first() else {
                return;
            };
            let req = self
                .tasks
                .get(&head)
                .and_then(|t| self.jobs.get(&t.job))
                .map(|j| j.spec.resources.clone());
            let Some(req) = req else {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.queued.remove(0);
                }
                continue;
            };
            // Room promised to a waiting preemptor stays its own (`promote`).
            if !self.room_for_queued(node, &req) {
                return;
            }
            let Some(n) = self.nodes.get_mut(&node) else {
                return;
            };
            let Some(gpus) = n.free.take(&req) else {
                return;
            };
            n.queued.remove(0);
            n.tasks.insert(head);
            if let Some(t) = self.tasks.get_mut(&head) {
                t.gpus = gpus;
            }
        }
    }

    /// A queued task of `node` started on its slave before its turn here (the slave's
    /// queue order, or its view of its cores, can differ from the log's): it takes its
    /// resources now if they are free. If not, it moves to the head of the queue, holding
    /// nothing here, and takes them first once they free up (`promote_queued`): the node's
    /// free vector stays capacity minus what its tasks hold, never below it, so no shortfall
    /// is forgotten (and over-reported as free) when grants come back.
    pub(super) fn start_queued(&mut self, node: NodeId, task: TaskId) {
        let req = self
            .tasks
            .get(&task)
            .and_then(|t| self.jobs.get(&t.job))
            .map(|j| j.spec.resources.clone());
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
        match n.free.take(&req) {
            Some(gpus) => {
                n.queued.remove(pos);
                n.tasks.insert(task);
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.gpus = gpus;
                }
            }
            None => {
                n.queued.remove(pos);
                n.queued.insert(0, task);
            }
        }
    }

    /// S0.4: `from` released the queued `attempt` of `task`; it moves to `to` with the next
    /// attempt. Stale (the task is no longer that queued attempt on `from`): ignored, the victim's
    /// release changed nothing the log holds. A thief that can no longer take it (gone,
    /// draining, full, wrong partition): the task goes back to pending with attempt + 1, so
    /// the released attempt is never the one that runs.
    pub(super) fn steal_task(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        from: NodeId,
        to: NodeId,
    ) -> Outcome {
        let queued_there = self
            .nodes
            .get(&from)
            .is_some_and(|n| n.queued.contains(&task));
        // Promoted meanwhile (`promote`) but, as the victim's release says, never started:
        // it gives its room back there.
        let promoted_there = self
            .nodes
            .get(&from)
            .is_some_and(|n| n.tasks.contains(&task));
        let Some(t) = self.tasks.get(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if !(queued_there || promoted_there)
            || t.status.state != TaskState::Assigned
            || t.status.attempt != attempt
            || t.status.node != Some(from)
        {
            return Outcome::Ignored(format!("stale steal: {task} is no longer queued on {from}"));
        }
        let job = t.job;
        let Some(j) = self.jobs.get(&job) else {
            return Outcome::Rejected(format!("unknown {job}"));
        };
        let req = j.spec.resources.clone();
        let partition = partition_of(&j.spec).to_string();
        let allowed = j.candidates.is_empty() || j.candidates.contains(&to);
        if promoted_there {
            let gpus = self
                .tasks
                .get_mut(&task)
                .map(|t| std::mem::take(&mut t.gpus))
                .unwrap_or_default();
            self.release(from, task, job, &gpus);
            // The next attempt starts at what the job asks for (a live change, S3.2, may
            // have reached the unstarted one).
            if let Some(t) = self.tasks.get_mut(&task) {
                t.cpu_milli = None;
                t.compressed = false;
            }
        } else if let Some(n) = self.nodes.get_mut(&from) {
            n.queued.retain(|x| *x != task);
        }
        let released = TaskRef {
            task,
            node: from,
            attempt,
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if let Err(e) = t.status.requeue_because(TaskReason::Lost) {
            return Outcome::Ignored(e.to_string());
        }
        t.started_ms = None;
        let fits = self.nodes.get(&to).is_some_and(|n| {
            n.id != from && n.takes_work() && n.serves(&partition) && n.free.fits(&req)
        });
        let grant = if fits && allowed {
            self.nodes.get_mut(&to).and_then(|n| n.free.take(&req))
        } else {
            None
        };
        let Some(gpus) = grant else {
            self.tasks.enqueue(task);
            return Outcome::Stolen {
                from: released,
                assigned: None,
            };
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let new_attempt = match t.status.assign(to) {
            Ok(a) => a,
            Err(e) => return Outcome::Ignored(e.to_string()),
        };
        t.gpus = gpus;
        t.attempt_nodes.insert(new_attempt, to);
        if let Some(n) = self.nodes.get_mut(&to) {
            n.tasks.insert(task);
            n.steals_in += 1;
        }
        if let Some(n) = self.nodes.get_mut(&from) {
            n.steals_out += 1;
        }
        Outcome::Stolen {
            from: released,
            assigned: Some(TaskRef {
                task,
                node: to,
                attempt: new_attempt,
            }),
        }
    }
}
