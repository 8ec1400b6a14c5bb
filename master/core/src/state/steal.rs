//! S0.4 work stealing as the log sees it: a committed steal moves one task queued on a slave
//! (S0.3) to another slave with the next attempt, once the victim's slave released it.

use super::command::{Outcome, TaskRef};
use super::grants::Grants;
use super::job_book::JobBook;
use super::model::partition_of;
use super::node_book::NodeBook;
use super::task_book::TaskBook;
use hetsched_common::{Attempt, GpuAlloc, JobId, NodeId, TaskId, TaskReason, TaskState};

/// The steal rule. Spans the node book (the victim's queue or room, the thief's room and
/// both steal counters) and the task book (the attempt that ends and the one that starts),
/// reading the job book for the request, partition and locality the thief must satisfy.
pub(super) struct StealRules<'a> {
    /// Victim and thief.
    pub nodes: &'a mut NodeBook,
    /// The stolen task.
    pub tasks: &'a mut TaskBook,
    /// Its job.
    pub jobs: &'a JobBook,
}

impl StealRules<'_> {
    /// `from` released the queued `attempt` of `task`; it moves to `to` with the next
    /// attempt. Stale (the task is no longer that queued attempt on `from`): ignored, the
    /// victim's release changed nothing the log holds. A thief that can no longer take it
    /// (gone, draining, full, wrong partition, outside the job's locality): the task goes
    /// back to pending with attempt + 1, so the released attempt is never the one that runs.
    pub(super) fn steal(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        from: NodeId,
        to: NodeId,
    ) -> Outcome {
        let (job, promoted_there) = match self.released(task, attempt, from) {
            Ok(r) => r,
            Err(o) => return o,
        };
        self.leave(task, job, from, promoted_there);
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
        let Some(gpus) = self.thief_takes(job, from, to) else {
            self.tasks.enqueue(task);
            return Outcome::Stolen {
                from: released,
                assigned: None,
            };
        };
        self.arrive(task, from, to, gpus, released)
    }

    /// The released attempt's job, and whether it was promoted on `from` meanwhile (it
    /// holds room there) rather than still queued; or why the steal is stale.
    fn released(
        &self,
        task: TaskId,
        attempt: Attempt,
        from: NodeId,
    ) -> Result<(JobId, bool), Outcome> {
        let victim = self.nodes.get(&from);
        let queued_there = victim.is_some_and(|n| n.queued.contains(&task));
        // Promoted meanwhile (`promote`) but, as the victim's release says, never started:
        // it gives its room back there.
        let promoted_there = victim.is_some_and(|n| n.tasks.contains(&task));
        let Some(t) = self.tasks.get(&task) else {
            return Err(Outcome::Rejected(format!("unknown {task}")));
        };
        if !(queued_there || promoted_there)
            || t.status.state != TaskState::Assigned
            || t.status.attempt != attempt
            || t.status.node != Some(from)
        {
            return Err(Outcome::Ignored(format!(
                "stale steal: {task} is no longer queued on {from}"
            )));
        }
        if !self.jobs.contains_key(&t.job) {
            return Err(Outcome::Rejected(format!("unknown {}", t.job)));
        }
        Ok((t.job, promoted_there))
    }

    /// The task leaves `from`: its room back if it was promoted there, else its queue place.
    fn leave(&mut self, task: TaskId, job: JobId, from: NodeId, promoted_there: bool) {
        if promoted_there {
            let gpus = self
                .tasks
                .get_mut(&task)
                .map(|t| std::mem::take(&mut t.gpus))
                .unwrap_or_default();
            Grants {
                nodes: self.nodes,
                tasks: self.tasks,
                jobs: self.jobs,
            }
            .release(from, task, job, &gpus);
            // The next attempt starts at what the job asks for (a live change, S3.2, may
            // have reached the unstarted one).
            if let Some(t) = self.tasks.get_mut(&task) {
                t.cpu_milli = None;
                t.compressed = false;
            }
        } else if let Some(n) = self.nodes.get_mut(&from) {
            n.queued.retain(|x| *x != task);
        }
    }

    /// The job's request taken from the thief `to`, if it still may and can take it.
    fn thief_takes(&mut self, job: JobId, from: NodeId, to: NodeId) -> Option<GpuAlloc> {
        let j = self.jobs.get(&job)?;
        let req = &j.spec.resources;
        let partition = partition_of(&j.spec);
        let allowed = j.candidates.is_empty() || j.candidates.contains(&to);
        let n = self.nodes.get_mut(&to)?;
        let fits = n.id != from
            && n.takes_work()
            && n.serves(partition)
            && (j.spec.image.is_none() || n.runs_containers())
            && n.free.fits(req);
        if fits && allowed {
            n.free.take(req)
        } else {
            None
        }
    }

    /// The task's next attempt is assigned to `to`, holding `gpus` there.
    fn arrive(
        &mut self,
        task: TaskId,
        from: NodeId,
        to: NodeId,
        gpus: GpuAlloc,
        released: TaskRef,
    ) -> Outcome {
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

#[cfg(test)]
#[path = "steal_tests.rs"]
mod tests;
