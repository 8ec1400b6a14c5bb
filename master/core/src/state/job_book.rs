//! The job book: the jobs the cluster was given. It owns the job table, the next job id
//! and the order in which jobs finished (derived: rebuilt on restore), which garbage
//! collection walks; it closes a job once its last task is final. A job's tasks live in
//! the task table and move by the rules of the handlers, which tell this book how many
//! became final.

use super::model::Job;
use hetsched_common::{JobId, ResourceRequest, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// Jobs by id, the next job id and the finished ones in the order they finished.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobBook {
    /// Jobs by id.
    jobs: BTreeMap<JobId, Job>,
    /// Finished jobs in the order they finished (derived).
    finished: BTreeSet<(u64, JobId)>,
    /// The last job id handed out.
    next: u64,
    /// Tasks that became final in the entry being applied, by job, in the order they did:
    /// what the dependency rules settle before the entry ends (empty between entries).
    ended: Vec<(JobId, Vec<TaskId>)>,
}

impl JobBook {
    /// The book a snapshot describes; [`rebuild`](Self::rebuild) must follow.
    pub(super) fn from_snapshot(jobs: BTreeMap<JobId, Job>, next: u64) -> Self {
        Self {
            jobs,
            finished: BTreeSet::new(),
            next,
            ended: Vec::new(),
        }
    }

    /// A copy with only the jobs `keep` selects, for planning: no finished order, since a
    /// planning copy never collects.
    pub(super) fn planning_copy(&self, keep: impl Fn(&Job) -> bool) -> Self {
        Self {
            jobs: self
                .jobs
                .iter()
                .filter(|(_, j)| keep(j))
                .map(|(id, j)| (*id, j.clone()))
                .collect(),
            finished: BTreeSet::new(),
            next: self.next,
            ended: Vec::new(),
        }
    }

    /// Jobs by id.
    pub fn all(&self) -> &BTreeMap<JobId, Job> {
        &self.jobs
    }

    /// Test hook, only with the `forge` feature: the job table, mutable.
    #[cfg(feature = "forge")]
    pub(super) fn all_mut(&mut self) -> &mut BTreeMap<JobId, Job> {
        &mut self.jobs
    }

    /// The last job id handed out (for snapshots).
    pub(super) fn next_id(&self) -> u64 {
        self.next
    }

    /// One job.
    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.jobs.get(id)
    }

    /// The resources each task of `job` asks for.
    pub fn resources(&self, job: JobId) -> Option<&ResourceRequest> {
        self.jobs.get(&job).map(|j| &j.spec.resources)
    }

    /// Whether `id` is in the table.
    pub fn contains_key(&self, id: &JobId) -> bool {
        self.jobs.contains_key(id)
    }

    /// Every job, by id.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Job> {
        self.jobs.values()
    }

    /// Hands out the next job id (in apply order, so the same on every replica).
    pub(super) fn allocate_id(&mut self) -> JobId {
        self.next += 1;
        JobId(self.next)
    }

    /// Adds a job.
    pub(super) fn insert(&mut self, job: Job) {
        self.jobs.insert(job.id, job);
    }

    /// Whether `job` existed once and was garbage-collected (ids are never reused).
    pub fn was_collected(&self, job: JobId) -> bool {
        job.0 >= 1 && job.0 <= self.next && !self.jobs.contains_key(&job)
    }

    /// What to tell a client asking for a job that is not in the book.
    pub fn missing_message(&self, job: JobId) -> String {
        if self.was_collected(job) {
            format!("{job} finished and was collected (finished jobs are kept for --job-gc-after)")
        } else {
            format!("no such job: {job}")
        }
    }

    /// `tasks` of `job` became final at `at_ms`: once none is left open, the job is
    /// finished and its retention starts. They are noted for the dependency rules
    /// ([`take_ended`](Self::take_ended)), which run before the entry ends.
    pub(super) fn tasks_final(&mut self, job: JobId, tasks: &[TaskId], at_ms: u64) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if tasks.is_empty() {
            return;
        }
        self.ended.push((job, tasks.to_vec()));
        j.open = j.open.saturating_sub(tasks.len() as u32);
        if j.open == 0 && j.finished_ms.is_none() {
            j.finished_ms = Some(at_ms);
            self.finished.insert((at_ms, job));
        }
    }

    /// The tasks noted final since the last call, by job (see [`tasks_final`](Self::tasks_final)).
    pub(super) fn take_ended(&mut self) -> Vec<(JobId, Vec<TaskId>)> {
        std::mem::take(&mut self.ended)
    }

    /// Jobs that finished before `cut`, oldest first.
    pub(super) fn finished_before(&self, cut: u64) -> Vec<(u64, JobId)> {
        self.finished.range(..(cut, JobId(0))).copied().collect()
    }

    /// Whether a job finished before `cut`.
    pub(super) fn any_finished_before(&self, cut: u64) -> bool {
        self.finished.first().is_some_and(|f| f.0 < cut)
    }

    /// Takes a finished job out of the finished order (collected, or found not final).
    pub(super) fn unmark_finished(&mut self, key: (u64, JobId)) {
        self.finished.remove(&key);
    }

    /// Puts a finished job back in the finished order (issue 51: its last dependent
    /// resolved, so it may be collected); nothing for a job that has not finished.
    pub(super) fn mark_finished(&mut self, job: JobId) {
        if let Some(f) = self.jobs.get(&job).and_then(|j| j.finished_ms) {
            self.finished.insert((f, job));
        }
    }

    /// Removes a job.
    pub(super) fn remove(&mut self, id: &JobId) -> Option<Job> {
        self.jobs.remove(id)
    }

    /// Recomputes each job's open-task count with `open_of` and the finished order; a job
    /// with none open but no finish time (written before retention was recorded) finishes
    /// at `at_ms`, the snapshot's clock.
    pub(super) fn rebuild(&mut self, open_of: impl Fn(&Job) -> u32, at_ms: u64) {
        self.finished.clear();
        for j in self.jobs.values_mut() {
            j.open = open_of(j);
            if j.open == 0 && j.finished_ms.is_none() {
                j.finished_ms = Some(at_ms);
            }
            if let (0, Some(f)) = (j.open, j.finished_ms) {
                self.finished.insert((f, j.id));
            }
        }
    }
}

#[cfg(test)]
#[path = "job_book_tests.rs"]
mod tests;
