//! Applying a scheduler's plan: every assignment and preemption re-checked against the current
//! state (a stale one is refused, as Nomad's plan applier does), and the stops a preemption
//! starts.
//!
//! Gang rules of S2 batch jobs (docs/CONTRACT.md, "Batch jobs"): the pending tasks of a batch
//! job are placed all together or not at all, each on the slave it is pinned to, never in a
//! slave queue (so never stolen); and when one of a gang's attempts is preempted, the rest of
//! the gang is preempted with it. The scheduler's gang stage proposes whole gangs; this
//! re-check makes the rule hold for any plan the log carries (a stale plan, a plan of another
//! scheduler), on every replica.

use super::batch::BatchBook;
use super::command::{Assign, Outcome, PlaceNew, Plan, Preemption, TaskRef};
use super::job_book::JobBook;
use super::model::{partition_of, CpuSearchPhase, Stopping};
use super::node_book::NodeBook;
use super::task_book::TaskBook;
use hetsched_common::{Attempt, JobId, NodeId, NodeResources, TaskId, TaskReason, TaskState};
use std::collections::{BTreeMap, BTreeSet};

/// The plan rules. Spans the node book (grants taken, queue places, stopping attempts) and
/// the task book (assigned and preempted attempts, the pending queue, waiting preemptors),
/// reading the job book (requests, locality, partitions, priorities' owners) and the batch
/// book (which jobs are gangs and where their tasks are pinned).
pub(super) struct PlanRules<'a> {
    /// Grants, queues, stopping attempts.
    pub nodes: &'a mut NodeBook,
    /// Attempts and the pending queue.
    pub tasks: &'a mut TaskBook,
    /// Requests, locality, partitions.
    pub jobs: &'a JobBook,
    /// Gangs and pins.
    pub batch: &'a BatchBook,
    /// The command's leader time (a task backing off until later is not placed).
    pub at_ms: u64,
}

impl PlanRules<'_> {
    /// Re-checks every assignment against the current state (optimistic concurrency, as
    /// Nomad's plan applier does): a task no longer pending, a node down or unknown, or
    /// resources no longer free make that assignment stale; the rest apply. Then the
    /// preemptions, each whole or not at all.
    pub(super) fn apply_plan(&mut self, plan: Plan) -> Outcome {
        // Issue 53: queued attempts a fair-share decision takes back go first, so that the
        // queued assignments taking their places find room in the node's queue. Their slaves
        // are told to drop them as preempted attempts are told to stop.
        let mut preempted: Vec<TaskRef> = plan
            .unqueue
            .iter()
            .filter_map(|r| self.try_unqueue(r))
            .collect();
        let (accepted, mut rejected) = self.apply_assignments(&plan.assignments, plan.queue_depth);
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

    /// [`Command::SubmitPlaced`](super::Command::SubmitPlaced) after its submission made
    /// `job`: its placements re-checked as a plan's.
    pub(super) fn place_submitted(
        &mut self,
        job: JobId,
        tasks: Vec<TaskId>,
        place: &[PlaceNew],
        queue_depth: u32,
    ) -> Outcome {
        let assignments: Vec<Assign> = place.iter().filter_map(|p| p.assign(&tasks)).collect();
        let (accepted, rejected) = self.apply_assignments(&assignments, queue_depth);
        // A placement naming no task of the job is stale like any other.
        let unnamed = (place.len() - assignments.len()) as u32;
        Outcome::SubmittedPlaced {
            job,
            tasks,
            accepted,
            rejected: rejected + unnamed,
        }
    }

    /// The assignments of a plan, in order; those of a batch job's tasks only as a whole
    /// gang (see the module docs). Returns the accepted attempts and how many were refused.
    fn apply_assignments(
        &mut self,
        assignments: &[Assign],
        queue_depth: u32,
    ) -> (Vec<TaskRef>, u32) {
        let mut accepted = Vec::new();
        let mut rejected = 0u32;
        let mut gangs_seen = BTreeSet::new();
        for (i, a) in assignments.iter().enumerate() {
            let job = self.tasks.get(&a.task).map(|t| t.job);
            let Some(job) = job.filter(|j| self.batch.is_gang(*j)) else {
                match self.try_assign(a, queue_depth) {
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
            if !self.gang_fits(job, &members) {
                rejected += members.len() as u32;
                continue;
            }
            for m in members {
                match self.try_assign(m, queue_depth) {
                    Some(r) => accepted.push(r),
                    None => rejected += 1,
                }
            }
        }
        (accepted, rejected)
    }

    /// Whether `members` are exactly the job's pending tasks, none backing off, each
    /// assigned (not queued) to its pinned slave, and all fit there at once.
    fn gang_fits(&self, job: JobId, members: &[&Assign]) -> bool {
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
                .is_some_and(|t| t.not_before_ms.is_none_or(|nb| nb <= self.at_ms));
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

    /// One assignment, if it still holds: the task pending and not backing off, the node
    /// taking work, in the job's locality and partition, with the room (or, queued, the
    /// queue allowance) for it.
    fn try_assign(&mut self, a: &Assign, queue_depth: u32) -> Option<TaskRef> {
        let task = self.tasks.get(&a.task)?;
        if task.status.state != TaskState::Pending
            || task.not_before_ms.is_some_and(|t| t > self.at_ms)
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
        if !node.takes_work() || !node.serves(partition_of(&job.spec)) {
            return None;
        }
        if job.spec.image.is_some() && !node.runs_containers() {
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
            let (gpus, booked) = node.take_booked(req, a.engine)?;
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

    /// Issue 53 × S0.3: takes queued attempt `r` back to the pending queue (reason
    /// `preempted`, detail saying why), if it is still that attempt, queued (not promoted)
    /// on that node. It held nothing there, so nothing is given back but its queue place.
    fn try_unqueue(&mut self, r: &TaskRef) -> Option<TaskRef> {
        let t = self.tasks.get(&r.task)?;
        let queued = self
            .nodes
            .get(&r.node)
            .is_some_and(|n| n.queued.contains(&r.task));
        if !queued
            || t.status.attempt != r.attempt
            || t.status.node != Some(r.node)
            || t.status.state != TaskState::Assigned
        {
            return None;
        }
        let taken = super::grants::Grants {
            nodes: self.nodes,
            tasks: self.tasks,
            jobs: self.jobs,
        }
        .requeue(r.task, TaskReason::Preempted)?;
        if let Some(t) = self.tasks.get_mut(&r.task) {
            t.status.reason_detail = Some(format!(
                "fair-share: its place in {}'s queue went to a user ahead in fair share",
                r.node
            ));
        }
        Some(taken)
    }

    /// Re-checks one preemption (S1): the preemptor still pending and of higher priority
    /// than every victim, each victim still that attempt on that node and not protected.
    /// Then every victim goes back to pending with attempt + 1, its resources held on the
    /// node until the slave reports it stopped.
    fn try_preempt(&mut self, p: &Preemption) -> Option<Vec<TaskRef>> {
        if !self.preemption_holds(p) {
            return None;
        }
        for v in &p.victims {
            if !self.stop_preempted(v.task, p.node, v.attempt) {
                return None;
            }
        }
        self.tasks
            .await_victims(p.preemptor, p.node, p.victims.clone());
        Some(p.victims.clone())
    }

    /// Whether preemption `p` still holds (see [`try_preempt`](Self::try_preempt)).
    fn preemption_holds(&self, p: &Preemption) -> bool {
        let Some(pre) = self.tasks.get(&p.preemptor) else {
            return false;
        };
        if pre.status.state != TaskState::Pending || p.victims.is_empty() {
            return false;
        }
        // Each victim once: a repeated one would be stopped by the first and fail the
        // second half-way, leaving the decision refused but its victim half preempted.
        let distinct: BTreeSet<TaskId> = p.victims.iter().map(|v| v.task).collect();
        if distinct.len() != p.victims.len() {
            return false;
        }
        let prio = pre.priority;
        let Some(node) = self.nodes.get(&p.node).filter(|n| n.takes_work()) else {
            return false;
        };
        // S3 take-back: a GPU preemptor may stop CPU tasks of its own priority or lower.
        let gpu_task = |job| self.jobs.resources(job).is_some_and(|r| !r.gpu.is_none());
        let take_back = p.take_back && gpu_task(pre.job);
        p.victims.iter().all(|v| {
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
        })
    }

    /// Preempts attempt `attempt` of `task` on `node`: back to pending (reason
    /// `preempted`), its grant (devices, CPUs, booked unit) held on the node as a stopping
    /// attempt until its slave reports it ended. False (nothing changed) when the task is
    /// unknown or not assigned or running.
    fn stop_preempted(&mut self, task: TaskId, node: NodeId, attempt: Attempt) -> bool {
        let Some(t) = self.tasks.get_mut(&task) else {
            return false;
        };
        if t.status.requeue_because(TaskReason::Preempted).is_err() {
            return false;
        }
        let gpus = std::mem::take(&mut t.gpus);
        t.preemptions += 1;
        t.started_ms = None;
        let stopping = Stopping {
            task,
            attempt,
            job: t.job,
            gpus,
            cpu_milli: t.cpu_milli,
            // The booked engine unit stays held until the attempt has stopped.
            booked: t.booked.take(),
        };
        if let Some(n) = self.nodes.get_mut(&node) {
            n.tasks.remove(&task);
            n.stopping.push(stopping);
        }
        self.tasks.enqueue(task);
        true
    }

    /// Gangs are preempted whole: every other assigned or running attempt of a batch job
    /// with a victim among `victims` goes back to pending too (reason `preempted`), holding
    /// its resources until its slave reports it stopped. Returns those attempts.
    fn preempt_gang_mates(&mut self, victims: &[TaskRef]) -> Vec<TaskRef> {
        let hit: BTreeSet<JobId> = victims
            .iter()
            .filter_map(|v| self.tasks.get(&v.task).map(|t| t.job))
            .filter(|j| self.batch.is_gang(*j))
            .collect();
        let already: BTreeSet<TaskId> = victims.iter().map(|v| v.task).collect();
        let jobs = self.jobs;
        let mut more = Vec::new();
        for job in hit {
            let Some(j) = jobs.get(&job) else {
                continue;
            };
            for &task in j.tasks.iter().filter(|t| !already.contains(t)) {
                let Some(t) = self.tasks.get(&task) else {
                    continue;
                };
                let (TaskState::Assigned | TaskState::Running, Some(node)) =
                    (t.status.state, t.status.node)
                else {
                    continue;
                };
                let attempt = t.status.attempt;
                if self.stop_preempted(task, node, attempt) {
                    more.push(TaskRef {
                        task,
                        node,
                        attempt,
                    });
                }
            }
        }
        more
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
