//! The dependency book (issue 51): who follows whom, and the singleton jobs by (user, name).
//!
//! Derived, like the job book's finishing order: every entry follows from the open jobs'
//! specs (`after`, `after_any`, `after_fail`, `after_each`, `singleton`), so the book is
//! rebuilt on restore and never written to a snapshot. An edge lives while its dependent
//! is open (unresolved) and goes when the dependent's last task is final: the cascade
//! finds a failing job's dependents here without scanning every job, and garbage
//! collection keeps any job that still has dependents.

use super::model::Job;
use hetsched_common::JobId;
use std::collections::{BTreeMap, BTreeSet};

/// Dependents by the job they follow, and open singleton jobs by user and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DependencyBook {
    /// Upstream job → its open dependents (every kind).
    dependents: BTreeMap<JobId, BTreeSet<JobId>>,
    /// Upstream job → its open `after_each` dependents (task *i* follows task *i*).
    each: BTreeMap<JobId, BTreeSet<JobId>>,
    /// User → job name → open singleton jobs.
    singletons: BTreeMap<String, BTreeMap<String, BTreeSet<JobId>>>,
}

impl DependencyBook {
    /// The book of `jobs`' open ones (restore; planning copies).
    pub(super) fn of<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Self {
        let mut book = Self::default();
        for j in jobs {
            if j.finished_ms.is_none() {
                book.add(j);
            }
        }
        book
    }

    /// Records an open job's edges and singleton entry (nothing for a job without either).
    pub(super) fn add(&mut self, job: &Job) {
        for (_, up) in job.spec.dependencies() {
            self.dependents.entry(up).or_default().insert(job.id);
        }
        if let Some(up) = job.spec.after_each {
            self.each.entry(up).or_default().insert(job.id);
        }
        if job.spec.singleton {
            self.singletons
                .entry(job.spec.user.clone())
                .or_default()
                .entry(job.spec.name.clone())
                .or_default()
                .insert(job.id);
        }
    }

    /// `job` finished: its edges are resolved. Returns the jobs it followed that have no
    /// dependent left (garbage collection may take them once they are finished too).
    pub(super) fn resolve(&mut self, job: &Job) -> Vec<JobId> {
        let mut freed = Vec::new();
        for (_, up) in job.spec.dependencies() {
            if let Some(set) = self.dependents.get_mut(&up) {
                set.remove(&job.id);
                if set.is_empty() {
                    self.dependents.remove(&up);
                    freed.push(up);
                }
            }
        }
        if let Some(up) = job.spec.after_each {
            if let Some(set) = self.each.get_mut(&up) {
                set.remove(&job.id);
                if set.is_empty() {
                    self.each.remove(&up);
                }
            }
        }
        if job.spec.singleton {
            if let Some(names) = self.singletons.get_mut(&job.spec.user) {
                if let Some(set) = names.get_mut(&job.spec.name) {
                    set.remove(&job.id);
                    if set.is_empty() {
                        names.remove(&job.spec.name);
                    }
                }
                if names.is_empty() {
                    self.singletons.remove(&job.spec.user);
                }
            }
        }
        freed
    }

    /// The open jobs that follow `job` (any kind), in id order.
    pub fn dependents(&self, job: JobId) -> impl Iterator<Item = JobId> + '_ {
        self.dependents.get(&job).into_iter().flatten().copied()
    }

    /// Whether an open job still follows `job` (it must not be collected).
    pub fn has_dependents(&self, job: JobId) -> bool {
        self.dependents.contains_key(&job)
    }

    /// The open jobs whose task *i* follows task *i* of `job`, in id order.
    pub fn each_dependents(&self, job: JobId) -> impl Iterator<Item = JobId> + '_ {
        self.each.get(&job).into_iter().flatten().copied()
    }

    /// The open singleton jobs of `user` named `name`, in id order.
    pub fn singletons(&self, user: &str, name: &str) -> impl Iterator<Item = JobId> + '_ {
        self.singletons
            .get(user)
            .and_then(|names| names.get(name))
            .into_iter()
            .flatten()
            .copied()
    }

    /// Jobs some open job follows, in id order.
    pub fn upstreams(&self) -> impl Iterator<Item = JobId> + '_ {
        self.dependents.keys().copied()
    }
}

#[cfg(test)]
#[path = "dependency_book_tests.rs"]
mod tests;
