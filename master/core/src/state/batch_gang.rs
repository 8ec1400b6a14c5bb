//! Gang rules of S2 batch jobs at apply (docs/CONTRACT.md, "Batch jobs"): the pending tasks
//! of a batch job are placed all together or not at all, each on the slave it is pinned to,
//! never in a slave queue (so never stolen); and when one of a gang's attempts is preempted,
//! the rest of the gang is preempted with it.
//!
//! The scheduler's gang stage proposes whole gangs; this re-check makes the rule hold for
//! any plan the log carries (a stale plan, a plan of another scheduler), on every replica.

use super::command::Assign;
use super::command::TaskRef;
use super::model::partition_of;
use super::model::Stopping;
use super::ClusterState;
use hetsched_common::NodeId;
use hetsched_common::TaskId;
use hetsched_common::{JobId, NodeResources, TaskReason, TaskState};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

impl ClusterState {
    /// The assignments of a plan, in order; those of a batch job's tasks only as a whole
    /// gang (see the module docs). Returns the accepted attempts and how many were refused.
    pub(super) fn apply_assignments(
        &mut self,
        assignments: &[Assign],
        queue_depth: u32,
        at_ms: u64,
    ) -> (Vec<TaskRef>, u32) {
        let mut accepted = Vec::new();
        let mut rejected = 0u32;
        let mut gangs_seen = BTreeSet::new();
        for (i, a) in assignments.iter().enumerate() {
            let job = self.tasks.get(&a.task).map(|t| t.job);
            let Some(job) = job.filter(|j| self.is_gang(*j)) else {
                match self.try_assign(a, queue_depth, at_ms) {
                    Some(r) => accepted.push(r),
                    None => rejected += 1,
                }
                continue;
            };
            if !gangs_seen.insert(job) {
                continue; // applied (or refused) with the gang's first assignment
            }
            let members: Vec<&Assign> = assignments[i..]
                .iter()
                .filter(|b| self.tasks.get(&b.task).is_some_and(|t| t.job == job))
                .collect();
            if !self.gang_fits(job, &members, at_ms) {
                rejected += members.len() as u32;
                continue;
            }
            for m in members {
                match self.try_assign(m, queue_depth, at_ms) {
                    Some(r) => accepted.push(r),
                    None => rejected += 1,
                }
            }
        }
        (accepted, rejected)
    }

    /// Whether `members` are exactly the job's pending tasks, none backing off, each
    /// assigned (not queued) to its pinned slave, and all fit there at once.
    fn gang_fits(&self, job: JobId, members: &[&Assign], at_ms: u64) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let pending: BTreeSet<TaskId> = j
            .tasks
            .iter()
            .filter(|t| {
                self.tasks
                    .get(t)
                    .is_some_and(|t| t.status.state == TaskState::Pending)
            })
            .copied()
            .collect();
        let named: BTreeSet<TaskId> = members.iter().map(|a| a.task).collect();
        if named != pending || named.len() != members.len() {
            return false;
        }
        let partition = partition_of(&j.spec);
        let mut free: BTreeMap<NodeId, NodeResources> = BTreeMap::new();
        for a in members {
            let ok_task = self
                .tasks
                .get(&a.task)
                .is_some_and(|t| t.not_before_ms.is_none_or(|nb| nb <= at_ms));
            let pinned = self.batch.tasks.get(&a.task).map(|b| b.node);
            let Some(node) = self.nodes.get(&a.node) else {
                return false;
            };
            if !ok_task
                || a.queued
                || pinned != Some(a.node)
                || !node.takes_work()
                || !node.serves(partition)
            {
                return false;
            }
            let f = free.entry(a.node).or_insert_with(|| node.free.clone());
            if f.take(&j.spec.resources).is_none() {
                return false;
            }
        }
        true
    }

    /// Gangs are preempted whole: every other assigned or running attempt of a batch job
    /// with a victim among `victims` goes back to pending too (reason `preempted`), holding
    /// its resources until its slave reports it stopped. Returns those attempts.
    pub(super) fn preempt_gang_mates(&mut self, victims: &[TaskRef]) -> Vec<TaskRef> {
        let hit: BTreeSet<JobId> = victims
            .iter()
            .filter_map(|v| self.tasks.get(&v.task).map(|t| t.job))
            .filter(|j| self.is_gang(*j))
            .collect();
        let already: BTreeSet<TaskId> = victims.iter().map(|v| v.task).collect();
        let mut more = Vec::new();
        for job in hit {
            let Some(j) = self.jobs.get(&job) else {
                continue;
            };
            for tid in j.tasks.clone() {
                if already.contains(&tid) {
                    continue;
                }
                let Some(t) = self.tasks.get_mut(&tid) else {
                    continue;
                };
                let (TaskState::Assigned | TaskState::Running, Some(node)) =
                    (t.status.state, t.status.node)
                else {
                    continue;
                };
                let attempt = t.status.attempt;
                if t.status.requeue_because(TaskReason::Preempted).is_err() {
                    continue;
                }
                let gpus = std::mem::take(&mut t.gpus);
                t.preemptions += 1;
                t.started_ms = None;
                let cpu_milli = t.cpu_milli;
                // The booked engine unit stays held until the attempt has stopped.
                let booked = t.booked.take();
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.tasks.remove(&tid);
                    n.stopping.push(Stopping {
                        task: tid,
                        attempt,
                        job,
                        gpus,
                        cpu_milli,
                        booked,
                    });
                }
                self.tasks.enqueue(tid);
                more.push(TaskRef {
                    task: tid,
                    node,
                    attempt,
                });
            }
        }
        more
    }
}
