//! Issue 51 — workflow rules that span books: a job's dependencies at its submission, the
//! cascade when a job (or one task of it) ends, and what the scheduler's gate
//! (`sched/pipeline/dependency_stage.rs`) and the views read.
//!
//! ```text
//! submit D (after U)   ── U unknown or collected ──▶ rejected (nothing changes)
//!        │             ── U already ended so D can never start ──▶ D cancelled, same entry
//!        ▼
//! D's tasks pending; the gate holds them until U ended as D needs (read from this state)
//! U's last task final ── D can never start ──▶ D's pending tasks cancelled, reason
//!        │                                      `dependency`, detail "job-U failed (after)",
//!        │                                      and D's own dependents after it (transitive)
//!        ▼
//! D finished ──▶ its edges resolved; U may be garbage-collected again
//! ```
//!
//! Everything happens inside the entry that ends the job it follows: nothing extra is
//! proposed, so every replica cancels the same tasks at the same index. The cascade walks a
//! work list (never recursion: a chain may be 10,000 jobs long) and finds dependents in the
//! [`DependencyBook`] (never a scan of every job). A job with open dependents is kept out
//! of the job book's finishing order, so garbage collection cannot take it.
//!
//! Dependencies are monotone: once met they stay met (a job's end is final), so the cascade
//! only ever cancels tasks that are still pending and hold nothing.
//!
//! Two types: [`DependencyView`] reads (what the gate, `explain` and the views ask) and
//! [`DependencyRules`] changes, borrowing the job, task and dependency books only — a
//! cancelled dependent holds no node resources, so the node book is not touched. The rules
//! run after every entry's command, on the tasks the job book noted final
//! ([`JobBook::take_ended`]), until nothing more ends: the work list is the job book's note.

use super::dependency_book::DependencyBook;
use super::job_book::JobBook;
use super::model::Job;
use super::task_book::TaskBook;
use hetsched_common::{AfterMode, DependencyKind, JobId, JobSpec, TaskId, TaskReason, TaskState};
use std::collections::BTreeMap;

/// What a task's dependencies say now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DepState {
    /// It may start.
    Met,
    /// Not yet: the jobs it waits for and their states, in words.
    Waiting(String),
    /// Never: what made it impossible (the job and its state), in words.
    Never(String),
}

/// Job states already read (a plan reads each upstream job's state once).
#[derive(Clone, Debug, Default)]
pub struct JobStates(BTreeMap<JobId, &'static str>);

impl JobStates {
    /// `job`'s state ([`DependencyView::job_state`]), `gone` when it is not there.
    pub fn of(&mut self, view: &DependencyView<'_>, job: JobId) -> &'static str {
        self.0
            .entry(job)
            .or_insert_with(|| view.jobs.get(&job).map_or("gone", |j| view.job_state(j)))
    }
}

/// Whether a job state is an end.
fn ended(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled")
}

/// How many waiting dependencies a task's `waiting` detail names (the others counted).
const SHOWN: usize = 3;

/// One dependency, met or not, without the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Met,
    Waiting,
    Never,
}

/// Tasks to cancel per job, each with the detail of its end.
type Doomed = BTreeMap<JobId, Vec<(TaskId, String)>>;

/// Reads what dependencies say, over the job, task and dependency books.
#[derive(Clone, Copy)]
pub struct DependencyView<'a> {
    /// Jobs and their specs.
    pub(super) jobs: &'a JobBook,
    /// Task states.
    pub(super) tasks: &'a TaskBook,
    /// Dependents and singletons.
    pub(super) deps: &'a DependencyBook,
}

impl DependencyView<'_> {
    /// A job's state as `jobs` lists it: `pending` (nothing started), `running`,
    /// `succeeded` (every task), `cancelled` (all final, some cancelled), `failed`.
    pub fn job_state(&self, j: &Job) -> &'static str {
        let (mut succeeded, mut finals, mut cancelled, mut pending) = (0usize, 0usize, 0, 0);
        for t in j.tasks.iter().filter_map(|t| self.tasks.get(t)) {
            match t.status.state {
                TaskState::Succeeded => succeeded += 1,
                TaskState::Cancelled => cancelled += 1,
                TaskState::Pending => pending += 1,
                _ => {}
            }
            finals += usize::from(t.status.state.is_final());
        }
        let total = j.tasks.len();
        if succeeded == total {
            "succeeded"
        } else if finals == total && cancelled > 0 {
            "cancelled"
        } else if finals == total {
            "failed"
        } else if pending == total {
            "pending"
        } else {
            "running"
        }
    }

    /// What one dependency of task `index` says now.
    pub fn dependency_item(
        &self,
        kind: DependencyKind,
        up: JobId,
        index: u32,
        states: &mut JobStates,
    ) -> DepState {
        let verdict = self.verdict(kind, up, index, states);
        if verdict == Verdict::Met {
            return DepState::Met;
        }
        let key = kind.key();
        let words = match (kind, self.task_of(up, index)) {
            (DependencyKind::AfterEach, None) => format!("task {index} of {up} gone ({key})"),
            (DependencyKind::AfterEach, Some(t)) => {
                format!("task {index} of {up} {} ({key})", t.status.state)
            }
            _ => format!("{up} {} ({key})", states.of(self, up)),
        };
        match verdict {
            Verdict::Never => DepState::Never(words),
            _ => DepState::Waiting(words),
        }
    }

    /// Task `index` of job `up`, while the job is kept.
    fn task_of(&self, up: JobId, index: u32) -> Option<&super::model::Task> {
        self.jobs
            .get(&up)
            .and_then(|j| j.tasks.get(index as usize))
            .and_then(|t| self.tasks.get(t))
    }

    /// Whether one dependency of task `index` is met, not yet, or never — as
    /// [`dependency_item`](Self::dependency_item) says, without the words.
    fn verdict(
        &self,
        kind: DependencyKind,
        up: JobId,
        index: u32,
        states: &mut JobStates,
    ) -> Verdict {
        if kind == DependencyKind::AfterEach {
            return match self.task_of(up, index).map(|t| t.status.state) {
                Some(TaskState::Succeeded) => Verdict::Met,
                Some(s) if s.is_final() => Verdict::Never,
                _ => Verdict::Waiting,
            };
        }
        let state = states.of(self, up);
        if !ended(state) {
            return Verdict::Waiting;
        }
        match (kind, state) {
            (DependencyKind::After, "succeeded")
            | (DependencyKind::AfterAny, _)
            | (DependencyKind::AfterFail, "failed" | "cancelled") => Verdict::Met,
            _ => Verdict::Never,
        }
    }

    /// The words of a dependency that is not met.
    fn detail(
        &self,
        kind: DependencyKind,
        up: JobId,
        index: u32,
        states: &mut JobStates,
    ) -> String {
        match self.dependency_item(kind, up, index, states) {
            DepState::Waiting(d) | DepState::Never(d) => d,
            DepState::Met => String::new(),
        }
    }

    /// What the dependencies of task `index` of `job` say now, combined by its
    /// `after_mode` (a job without dependencies: met). A fan-in job may follow thousands:
    /// the first [`SHOWN`] that wait are named, the others counted, and only those named
    /// are put in words (the gate and the cascade ask this per plan and per end).
    pub fn dependency_state(&self, job: &Job, index: u32, states: &mut JobStates) -> DepState {
        let (mut met, mut waiting, mut never, mut unnamed) = (0usize, Vec::new(), Vec::new(), 0);
        for (kind, up) in job.spec.dependencies() {
            match self.verdict(kind, up, index, states) {
                Verdict::Met => met += 1,
                Verdict::Waiting if waiting.len() < SHOWN => {
                    waiting.push(self.detail(kind, up, index, states))
                }
                Verdict::Waiting => unnamed += 1,
                Verdict::Never if job.spec.after_mode == AfterMode::All => {
                    return DepState::Never(self.detail(kind, up, index, states))
                }
                Verdict::Never => never.push(self.detail(kind, up, index, states)),
            }
        }
        if unnamed > 0 {
            waiting.push(format!("and {unnamed} more"));
        }
        match job.spec.after_mode {
            AfterMode::All if waiting.is_empty() => DepState::Met,
            AfterMode::All => DepState::Waiting(waiting.join("; ")),
            AfterMode::Any if met > 0 || waiting.len() + never.len() == 0 => DepState::Met,
            AfterMode::Any if waiting.is_empty() => {
                DepState::Never(format!("none can be met: {}", never.join("; ")))
            }
            AfterMode::Any => DepState::Waiting(format!("any of: {}", waiting.join("; "))),
        }
    }

    /// Whether the dependencies of task `index` of `job` on `up` alone can never be met
    /// (its words if so). In mode `all` that is enough after `up` ended: a task still
    /// pending had no impossible dependency before (it would have been cancelled then).
    fn never_through(
        &self,
        job: &Job,
        up: JobId,
        index: u32,
        states: &mut JobStates,
    ) -> Option<String> {
        job.spec
            .dependencies()
            .filter(|(_, u)| *u == up)
            .find(|(kind, _)| self.verdict(*kind, up, index, states) == Verdict::Never)
            .map(|(kind, _)| self.detail(kind, up, index, states))
    }

    /// Tasks of `job` assigned or running (what `max_running` bounds).
    pub fn tasks_under_way(&self, job: &Job) -> u32 {
        job.tasks
            .iter()
            .filter_map(|t| self.tasks.get(t))
            .filter(|t| matches!(t.status.state, TaskState::Assigned | TaskState::Running))
            .count() as u32
    }

    /// The open singleton job of `job`'s user and name, other than `job`, that is under
    /// way: one of its tasks was ever assigned. Lowest id first.
    pub fn singleton_holder(&self, job: &Job) -> Option<JobId> {
        self.deps
            .singletons(&job.spec.user, &job.spec.name)
            .filter(|j| *j != job.id)
            .find(|j| {
                self.jobs.get(j).is_some_and(|o| {
                    o.tasks
                        .iter()
                        .filter_map(|t| self.tasks.get(t))
                        .any(|t| t.status.attempt > 0)
                })
            })
    }
}

/// Why a submission's dependencies cannot be recorded: the edge answers the first kind
/// "not found" (exit 4) and the second "invalid" (exit 2); `apply` rejects either.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DependencyRefusal {
    /// A job it names is unknown or was collected.
    #[error("{0}")]
    Missing(String),
    /// `after_each` names a job with another number of tasks.
    #[error("{0}")]
    EachCount(String),
}

/// Checks a submission's dependencies against the jobs there now (in `apply` before any id
/// is handed out, and at the edge before proposing).
pub(super) fn check_dependencies(jobs: &JobBook, spec: &JobSpec) -> Result<(), DependencyRefusal> {
    for (kind, up) in spec.dependencies() {
        let Some(u) = jobs.get(&up) else {
            return Err(DependencyRefusal::Missing(format!(
                "{} {up}: {}",
                kind.flag(),
                jobs.missing_message(up)
            )));
        };
        if kind == DependencyKind::AfterEach && u.tasks.len() != spec.count as usize {
            return Err(DependencyRefusal::EachCount(format!(
                "--after-each {up}: it has {} task(s), this job {} (task i follows task i: \
                 the counts must match; give --count {})",
                u.tasks.len(),
                spec.count,
                u.tasks.len()
            )));
        }
    }
    Ok(())
}

/// The dependency rules. Spans the job book (a dependent's tasks end, a followed job is kept
/// from collection), the task book (the cancelled tasks) and the dependency book (the edges);
/// cancelled dependents are pending and hold nothing, so no node is touched.
pub(super) struct DependencyRules<'a> {
    /// Jobs: their open counts, finishing order and the note of what ended.
    pub jobs: &'a mut JobBook,
    /// Tasks the cascade cancels.
    pub tasks: &'a mut TaskBook,
    /// The edges.
    pub deps: &'a mut DependencyBook,
    /// The entry's time.
    pub now_ms: u64,
}

impl DependencyRules<'_> {
    fn view(&self) -> DependencyView<'_> {
        DependencyView {
            jobs: self.jobs,
            tasks: self.tasks,
            deps: self.deps,
        }
    }

    /// After a submission of `job`: records its edges, keeps the jobs it follows from
    /// garbage collection, and cancels at once the tasks whose dependencies ended the wrong
    /// way already.
    pub(super) fn follow_submit(&mut self, job: JobId) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        if !j.spec.is_gated() {
            return;
        }
        self.deps.add(j);
        let count = j.tasks.len() as u32;
        let held: Vec<(u64, JobId)> = j
            .spec
            .dependencies()
            .filter_map(|(_, up)| {
                self.jobs
                    .get(&up)
                    .and_then(|u| u.finished_ms)
                    .map(|f| (f, up))
            })
            .collect();
        for key in held {
            self.jobs.unmark_finished(key);
        }
        let mut doomed = Doomed::new();
        self.doom_never_met(job, None, 0..count, &mut JobStates::default(), &mut doomed);
        self.cancel_doomed(doomed);
        self.settle();
    }

    /// Settles every task the job book noted final in this entry: cancels what can never
    /// start because of it, transitively (the cancellations are noted in turn), and
    /// resolves the edges of every job that finished.
    pub(super) fn settle(&mut self) {
        loop {
            let ended = self.jobs.take_ended();
            if ended.is_empty() {
                return;
            }
            for (up, tasks) in ended {
                self.tasks_ended(up, &tasks);
            }
        }
    }

    /// `ended` tasks of `up` became final: its `after_each` dependents' matching tasks, and
    /// once `up` finished all its dependents' tasks, are cancelled where they can never
    /// start.
    fn tasks_ended(&mut self, up: JobId, ended: &[TaskId]) {
        let Some(u) = self.jobs.get(&up) else {
            return;
        };
        let finished = u.open == 0 && u.finished_ms.is_some();
        let mut doomed = Doomed::new();
        let mut states = JobStates::default();
        let each: Vec<JobId> = self.deps.each_dependents(up).collect();
        if !each.is_empty() {
            let indexes: Vec<u32> = ended
                .iter()
                .filter_map(|t| self.tasks.get(t).map(|t| t.index))
                .collect();
            for d in each {
                self.doom_never_met(
                    d,
                    Some(up),
                    indexes.iter().copied(),
                    &mut states,
                    &mut doomed,
                );
            }
        }
        if finished {
            let dependents: Vec<JobId> = self.deps.dependents(up).collect();
            for d in dependents {
                let n = self.jobs.get(&d).map_or(0, |j| j.tasks.len() as u32);
                self.doom_never_met(d, Some(up), 0..n, &mut states, &mut doomed);
            }
        }
        self.cancel_doomed(doomed);
        if finished {
            self.job_resolved(up);
        }
    }

    /// Adds to `doomed` the pending tasks of `job` among `indexes` whose dependencies can
    /// never be met any more: all its edges at its submission (`up` none), else now that
    /// tasks of `up` ended (in mode `all`, only its edges from `up` are read: a fan-in
    /// job's cascade costs one edge per end, not all of them).
    fn doom_never_met(
        &self,
        job: JobId,
        up: Option<JobId>,
        indexes: impl Iterator<Item = u32>,
        states: &mut JobStates,
        doomed: &mut Doomed,
    ) {
        let view = self.view();
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        for i in indexes {
            let Some(t) = j.tasks.get(i as usize).and_then(|t| self.tasks.get(t)) else {
                continue;
            };
            if t.status.state != TaskState::Pending {
                continue;
            }
            let never = match (j.spec.after_mode, up) {
                (AfterMode::All, Some(up)) => view.never_through(j, up, i, states),
                _ => match view.dependency_state(j, i, states) {
                    DepState::Never(detail) => Some(detail),
                    _ => None,
                },
            };
            if let Some(detail) = never {
                doomed.entry(job).or_default().push((t.id, detail));
            }
        }
    }

    /// Cancels `doomed` tasks (reason `dependency`); the job book notes them final, so
    /// [`settle`](Self::settle) follows them in turn.
    fn cancel_doomed(&mut self, doomed: Doomed) {
        for (job, list) in doomed {
            let mut cancelled = Vec::with_capacity(list.len());
            for (task, detail) in list {
                let Some(t) = self.tasks.get_mut(&task) else {
                    continue;
                };
                if t.status.state != TaskState::Pending || t.status.cancel().is_err() {
                    continue;
                }
                t.status.reason = Some(TaskReason::Dependency);
                t.status.explain_reason(Some(detail));
                t.not_before_ms = None;
                self.tasks.dequeue(&task);
                self.tasks.stop_awaiting(&task);
                cancelled.push(task);
            }
            self.jobs.tasks_final(job, &cancelled, self.now_ms);
        }
    }

    /// `job` finished: kept from garbage collection while jobs still follow it; its own
    /// edges are resolved, and the jobs it followed that have no dependent left may be
    /// collected again.
    fn job_resolved(&mut self, job: JobId) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        let held = j.finished_ms.filter(|_| self.deps.has_dependents(job));
        let freed = if j.spec.is_gated() {
            self.deps.resolve(j)
        } else {
            Vec::new()
        };
        if let Some(f) = held {
            self.jobs.unmark_finished((f, job));
        }
        for up in freed {
            self.jobs.mark_finished(up);
        }
    }

    /// After a restore: the book from the open jobs, and the jobs they follow out of the
    /// finishing order.
    pub(super) fn rebuild(&mut self) {
        *self.deps = DependencyBook::of(self.jobs.values());
        let held: Vec<(u64, JobId)> = self
            .deps
            .upstreams()
            .filter_map(|u| {
                self.jobs
                    .get(&u)
                    .and_then(|j| j.finished_ms)
                    .map(|f| (f, u))
            })
            .collect();
        for key in held {
            self.jobs.unmark_finished(key);
        }
    }
}

#[cfg(test)]
#[path = "dependencies_tests.rs"]
mod tests;
