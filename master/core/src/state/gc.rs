//! Garbage collection of finished jobs and old request outcomes, with both cut-offs carried in
//! the command so every replica removes the same things; the derived indexes rebuilt on
//! restore.

use super::command::Outcome;
use super::model::Job;
use super::ClusterState;
use hetsched_common::{ClientRequestId, JobId, TaskId};
use std::collections::BTreeSet;

impl ClusterState {
    /// Removes finished jobs (with their tasks) that finished before `jobs_before`, and
    /// client request outcomes older than `requests_before`.
    pub(super) fn gc(&mut self, jobs_before: Option<u64>, requests_before: Option<u64>) -> Outcome {
        let (mut jobs, mut tasks, mut requests) = (0u64, 0u64, 0u64);
        if let Some(cut) = jobs_before {
            let due = self.jobs.finished_before(cut);
            // A preempted attempt still stopping somewhere holds its job's resources on that
            // node until it is reported ended, and gives them back by the job's spec: such a
            // job (cancelled meanwhile) waits for a later GC.
            let stopping: BTreeSet<JobId> = self
                .nodes
                .values()
                .flat_map(|n| n.stopping.iter().map(|s| s.job))
                .collect();
            for key in due {
                if stopping.contains(&key.1) {
                    continue;
                }
                self.jobs.unmark_finished(key);
                let Some(j) = self.jobs.get(&key.1) else {
                    continue;
                };
                // The counter says finished; the tasks must agree before anything goes.
                let all_final = j
                    .tasks
                    .iter()
                    .all(|t| self.tasks.get(t).is_none_or(|t| t.status.state.is_final()));
                if !all_final {
                    continue;
                }
                if let Some(j) = self.jobs.remove(&key.1) {
                    for t in &j.tasks {
                        if self.tasks.forget(t) {
                            tasks += 1;
                        }
                    }
                    self.batch_forget_job(j.id, &j.tasks);
                    jobs += 1;
                }
            }
        }
        if let Some(cut) = requests_before {
            requests = self.requests.forget_before(cut);
        }
        Outcome::Collected {
            jobs,
            tasks,
            requests,
        }
    }

    /// Whether a `GcJobs` with these cut-offs would remove anything (the leader asks before
    /// proposing one).
    pub fn gc_due(&self, jobs_before: Option<u64>, requests_before: Option<u64>) -> bool {
        jobs_before.is_some_and(|cut| self.jobs.any_finished_before(cut))
            || requests_before.is_some_and(|cut| self.requests.any_before(cut))
    }

    /// Whether a client request id has applied (and its outcome is still remembered).
    pub fn request_applied(&self, request: ClientRequestId) -> bool {
        self.requests.applied(request)
    }

    /// Whether `job` existed once and was garbage-collected (ids are never reused).
    pub fn job_was_collected(&self, job: JobId) -> bool {
        self.jobs.was_collected(job)
    }

    /// What to tell a client asking for a job that is not in the state.
    pub fn job_missing_message(&self, job: JobId) -> String {
        if self.job_was_collected(job) {
            format!("{job} finished and was collected (finished jobs are kept for --job-gc-after)")
        } else {
            format!("no such job: {job}")
        }
    }

    /// Whether `task` existed once and was garbage-collected with its job.
    pub fn task_was_collected(&self, task: TaskId) -> bool {
        self.tasks.was_collected(task)
    }

    /// Recomputes what is derived rather than serialised: open-task counters, the
    /// finished-job and request orders; folds a legacy request map into the compact one.
    pub(super) fn rebuild_derived(&mut self) {
        self.requests.rebuild(self.last_ms);
        let tasks = &self.tasks;
        let open_of = |j: &Job| {
            j.tasks
                .iter()
                .filter(|t| tasks.get(t).is_some_and(|t| !t.status.state.is_final()))
                .count() as u32
        };
        self.jobs.rebuild(open_of, self.last_ms);
        self.rebuild_dependencies(); // issue 51
    }
}
