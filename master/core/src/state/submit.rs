//! Submitting jobs and batches: ids handed out in apply order, S1 admission of each task's
//! priority (and of `--no-preempt`), locality resolved to node ids, and a program's task kind
//! learned for the task–engine relation; S2 batches checked whole, then submitted one job per
//! input job with each task pinned, and re-pinned when a planned slave was lost.

use super::batch::{BatchBook, BatchSpec, BatchTask};
use super::command::{Command, Outcome};
use super::job_book::JobBook;
use super::model::{partition_of, Job, Task};
use super::node_book::NodeBook;
use super::profile_book::ProfileBook;
use super::task_book::TaskBook;
use hetsched_common::priority::{Principal, PriorityConfig, Usage};
use hetsched_common::{JobId, JobSpec, TaskId, TaskState};

/// The submit rules. Spans the job and task books (a job and its tasks are made together),
/// the profile book (a program's task kind joins the task–engine relation) and the batch
/// book (a batch's jobs and pins), reading the node book (locality names, pins, quota usage
/// of the tasks nodes hold) and the priority configuration (admission).
pub(super) struct SubmitRules<'a> {
    /// New jobs.
    pub jobs: &'a mut JobBook,
    /// New tasks and the pending queue.
    pub tasks: &'a mut TaskBook,
    /// Node names and the tasks they hold.
    pub nodes: &'a NodeBook,
    /// The task–engine relation.
    pub profiles: &'a mut ProfileBook,
    /// S1 admission.
    pub priority: &'a PriorityConfig,
    /// S2 batches.
    pub batch: &'a mut BatchBook,
    /// Log index of the command (a job's `submitted_index`).
    pub index: u64,
    /// The command's leader time (a job's `submitted_ms`).
    pub at_ms: u64,
}

impl SubmitRules<'_> {
    /// Applies `SubmitJob`, `SubmitBatch` or `ReplanBatchJob` (`SubmitFlow` is the flow
    /// rules', `flows.rs`, which submit each step here).
    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::SubmitJob { spec } => self.submit(spec),
            Command::SubmitBatch { batch } => self.submit_batch(batch),
            Command::ReplanBatchJob { job, tasks } => self.replan_batch_job(job, tasks),
            _ => Outcome::Rejected("not a submission".into()),
        }
    }

    /// Submits one job: validated, admitted (S1), its tasks pending in id order.
    pub(super) fn submit(&mut self, mut spec: JobSpec) -> Outcome {
        // Every job it follows must be here (checked before any id is handed out); its
        // edges are recorded after the command (`ClusterState::follow_dependencies`).
        let checked = self.precheck(&spec).and_then(|candidates| {
            super::dependencies::check_dependencies(self.jobs, &spec)
                .map(|()| candidates)
                .map_err(|r| r.to_string())
        });
        let candidates = match checked {
            Ok(c) => c,
            Err(why) => return Outcome::Rejected(why),
        };
        let partition = partition_of(&spec).to_string();
        let admitted = crate::policy::quota::admit(
            self.priority,
            &spec.user,
            &partition,
            &spec.resources,
            spec.count,
            |who| self.quota_usage(who, &partition),
        );
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
            submitted_ms: self.at_ms,
            submitted_index: self.index,
            finished_ms: None,
            open: tasks.len() as u32,
            candidates,
        });
        Outcome::Submitted { job: id, tasks }
    }

    /// What [`submit`](Self::submit) checks of `spec` alone, changing nothing (its
    /// dependencies aside): valid, `--no-preempt` allowed, locality names known; the
    /// locality candidates.
    pub(super) fn precheck(&self, spec: &JobSpec) -> Result<Vec<hetsched_common::NodeId>, String> {
        spec.validate().map_err(|e| e.to_string())?;
        self.may_protect(spec, partition_of(spec))?;
        self.nodes.resolve_all(&spec.nodes)
    }

    /// `--no-preempt` needs the configured minimum priority.
    fn may_protect(&self, spec: &JobSpec, partition: &str) -> Result<(), String> {
        if !spec.no_preempt {
            return Ok(());
        }
        let p = self.priority.priority_of(&spec.user, partition);
        match self.priority.protect_min_priority {
            Some(min) if p >= min => Ok(()),
            Some(min) => Err(format!(
                "--no-preempt needs priority {min} or more; user {:?} has {p} in partition {partition:?}",
                spec.user
            )),
            None => Err(
                "--no-preempt is not enabled (protect_min_priority is not configured)".into(),
            ),
        }
    }

    /// What `who`'s non-final tasks holding its quota use in `partition`.
    fn quota_usage(&self, who: &Principal, partition: &str) -> Usage {
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

    /// Applies a planned batch: every job is checked first, so the batch is submitted
    /// whole or not at all.
    pub(super) fn submit_batch(&mut self, mut spec: BatchSpec) -> Outcome {
        if let Err(why) = self.check_batch(&spec) {
            return Outcome::Rejected(why);
        }
        let id = self.batch.allocate_id();
        let mut jobs = Vec::with_capacity(spec.jobs.len());
        let mut all_tasks = Vec::new();
        for (i, mut j) in std::mem::take(&mut spec.jobs).into_iter().enumerate() {
            let (job, tasks) = match self.submit(std::mem::take(&mut j.spec)) {
                Outcome::Submitted { job, tasks } => (job, tasks),
                // Checked above: cannot happen; what applied so far stays consistent.
                other => return other,
            };
            self.batch.add_job(id, i as u32, job, &tasks, j);
            jobs.push(job);
            all_tasks.extend(tasks);
        }
        self.batch.add_batch(id, self.at_ms, spec, jobs.clone());
        Outcome::BatchSubmitted {
            batch: id,
            jobs,
            tasks: all_tasks,
        }
    }

    /// Every job of the batch valid, pinning its tasks itself (to registered nodes, with
    /// known blocks), one task per planned core; else why not.
    fn check_batch(&self, spec: &BatchSpec) -> Result<(), String> {
        if spec.jobs.is_empty() {
            return Err("a batch needs at least one job".into());
        }
        if spec.host_cores.len() != spec.hosts.len() {
            return Err("a batch needs a core count per host".into());
        }
        for (i, j) in spec.jobs.iter().enumerate() {
            j.spec
                .validate()
                .map_err(|e| format!("batch job {i}: {e}"))?;
            if j.spec.no_preempt || !j.spec.nodes.is_empty() {
                return Err(format!(
                    "batch job {i}: pins its tasks itself (no locality, no --no-preempt)"
                ));
            }
            if j.tasks.is_empty() || j.tasks.len() != j.spec.count as usize {
                return Err(format!("batch job {i}: one task per planned core"));
            }
            self.check_pins(j.blocks.len(), &j.tasks)
                .map_err(|e| format!("batch job {i}: {e}"))?;
        }
        Ok(())
    }

    /// Every pin and replica is a registered node, every block index within the job.
    fn check_pins(&self, blocks: usize, tasks: &[BatchTask]) -> Result<(), String> {
        for t in tasks {
            if !self.nodes.contains_key(&t.node) {
                return Err(format!("{} is not registered", t.node));
            }
            for b in &t.blocks {
                if b.block as usize >= blocks || !self.nodes.contains_key(&b.read_from) {
                    return Err(format!(
                        "block {} (read from {}) is unknown",
                        b.block, b.read_from
                    ));
                }
            }
        }
        Ok(())
    }

    /// Re-pins pending tasks of a batch job with new blocks (a planned slave was lost):
    /// every named task must be a pending task of the job, else nothing changes.
    pub(super) fn replan_batch_job(
        &mut self,
        job: JobId,
        tasks: Vec<(TaskId, BatchTask)>,
    ) -> Outcome {
        let Some(bj) = self.batch.jobs.get(&job) else {
            return Outcome::Rejected(format!("{job} is not a batch job"));
        };
        let blocks = bj.blocks.len();
        let stale = tasks.iter().any(|(t, _)| {
            self.tasks
                .get(t)
                .is_none_or(|t| t.job != job || t.status.state != TaskState::Pending)
        });
        if tasks.is_empty() || stale {
            return Outcome::Ignored(format!("re-plan of {job} is stale"));
        }
        let new: Vec<BatchTask> = tasks.iter().map(|(_, b)| b.clone()).collect();
        if let Err(why) = self.check_pins(blocks, &new) {
            return Outcome::Rejected(why);
        }
        let n = self.batch.repin(job, tasks);
        Outcome::BatchReplanned { job, tasks: n }
    }
}

#[cfg(test)]
#[path = "submit_tests.rs"]
mod tests;
