//! Submitting and cancelling jobs: ids handed out in apply order, S1 admission of each task's
//! priority, and a job's end once its last task is final.

use super::command::Assign;
use super::command::Outcome;
use super::command::PlaceNew;
use super::command::TaskRef;
use super::model::partition_of;
use super::model::Job;
use super::model::Task;
use super::ClusterState;
use hetsched_common::{JobId, JobSpec, TaskId, TaskReason, TaskState};

impl ClusterState {
    pub(super) fn submit(&mut self, index: u64, at_ms: u64, mut spec: JobSpec) -> Outcome {
        if let Err(e) = spec.validate() {
            return Outcome::Rejected(e.to_string());
        }
        // Issue 51: every job it follows must be here (before any id is handed out).
        if let Err(why) = self.check_dependencies(&spec) {
            return Outcome::Rejected(why);
        }
        let partition = partition_of(&spec).to_string();
        if spec.no_preempt {
            let p = self.priority.priority_of(&spec.user, &partition);
            match self.priority.protect_min_priority {
                Some(min) if p >= min => {}
                Some(min) => {
                    return Outcome::Rejected(format!(
                        "--no-preempt needs priority {min} or more; user {:?} has {p} in partition {partition:?}",
                        spec.user
                    ))
                }
                None => {
                    return Outcome::Rejected(
                        "--no-preempt is not enabled (protect_min_priority is not configured)"
                            .into(),
                    )
                }
            }
        }
        let admitted = crate::policy::quota::admit(
            &self.priority,
            &spec.user,
            &partition,
            &spec.resources,
            spec.count,
            |who| self.quota_usage(who, &partition),
        );
        let candidates = match self.resolve_candidates(&spec.nodes) {
            Ok(c) => c,
            Err(why) => return Outcome::Rejected(why),
        };
        if let Some(p) = &spec.program {
            self.profiles.learn_kind(p.kind());
            spec.carry_program();
        }
        let id = self.jobs.allocate_id();
        let mut tasks = Vec::with_capacity(spec.count as usize);
        for (index, adm) in (0..spec.count).zip(admitted) {
            let tid = self.tasks.allocate_id();
            tasks.push(tid);
            self.tasks.insert(
                tid,
                Task {
                    protected: spec.no_preempt,
                    priority: adm.priority,
                    quota: adm.quota,
                    ..Task::new(tid, id, index)
                },
            );
            self.tasks.enqueue(tid);
        }
        self.jobs.insert(Job {
            id,
            spec,
            tasks: tasks.clone(),
            submitted_ms: at_ms,
            submitted_index: index,
            finished_ms: None,
            open: tasks.len() as u32,
            candidates,
        });
        self.follow_submit(id); // issue 51: its edges; cancelled now if it can never start
        Outcome::Submitted { job: id, tasks }
    }

    /// [`Command::SubmitPlaced`]: the submission, then its placements re-checked as a plan's.
    pub(super) fn submit_placed(
        &mut self,
        index: u64,
        at_ms: u64,
        spec: JobSpec,
        place: &[PlaceNew],
        queue_depth: u32,
    ) -> Outcome {
        let (job, tasks) = match self.submit(index, at_ms, spec) {
            Outcome::Submitted { job, tasks } => (job, tasks),
            o => return o,
        };
        let assignments: Vec<Assign> = place.iter().filter_map(|p| p.assign(&tasks)).collect();
        let (accepted, rejected) = self.apply_assignments(&assignments, queue_depth, at_ms);
        // A placement naming no task of the job is stale like any other.
        let unnamed = (place.len() - assignments.len()) as u32;
        Outcome::SubmittedPlaced {
            job,
            tasks,
            accepted,
            rejected: rejected + unnamed,
        }
    }

    pub(super) fn cancel(&mut self, job: JobId) -> Outcome {
        let Some(j) = self.jobs.get(&job) else {
            return Outcome::Rejected(format!("unknown {job}"));
        };
        let ids = j.tasks.clone();
        let mut cancelled = 0u32;
        let mut finals = Vec::new();
        let mut stop = Vec::new();
        for t in ids {
            let Some(task) = self.tasks.get_mut(&t) else {
                continue;
            };
            let was = task.status.clone();
            if task.status.cancel().is_err() {
                continue;
            }
            cancelled += 1;
            task.status.reason = Some(TaskReason::Cancelled);
            task.not_before_ms = None;
            let on_node = match (was.state, was.node) {
                (TaskState::Assigned | TaskState::Running, Some(node)) => {
                    Some((node, std::mem::take(&mut task.gpus)))
                }
                _ => None,
            };
            self.tasks.dequeue(&t);
            self.tasks.stop_awaiting(&t);
            finals.push(t);
            if let Some((node, gpus)) = on_node {
                self.release(node, t, job, &gpus);
                stop.push(TaskRef {
                    task: t,
                    node,
                    attempt: was.attempt,
                });
            }
        }
        self.tasks_became_final(job, &finals);
        Outcome::Cancelled {
            job,
            tasks: cancelled,
            stop,
        }
    }

    /// `tasks` of `job` reached a final state: once none is left open, the job is
    /// finished and its retention starts; what follows them is settled in the same entry.
    pub(super) fn tasks_became_final(&mut self, job: JobId, tasks: &[TaskId]) {
        self.jobs.tasks_final(job, tasks.len() as u32, self.last_ms);
        self.follow_ends(job, tasks); // issue 51: the dependency cascade
    }
}
