//! Garbage collection of finished jobs and old request outcomes, with both cut-offs carried in
//! the command so every replica removes the same things.

use super::batch::BatchBook;
use super::command::Outcome;
use super::flows::FlowBook;
use super::job_book::JobBook;
use super::node_book::NodeBook;
use super::request_book::RequestBook;
use super::task_book::TaskBook;
use hetsched_common::JobId;

/// The collection rule. Spans the job, task, batch and flow books (a collected job leaves
/// all four at once) and the request book (old outcomes go with the same command), reading the
/// node book: a job a stopping attempt still names must stay.
pub(super) struct GcRules<'a> {
    /// Finished jobs.
    pub jobs: &'a mut JobBook,
    /// Their tasks.
    pub tasks: &'a mut TaskBook,
    /// Their batch records.
    pub batch: &'a mut BatchBook,
    /// Their flows' records.
    pub flows: &'a mut FlowBook,
    /// Request outcomes.
    pub requests: &'a mut RequestBook,
    /// Stopping attempts.
    pub nodes: &'a NodeBook,
}

impl GcRules<'_> {
    /// Removes finished jobs (with their tasks) that finished before `jobs_before`, and
    /// client request outcomes older than `requests_before` (keyed ones: `keyed_before`).
    pub(super) fn collect(
        &mut self,
        jobs_before: Option<u64>,
        requests_before: Option<u64>,
        keyed_before: Option<u64>,
    ) -> Outcome {
        let (jobs, tasks) = jobs_before.map_or((0, 0), |cut| self.collect_jobs(cut));
        let requests = match (requests_before, keyed_before) {
            (None, None) => 0,
            (cut, keyed) => {
                (self.requests).forget_before(cut.unwrap_or(0), Some(keyed.or(cut).unwrap_or(0)))
            }
        };
        Outcome::Collected {
            jobs,
            tasks,
            requests,
        }
    }

    /// Removes the jobs that finished before `cut`; returns how many jobs and tasks went.
    fn collect_jobs(&mut self, cut: u64) -> (u64, u64) {
        let (mut jobs, mut tasks) = (0u64, 0u64);
        // A preempted attempt still stopping somewhere holds its job's resources on that
        // node until it is reported ended, and gives them back by the job's spec: such a
        // job (cancelled meanwhile) waits for a later GC.
        let stopping = self.nodes.stopping_jobs();
        for key in self.jobs.finished_before(cut) {
            if stopping.contains(&key.1) {
                continue;
            }
            self.jobs.unmark_finished(key);
            if !self.all_final(key.1) {
                continue;
            }
            if let Some(j) = self.jobs.remove(&key.1) {
                for t in &j.tasks {
                    if self.tasks.forget(t) {
                        tasks += 1;
                    }
                }
                self.batch.forget_job(j.id, &j.tasks);
                self.flows.forget_job(j.id);
                jobs += 1;
            }
        }
        (jobs, tasks)
    }

    /// Whether every task of `job` the table still has is final: the job's counter says
    /// finished, and the tasks must agree before anything goes.
    fn all_final(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|j| {
            j.tasks
                .iter()
                .all(|t| self.tasks.get(t).is_none_or(|t| t.status.state.is_final()))
        })
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
