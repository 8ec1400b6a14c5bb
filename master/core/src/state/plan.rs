//! Applying a scheduler's plan: every assignment and preemption re-checked against the current
//! state (a stale one is refused, as Nomad's plan applier does), quota usage for S1, and the
//! stops a preemption starts.

use super::command::Assign;
use super::command::Outcome;
use super::command::Plan;
use super::command::Preemption;
use super::command::TaskRef;
use super::cpu_changes::CpuSearchPhase;
use super::model::partition_of;
use super::model::Stopping;
use super::ClusterState;
use hetsched_common::priority::{Principal, Usage};
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason, TaskState};
use std::collections::BTreeSet;

impl ClusterState {
    /// Re-checks every assignment against the current state (optimistic concurrency, as
    /// Nomad's plan applier does): a task no longer pending, a node down or unknown, or
    /// resources no longer free make that assignment stale; the rest apply.
    pub(super) fn apply_plan(&mut self, plan: Plan, at_ms: u64) -> Outcome {
        // S2 gangs (batch jobs) apply whole or not at all: batch_gang.rs.
        let (accepted, mut rejected) =
            self.apply_assignments(&plan.assignments, plan.queue_depth, at_ms);
        let mut preempted = Vec::new();
        for p in plan.preempt {
            match self.try_preempt(&p) {
                Some(mut v) => {
                    let mates = self.preempt_gang_mates(&v);
                    preempted.append(&mut v);
                    preempted.extend(mates);
                }
                None => rejected += 1,
            }
        }
        Outcome::PlanApplied {
            accepted,
            rejected,
            preempted,
        }
    }

    /// Re-checks one preemption (S1): the preemptor still pending and of higher priority
    /// than every victim, each victim still that attempt on that node and not protected.
    /// Then every victim goes back to pending with attempt + 1, its resources held on the
    /// node until the slave reports it stopped.
    pub(super) fn try_preempt(&mut self, p: &Preemption) -> Option<Vec<TaskRef>> {
        let pre = self.tasks.get(&p.preemptor)?;
        if pre.status.state != TaskState::Pending || p.victims.is_empty() {
            return None;
        }
        // Each victim once: a repeated one would be stopped by the first and fail the
        // second half-way, leaving the decision refused but its victim half preempted.
        let distinct: BTreeSet<TaskId> = p.victims.iter().map(|v| v.task).collect();
        if distinct.len() != p.victims.len() {
            return None;
        }
        let prio = pre.priority;
        let node = self.nodes.get(&p.node)?;
        if !node.takes_work() {
            return None;
        }
        // S3 take-back: a GPU preemptor may stop CPU tasks of its own priority or lower.
        let gpu_task = |job| self.job_resources(job).is_some_and(|r| !r.gpu.is_none());
        let take_back = p.take_back && gpu_task(pre.job);
        let valid = p.victims.iter().all(|v| {
            v.node == p.node
                && node.tasks.contains(&v.task)
                && self.tasks.get(&v.task).is_some_and(|t| {
                    t.status.attempt == v.attempt
                        && t.status.node == Some(p.node)
                        && !t.status.state.is_final()
                        && (t.priority < prio
                            || (take_back && t.priority <= prio && !gpu_task(t.job)))
                        && !t.protected
                })
        });
        if !valid {
            return None;
        }
        for v in &p.victims {
            let t = self.tasks.get_mut(&v.task)?;
            let gpus = std::mem::take(&mut t.gpus);
            t.status.requeue_because(TaskReason::Preempted).ok()?;
            t.preemptions += 1;
            t.started_ms = None;
            let job = t.job;
            let cpu_milli = t.cpu_milli;
            // The booked engine unit stays held until the attempt has stopped.
            let booked = t.booked.take();
            if let Some(n) = self.nodes.get_mut(&p.node) {
                n.tasks.remove(&v.task);
                n.stopping.push(Stopping {
                    task: v.task,
                    attempt: v.attempt,
                    job,
                    gpus,
                    cpu_milli,
                    booked,
                });
            }
            self.tasks.enqueue(v.task);
        }
        self.tasks
            .await_victims(p.preemptor, p.node, p.victims.clone());
        Some(p.victims.clone())
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
        if let Some(mut req) = self.jobs.get(&s.job).map(|j| j.spec.resources.clone()) {
            if let Some(c) = s.cpu_milli {
                req.cpu_milli = c;
            }
            if let Some(n) = self.nodes.get_mut(&node) {
                n.free.give_back(&req, &s.gpus, &n.capacity);
            }
        }
        self.unbook(node, s.booked);
        self.end_reserves_for(node, task);
        true
    }

    /// What `who`'s non-final tasks holding its quota use in `partition`.
    pub(super) fn quota_usage(&self, who: &Principal, partition: &str) -> Usage {
        let mut used = Usage::default();
        let live = self.tasks.pending().iter().chain(
            self.nodes
                .values()
                .flat_map(|n| n.tasks.iter().chain(n.queued.iter())),
        );
        for tid in live {
            let Some(t) = self.tasks.get(tid) else {
                continue;
            };
            if t.quota.as_ref() != Some(who) {
                continue;
            }
            if let Some(j) = self.jobs.get(&t.job) {
                if partition_of(&j.spec) == partition {
                    used.add(&j.spec.resources);
                }
            }
        }
        used
    }

    pub(super) fn try_assign(
        &mut self,
        a: &Assign,
        queue_depth: u32,
        at_ms: u64,
    ) -> Option<TaskRef> {
        let task = self.tasks.get(&a.task)?;
        if task.status.state != TaskState::Pending || task.not_before_ms.is_some_and(|t| t > at_ms)
        {
            return None;
        }
        let job = self.jobs.get(&task.job)?;
        if !job.candidates.is_empty() && !job.candidates.contains(&a.node) {
            return None;
        }
        let req = &job.spec.resources;
        let searched = job.spec.cpu_search.is_some();
        let node = self.nodes.get_mut(&a.node)?;
        if !node.takes_work() {
            return None;
        }
        let partition = partition_of(&self.jobs.get(&task.job)?.spec).to_string();
        if !node.serves(&partition) {
            return None;
        }
        let (gpus, booked) = if a.queued {
            // S0.3: beyond the free resources, within the queued allowance; only what can
            // ever run there and holds no devices (devices are granted at assignment).
            if node.queued.len() >= queue_depth as usize
                || !req.gpu.is_none()
                || !req.engines.is_empty()
                || !node.capacity.fits(req)
            {
                return None;
            }
            node.queued.push(a.task);
            (Vec::new(), None)
        } else {
            // S0.2: a program task granted an engine kind books a unit of it here.
            let (gpus, booked) = Self::take_booked(node, req, a.engine)?;
            node.tasks.insert(a.task);
            (gpus, booked)
        };
        let task = self.tasks.get_mut(&a.task)?;
        let attempt = task.status.assign(a.node).ok()?;
        task.gpus = gpus;
        // A new attempt starts at what the job asks for; its search (if any) starts over.
        task.cpu_milli = None;
        task.compressed = false;
        task.cpu_search = searched.then_some(CpuSearchPhase::Probing);
        task.engine = a.engine;
        task.not_before_ms = None;
        task.started_ms = None;
        task.attempt_nodes.insert(attempt, a.node);
        task.borrowed = a.borrowed;
        task.booked = booked;
        self.tasks.dequeue(&a.task);
        self.tasks.stop_awaiting(&a.task);
        Some(TaskRef {
            task: a.task,
            node: a.node,
            attempt,
        })
    }
}
