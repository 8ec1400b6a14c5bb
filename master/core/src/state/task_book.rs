//! The task book: every task of every retained job. It owns the task table, the next task
//! id, the pending queue (lower id = submitted earlier) and the preemptors waiting for their
//! victims to stop; it fences reports to a task's current attempt and keeps what only the
//! task record holds (its call summary, its CPU search's end). A task's moves between states
//! change its node and its job too, so they are the rules of the handlers (`grants.rs`,
//! `reports.rs`, ...); this book keeps the table and the queue consistent under them (a
//! forgotten task leaves both).

use super::command::{Outcome, TaskRef};
use super::listing::TASK_STATES;
use super::model::{CpuSearchPhase, Task};
use hetsched_common::program::CallSummary;
use hetsched_common::{Attempt, NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// A preemptor's node and the victims it waits for.
pub type Awaited = (NodeId, Vec<TaskRef>);

/// Tasks by id, the next task id, the pending queue and the waiting preemptors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskBook {
    /// Tasks by id.
    tasks: BTreeMap<TaskId, Task>,
    /// Pending tasks in queue order (lower id = submitted earlier).
    pending: BTreeSet<TaskId>,
    /// Preemptors waiting for their victims to stop: node and victims.
    awaiting: BTreeMap<TaskId, Awaited>,
    /// The last task id handed out.
    next: u64,
    /// Issue 55: the tasks handed out for change by the entry being applied (not state).
    touched: Touched,
}

/// The tasks an entry handed out for change: what the master's event stream compares
/// (issue 55). Not state: never encoded, equal to any other, emptied before each entry.
#[derive(Clone, Debug, Default)]
pub struct Touched(BTreeSet<TaskId>);

impl PartialEq for Touched {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Touched {}

impl TaskBook {
    /// The book a snapshot describes.
    pub(super) fn from_snapshot(
        tasks: BTreeMap<TaskId, Task>,
        pending: BTreeSet<TaskId>,
        awaiting: BTreeMap<TaskId, Awaited>,
        next: u64,
    ) -> Self {
        Self {
            tasks,
            pending,
            awaiting,
            next,
            touched: Touched::default(),
        }
    }

    /// A copy with only the tasks `keep` names (and the whole queue and waiting list), for
    /// planning.
    pub(super) fn planning_copy<'a>(&self, keep: impl Iterator<Item = &'a TaskId>) -> Self {
        Self {
            tasks: keep
                .filter_map(|t| self.tasks.get(t).map(|task| (*t, task.clone())))
                .collect(),
            pending: self.pending.clone(),
            awaiting: self.awaiting.clone(),
            next: self.next,
            touched: Touched::default(),
        }
    }

    /// Tasks by id.
    pub fn all(&self) -> &BTreeMap<TaskId, Task> {
        &self.tasks
    }

    /// Test hook, only with the `forge` feature: the task table, mutable.
    #[cfg(feature = "forge")]
    pub(super) fn all_mut(&mut self) -> &mut BTreeMap<TaskId, Task> {
        &mut self.tasks
    }

    /// Test hook, only with the `forge` feature: the pending queue, mutable.
    #[cfg(feature = "forge")]
    pub(super) fn pending_mut(&mut self) -> &mut BTreeSet<TaskId> {
        &mut self.pending
    }

    /// The last task id handed out (for snapshots).
    pub(super) fn next_id(&self) -> u64 {
        self.next
    }

    /// One task.
    pub fn get(&self, id: &TaskId) -> Option<&Task> {
        self.tasks.get(id)
    }

    /// One task, to change.
    pub(super) fn get_mut(&mut self, id: &TaskId) -> Option<&mut Task> {
        let task = self.tasks.get_mut(id)?;
        self.touched.0.insert(*id);
        Some(task)
    }

    /// The tasks the last entry handed out for change (added or changed; maybe unchanged).
    pub fn touched(&self) -> &BTreeSet<TaskId> {
        &self.touched.0
    }

    /// Starts a new entry's list of touched tasks.
    pub(super) fn clear_touched(&mut self) {
        self.touched.0.clear();
    }

    /// Whether `id` is in the table.
    pub fn contains_key(&self, id: &TaskId) -> bool {
        self.tasks.contains_key(id)
    }

    /// Every task, by id.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Task> {
        self.tasks.values()
    }

    /// Hands out the next task id (in apply order, so the same on every replica; a job's
    /// tasks get consecutive ids).
    pub(super) fn allocate_id(&mut self) -> TaskId {
        self.next += 1;
        TaskId(self.next)
    }

    /// Adds a task.
    pub(super) fn insert(&mut self, id: TaskId, task: Task) {
        self.touched.0.insert(id);
        self.tasks.insert(id, task);
    }

    /// Forgets a task (its job was collected): out of the table and the queue. Whether it
    /// was in the table. The waiting list is left as it is, as collection always left it: a
    /// preemptor still waiting is pending, so its job is open and never collected, and
    /// replicas of older binaries must reach the same state.
    pub(super) fn forget(&mut self, id: &TaskId) -> bool {
        self.pending.remove(id);
        self.tasks.remove(id).is_some()
    }

    /// Whether `task` existed once and was garbage-collected with its job.
    pub fn was_collected(&self, task: TaskId) -> bool {
        task.0 >= 1 && task.0 <= self.next && !self.tasks.contains_key(&task)
    }

    /// Pending tasks in queue order.
    pub fn pending(&self) -> &BTreeSet<TaskId> {
        &self.pending
    }

    /// Puts a task in the pending queue (its place is its id).
    pub(super) fn enqueue(&mut self, id: TaskId) {
        self.pending.insert(id);
    }

    /// Takes a task out of the pending queue; whether it was there.
    pub(super) fn dequeue(&mut self, id: &TaskId) -> bool {
        self.pending.remove(id)
    }

    /// Preemptors waiting for their victims to stop.
    pub fn awaiting(&self) -> &BTreeMap<TaskId, Awaited> {
        &self.awaiting
    }

    /// `preemptor` waits on `node` for `victims` to stop.
    pub(super) fn await_victims(&mut self, preemptor: TaskId, node: NodeId, victims: Vec<TaskRef>) {
        self.awaiting.insert(preemptor, (node, victims));
    }

    /// `preemptor` waits no more (placed, cancelled or gone).
    pub(super) fn stop_awaiting(&mut self, preemptor: &TaskId) {
        self.awaiting.remove(preemptor);
    }

    /// The task's current attempt on `node`, if the report is about it (fencing): a stale
    /// attempt or node is answered `Ignored`, an unknown task `Rejected`.
    pub(super) fn current(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> Result<&Task, Outcome> {
        let t = self
            .tasks
            .get(&task)
            .ok_or_else(|| Outcome::Rejected(format!("unknown {task}")))?;
        if t.status.attempt != attempt || t.status.node != Some(node) {
            return Err(Outcome::Ignored(format!(
                "stale report: {task} is at attempt {} on {:?}",
                t.status.attempt, t.status.node
            )));
        }
        Ok(t)
    }

    /// Keeps a program task's calls in brief, as the slave of its current attempt reported.
    pub(super) fn record_calls(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        summary: CallSummary,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.tasks.get_mut(&task) {
            Some(t) => {
                t.calls = Some(summary);
                Outcome::TaskUpdated
            }
            None => Outcome::Rejected(format!("unknown {task}")),
        }
    }

    /// S3.2: `task`'s CPU-count search found its count; whether the task is known.
    pub(super) fn search_done(&mut self, task: TaskId) -> bool {
        let Some(t) = self.tasks.get_mut(&task) else {
            return false;
        };
        t.cpu_search = Some(CpuSearchPhase::Done);
        true
    }

    /// Task counts by state name (every state present).
    pub fn counts(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = TASK_STATES
            .iter()
            .map(|s| (s.as_str().to_string(), 0))
            .collect();
        for t in self.tasks.values() {
            *m.entry(t.status.state.as_str().to_string()).or_insert(0) += 1;
        }
        m
    }
}

#[cfg(test)]
#[path = "task_book_tests.rs"]
mod tests;
