//! The slave's local queue: which tasks it holds, in which phase, and which may start now.
//!
//! Pure bookkeeping — no processes, files or clocks — so every rule here is unit-tested and
//! work stealing can later take queued entries out of it. The agent ([`crate::agent`]) does the
//! I/O each decision implies (persist, spawn, kill, report).
//!
//! A task is held under exactly one attempt at a time: an assignment of a higher attempt
//! replaces whatever the lower one was doing (the master has re-queued it, so the old run and
//! its result are stale). A process of a replaced attempt that is still being killed is kept in
//! `draining` so that its cores stay accounted and the new attempt does not start beside it.

use hetsched_common::protocol::{Assignment, HeldPhase, HeldTask};
use hetsched_common::{Attempt, TaskId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Phase of a held task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, waiting for cores.
    Queued,
    /// Its process runs.
    Running,
    /// Its process ended; the result waits for the master's acknowledgement.
    Finished {
        /// Exit code (see [`crate::attempt::exit_code_of`]).
        exit_code: i32,
    },
}

impl From<Phase> for HeldPhase {
    fn from(p: Phase) -> Self {
        match p {
            Phase::Queued => HeldPhase::Queued,
            Phase::Running => HeldPhase::Running,
            Phase::Finished { exit_code } => HeldPhase::Finished { exit_code },
        }
    }
}

/// One held task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What the master assigned.
    pub assignment: Assignment,
    /// Where it is.
    pub phase: Phase,
}

/// What [`LocalQueue::offer`] decided about an assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// New: queued.
    Queued,
    /// The same task and attempt is already held (or was finished and acknowledged): nothing
    /// to do but acknowledge again.
    Duplicate,
    /// Queued, replacing a lower attempt of the same task that was in `old_phase`; when that
    /// was `Running` the caller must kill the old process.
    Superseded {
        /// The replaced attempt.
        old_attempt: Attempt,
        /// Its phase when replaced.
        old_phase: Phase,
    },
    /// A lower attempt than the one held: refused.
    Stale {
        /// The attempt held (or last completed).
        held: Attempt,
    },
}

/// What [`LocalQueue::stop`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It was only queued: removed, nothing ran.
    Dequeued,
    /// It runs: the caller kills its process group; the exit is recorded as its result.
    Kill,
    /// Not held under that attempt, or already finished: nothing to do.
    NotRunning,
}

/// The local queue of one slave.
#[derive(Clone, Debug)]
pub struct LocalQueue {
    /// Cores the node offers, in millicores: a sanity bound on what runs at once (the master
    /// only assigns what fits, so normally everything starts at once).
    cpu_capacity_milli: u64,
    /// Millicores of the processes running now, superseded ones included.
    cpu_running_milli: u64,
    /// Held tasks.
    entries: BTreeMap<TaskId, Entry>,
    /// Queued tasks in arrival order (FIFO; the head blocks those behind it so a large task
    /// is not starved by small ones).
    order: VecDeque<TaskId>,
    /// Processes of superseded attempts still being killed, with their millicores.
    draining: BTreeMap<(TaskId, Attempt), u64>,
    /// Highest attempt per task whose result the master acknowledged, so that a late duplicate
    /// `Assign` does not run it again.
    done: BTreeMap<TaskId, Attempt>,
    /// S0.3: queued assignments (`Assignment::queued`) the leader promoted and that have
    /// not started yet. Not persisted: after a restart the slave asks again.
    promoted: BTreeSet<(TaskId, Attempt)>,
}

impl LocalQueue {
    /// An empty queue for a node of `cpu_capacity_milli`.
    pub fn new(cpu_capacity_milli: u64) -> Self {
        Self {
            cpu_capacity_milli,
            cpu_running_milli: 0,
            entries: BTreeMap::new(),
            order: VecDeque::new(),
            draining: BTreeMap::new(),
            done: BTreeMap::new(),
            promoted: BTreeSet::new(),
        }
    }

    /// Restores a task loaded from storage, in storage order. A task that was `Running` when
    /// the slave stopped stays `Running` (its cores stay taken): the agent re-adopts its
    /// supervisor or reports how it ended — an attempt never starts twice.
    pub fn restore(&mut self, assignment: Assignment, phase: Phase) {
        let task = assignment.task;
        if phase == Phase::Queued && !self.order.contains(&task) {
            self.order.push_back(task);
        }
        if phase == Phase::Running {
            self.cpu_running_milli = self
                .cpu_running_milli
                .saturating_add(assignment.resources.cpu_milli);
        }
        self.entries.insert(task, Entry { assignment, phase });
    }

    /// Drops the oldest records of acknowledged attempts beyond [`DONE_KEPT`] (docs/CONTRACT.md,
    /// Retention: slaves drop acknowledged results); returns the tasks forgotten, for the
    /// store to forget too. A master never sends an attempt it has seen finish, so only a
    /// duplicate still in flight needs the record, and it arrives within seconds.
    pub fn prune_done(&mut self) -> Vec<TaskId> {
        let mut gone = Vec::new();
        while self.done.len() > DONE_KEPT {
            match self.done.pop_first() {
                Some((t, _)) => gone.push(t),
                None => break,
            }
        }
        gone
    }

    /// Restores the record of an acknowledged (task, attempt).
    pub fn restore_done(&mut self, task: TaskId, attempt: Attempt) {
        let e = self.done.entry(task).or_insert(attempt);
        *e = (*e).max(attempt);
    }

    /// Decides about an assignment and applies the decision.
    pub fn offer(&mut self, a: Assignment) -> Offer {
        let task = a.task;
        if let Some(&done) = self.done.get(&task) {
            if a.attempt == done {
                return Offer::Duplicate;
            }
            if a.attempt < done {
                return Offer::Stale { held: done };
            }
        }
        let outcome = match self.entries.get(&task) {
            None => Offer::Queued,
            Some(e) if e.assignment.attempt == a.attempt => return Offer::Duplicate,
            Some(e) if e.assignment.attempt > a.attempt => {
                return Offer::Stale {
                    held: e.assignment.attempt,
                }
            }
            Some(e) => Offer::Superseded {
                old_attempt: e.assignment.attempt,
                old_phase: e.phase,
            },
        };
        if let Offer::Superseded {
            old_attempt,
            old_phase,
        } = outcome
        {
            match old_phase {
                Phase::Queued => self.order.retain(|t| *t != task),
                // Its cores stay taken until the killed process is seen to exit.
                Phase::Running => {
                    if let Some(old) = self.entries.get(&task) {
                        self.draining
                            .insert((task, old_attempt), old.assignment.resources.cpu_milli);
                    }
                }
                Phase::Finished { .. } => {}
            }
        }
        self.order.push_back(task);
        self.entries.insert(
            task,
            Entry {
                assignment: a,
                phase: Phase::Queued,
            },
        );
        outcome
    }

    /// Takes the next task that may start now and marks it `Running`. The head of the queue
    /// starts when its cores fit next to those running, or when nothing runs at all (a task
    /// larger than the node must still run once: the master decided it fits). It waits while a
    /// superseded process of the same task is being killed.
    ///
    /// S0.3: a queued assignment never starts before the leader promoted it
    /// ([`promote`](Self::promote)); until then the tasks behind it pass it.
    pub fn start_next(&mut self) -> Option<Assignment> {
        let &task = self
            .order
            .iter()
            .find(|t| self.entries.get(t).is_none_or(|e| self.may_start(e)))?;
        if self.draining.keys().any(|(t, _)| *t == task) {
            return None;
        }
        let Some(entry) = self.entries.get_mut(&task) else {
            // Cannot happen (order and entries change together); heal rather than stall.
            self.order.retain(|t| *t != task);
            return self.start_next();
        };
        let cpu = entry.assignment.resources.cpu_milli;
        let fits = self.cpu_running_milli == 0
            || self.cpu_running_milli.saturating_add(cpu) <= self.cpu_capacity_milli;
        if !fits {
            return None;
        }
        self.order.retain(|t| *t != task);
        self.promoted.remove(&(task, entry.assignment.attempt));
        entry.phase = Phase::Running;
        self.cpu_running_milli = self.cpu_running_milli.saturating_add(cpu);
        Some(entry.assignment.clone())
    }

    /// Records that a process of (task, attempt) ended. Returns true when that is the held
    /// attempt's run (its result must be persisted and reported); false for a superseded
    /// attempt (only its cores are freed) or an unknown one.
    pub fn finished(&mut self, task: TaskId, attempt: Attempt, exit_code: i32) -> bool {
        if let Some(cpu) = self.draining.remove(&(task, attempt)) {
            self.cpu_running_milli = self.cpu_running_milli.saturating_sub(cpu);
            return false;
        }
        match self.entries.get_mut(&task) {
            Some(e) if e.assignment.attempt == attempt => {
                match e.phase {
                    Phase::Running => {
                        self.cpu_running_milli = self
                            .cpu_running_milli
                            .saturating_sub(e.assignment.resources.cpu_milli);
                    }
                    Phase::Queued => self.order.retain(|t| *t != task),
                    Phase::Finished { .. } => return false,
                }
                e.phase = Phase::Finished { exit_code };
                true
            }
            _ => false,
        }
    }

    /// Records the master's acknowledgement of (task, attempt)'s result: the entry is
    /// forgotten. Returns true when something was removed.
    pub fn acked(&mut self, task: TaskId, attempt: Attempt) -> bool {
        match self.entries.get(&task) {
            Some(e)
                if e.assignment.attempt == attempt && matches!(e.phase, Phase::Finished { .. }) =>
            {
                self.entries.remove(&task);
                self.restore_done(task, attempt);
                true
            }
            _ => false,
        }
    }

    /// Decides about a `StopTask`. A queued task is removed at once.
    pub fn stop(&mut self, task: TaskId, attempt: Attempt) -> Stop {
        match self.entries.get(&task) {
            Some(e) if e.assignment.attempt == attempt => match e.phase {
                Phase::Queued => {
                    self.entries.remove(&task);
                    self.order.retain(|t| *t != task);
                    self.promoted.remove(&(task, attempt));
                    Stop::Dequeued
                }
                Phase::Running => Stop::Kill,
                Phase::Finished { .. } => Stop::NotRunning,
            },
            _ => Stop::NotRunning,
        }
    }

    /// S0.4: gives up (task, attempt) for another slave to steal, only if it is still
    /// queued (never once started). Returns whether it was released.
    pub fn release(&mut self, task: TaskId, attempt: Attempt) -> bool {
        match self.entries.get(&task) {
            Some(e) if e.assignment.attempt == attempt && e.phase == Phase::Queued => {
                self.entries.remove(&task);
                self.order.retain(|t| *t != task);
                self.promoted.remove(&(task, attempt));
                true
            }
            _ => false,
        }
    }

    /// Whether `e` may start as far as the leader is concerned: not a queued assignment, or
    /// one the leader promoted.
    fn may_start(&self, e: &Entry) -> bool {
        !e.assignment.queued
            || self
                .promoted
                .contains(&(e.assignment.task, e.assignment.attempt))
    }

    /// S0.3: the queued assignments to ask the leader to start: those still waiting for a
    /// promotion that fit, in queue order, beside what runs and what may start ahead of them
    /// (when nothing runs, the first always fits: the leader only queues what the node can
    /// hold).
    pub fn asks(&self) -> Vec<(TaskId, Attempt)> {
        let mut cpu = self.cpu_running_milli;
        let mut out = Vec::new();
        for t in &self.order {
            let Some(e) = self.entries.get(t) else {
                continue;
            };
            let need = e.assignment.resources.cpu_milli;
            if self.may_start(e) {
                cpu = cpu.saturating_add(need);
                continue;
            }
            if cpu != 0 && cpu.saturating_add(need) > self.cpu_capacity_milli {
                break;
            }
            cpu = cpu.saturating_add(need);
            out.push((*t, e.assignment.attempt));
        }
        out
    }

    /// S0.3: the leader committed the start of these queued attempts; those still queued
    /// here under that attempt may start. Returns how many were newly promoted.
    pub fn promote(&mut self, tasks: &[(TaskId, Attempt)]) -> usize {
        let mut n = 0;
        for &(task, attempt) in tasks {
            let waiting = self.entries.get(&task).is_some_and(|e| {
                e.assignment.attempt == attempt && e.phase == Phase::Queued && e.assignment.queued
            });
            if waiting && self.promoted.insert((task, attempt)) {
                n += 1;
            }
        }
        n
    }

    /// S0.4: whether this slave should ask the leader for work to steal: nothing waits in
    /// its queue and some of its cores are free.
    pub fn wants_work(&self) -> bool {
        self.order.is_empty() && self.cpu_running_milli < self.cpu_capacity_milli
    }

    /// The entry of `task`, if held.
    pub fn get(&self, task: TaskId) -> Option<&Entry> {
        self.entries.get(&task)
    }

    /// Everything held, for heartbeats and registration, in task order.
    pub fn held(&self) -> Vec<HeldTask> {
        self.entries
            .iter()
            .map(|(task, e)| HeldTask {
                task: *task,
                attempt: e.assignment.attempt,
                phase: e.phase.into(),
            })
            .collect()
    }

    /// Number of queued (not yet started) tasks.
    pub fn queued_len(&self) -> usize {
        self.order.len()
    }

    /// Millicores taken by running processes.
    pub fn cpu_running_milli(&self) -> u64 {
        self.cpu_running_milli
    }

    /// A running attempt's allocation changed live (S3 CPU search, compression): its cores
    /// are counted at the new size. Returns false when (task, attempt) does not run.
    pub fn set_cpus(&mut self, task: TaskId, attempt: Attempt, cpu_milli: u64) -> bool {
        match self.entries.get_mut(&task) {
            Some(e) if e.assignment.attempt == attempt && e.phase == Phase::Running => {
                let old = e.assignment.resources.cpu_milli;
                e.assignment.resources.cpu_milli = cpu_milli;
                self.cpu_running_milli = self
                    .cpu_running_milli
                    .saturating_sub(old)
                    .saturating_add(cpu_milli);
                true
            }
            _ => false,
        }
    }

    /// The running attempts, in task order.
    pub fn running(&self) -> Vec<&Assignment> {
        self.entries
            .values()
            .filter(|e| e.phase == Phase::Running)
            .map(|e| &e.assignment)
            .collect()
    }
}

/// Acknowledged attempts remembered (the most recent task ids), to refuse duplicates.
pub const DONE_KEPT: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::{JobId, ResourceRequest};

    fn asg(task: u64, attempt: Attempt, cpu_milli: u64) -> Assignment {
        Assignment {
            task: TaskId(task),
            job: JobId(1),
            index: task as u32,
            attempt,
            command: vec!["true".into()],
            env: Default::default(),
            resources: ResourceRequest {
                cpu_milli,
                mem_mib: 1,
                ..Default::default()
            },
            gpus: vec![],
            queued: false,
            engine: None,
            job_name: String::new(),
            workdir: None,
            image: None,
            run_as: None,
            network: None,
        }
    }

    #[test]
    fn fifo_respects_cpu_capacity() {
        let mut q = LocalQueue::new(2000);
        assert_eq!(q.offer(asg(1, 1, 1000)), Offer::Queued);
        assert_eq!(q.offer(asg(2, 1, 1000)), Offer::Queued);
        assert_eq!(q.offer(asg(3, 1, 1000)), Offer::Queued);
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(1)));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(2)));
        assert_eq!(q.start_next(), None, "third does not fit beside two");
        assert_eq!(q.queued_len(), 1);
        assert!(q.finished(TaskId(1), 1, 0));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(3)));
        assert_eq!(q.cpu_running_milli(), 2000);
    }

    #[test]
    fn a_queued_assignment_starts_only_once_promoted_and_others_pass_it() {
        let queued = |task, cpu| Assignment {
            queued: true,
            ..asg(task, 1, cpu)
        };
        let mut q = LocalQueue::new(2000);
        q.offer(asg(1, 1, 1000));
        q.offer(queued(2, 1000));
        q.offer(asg(3, 1, 500));
        q.offer(queued(4, 1000));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(1)));
        assert_eq!(
            q.start_next().map(|a| a.task),
            Some(TaskId(3)),
            "passes task 2"
        );
        assert_eq!(q.start_next(), None, "task 2 waits for the leader");
        assert_eq!(q.asks(), vec![], "no room by this slave's view");
        assert!(q.finished(TaskId(3), 1, 0));
        assert_eq!(q.asks(), vec![(TaskId(2), 1)], "room for one of them");
        assert_eq!(
            q.promote(&[(TaskId(4), 2), (TaskId(9), 1)]),
            0,
            "stale ones ignored"
        );
        assert_eq!(q.promote(&[(TaskId(2), 1)]), 1);
        assert_eq!(q.asks(), vec![], "the promoted one takes the room");
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(2)));
        assert!(q.finished(TaskId(1), 1, 0));
        assert!(q.finished(TaskId(2), 1, 0));
        assert_eq!(q.asks(), vec![(TaskId(4), 1)]);
        assert!(
            q.release(TaskId(4), 1),
            "an unpromoted queued task can be stolen"
        );
        assert_eq!(q.asks(), vec![]);
    }

    #[test]
    fn oversized_task_runs_alone() {
        let mut q = LocalQueue::new(1000);
        q.offer(asg(1, 1, 5000));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(1)));
        q.offer(asg(2, 1, 100));
        assert_eq!(q.start_next(), None);
    }

    #[test]
    fn duplicate_and_stale_assignments() {
        let mut q = LocalQueue::new(1000);
        q.offer(asg(1, 2, 100));
        assert_eq!(q.offer(asg(1, 2, 100)), Offer::Duplicate);
        assert_eq!(q.offer(asg(1, 1, 100)), Offer::Stale { held: 2 });
        assert_eq!(q.queued_len(), 1, "no second queue slot");
        q.start_next();
        assert_eq!(q.offer(asg(1, 2, 100)), Offer::Duplicate);
        assert_eq!(q.start_next(), None, "not started twice");
        assert!(q.finished(TaskId(1), 2, 0));
        assert!(q.acked(TaskId(1), 2));
        assert_eq!(
            q.offer(asg(1, 2, 100)),
            Offer::Duplicate,
            "acked stays done"
        );
        assert_eq!(q.start_next(), None);
        assert!(q.held().is_empty());
    }

    #[test]
    fn higher_attempt_supersedes_running_one_after_it_dies() {
        let mut q = LocalQueue::new(1000);
        q.offer(asg(1, 1, 600));
        q.start_next();
        assert_eq!(
            q.offer(asg(1, 2, 600)),
            Offer::Superseded {
                old_attempt: 1,
                old_phase: Phase::Running
            }
        );
        assert_eq!(q.start_next(), None, "waits for the old process");
        assert!(!q.finished(TaskId(1), 1, -15), "old result is not reported");
        assert_eq!(q.cpu_running_milli(), 0);
        assert_eq!(q.start_next().map(|a| a.attempt), Some(2));
        assert_eq!(
            q.held(),
            vec![HeldTask {
                task: TaskId(1),
                attempt: 2,
                phase: HeldPhase::Running
            }]
        );
    }

    #[test]
    fn superseding_queued_or_finished_replaces_it() {
        let mut q = LocalQueue::new(1000);
        q.offer(asg(1, 1, 100));
        assert!(matches!(q.offer(asg(1, 3, 100)), Offer::Superseded { .. }));
        assert_eq!(q.queued_len(), 1);
        q.start_next();
        q.finished(TaskId(1), 3, 1);
        assert!(matches!(
            q.offer(asg(1, 4, 100)),
            Offer::Superseded {
                old_phase: Phase::Finished { exit_code: 1 },
                ..
            }
        ));
        assert!(
            !q.acked(TaskId(1), 3),
            "ack of the replaced attempt is ignored"
        );
        assert_eq!(q.start_next().map(|a| a.attempt), Some(4));
    }

    #[test]
    fn acknowledged_records_are_bounded_oldest_first() {
        let mut q = LocalQueue::new(1000);
        for t in 1..=(DONE_KEPT as u64 + 3) {
            q.restore_done(TaskId(t), 1);
        }
        assert_eq!(q.prune_done(), vec![TaskId(1), TaskId(2), TaskId(3)]);
        assert!(q.prune_done().is_empty());
        // A duplicate of a remembered attempt is still refused.
        let last = DONE_KEPT as u64 + 3;
        assert!(!matches!(q.offer(asg(last, 1, 100)), Offer::Queued));
    }

    #[test]
    fn stop_by_phase_and_attempt() {
        let mut q = LocalQueue::new(1000);
        q.offer(asg(1, 1, 100));
        q.offer(asg(2, 1, 100));
        q.start_next();
        assert_eq!(q.stop(TaskId(1), 2), Stop::NotRunning, "wrong attempt");
        assert_eq!(q.stop(TaskId(1), 1), Stop::Kill);
        assert_eq!(q.stop(TaskId(2), 1), Stop::Dequeued);
        assert_eq!(q.queued_len(), 0);
        assert_eq!(q.stop(TaskId(9), 1), Stop::NotRunning);
        q.finished(TaskId(1), 1, -15);
        assert_eq!(q.stop(TaskId(1), 1), Stop::NotRunning);
        assert_eq!(
            q.get(TaskId(1)).map(|e| e.phase),
            Some(Phase::Finished { exit_code: -15 })
        );
    }

    #[test]
    fn restore_keeps_running_and_results() {
        let mut q = LocalQueue::new(1000);
        q.restore(asg(1, 1, 100), Phase::Running);
        q.restore(asg(2, 1, 100), Phase::Finished { exit_code: 3 });
        q.restore(asg(3, 1, 100), Phase::Queued);
        q.restore_done(TaskId(4), 2);
        assert_eq!(q.queued_len(), 1, "the running one is not queued again");
        assert_eq!(q.cpu_running_milli(), 100);
        assert_eq!(q.offer(asg(1, 1, 100)), Offer::Duplicate);
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(3)));
        assert!(
            q.finished(TaskId(1), 1, 0),
            "the adopted run's result counts"
        );
        assert_eq!(q.offer(asg(4, 2, 100)), Offer::Duplicate);
        assert_eq!(q.offer(asg(4, 1, 100)), Offer::Stale { held: 2 });
        assert!(q.acked(TaskId(2), 1));
    }

    #[test]
    fn only_a_queued_attempt_is_released_and_an_idle_queue_wants_work() {
        let mut q = LocalQueue::new(2000);
        assert!(q.wants_work(), "empty with free cores");
        q.offer(asg(1, 1, 1000));
        q.offer(asg(2, 1, 1000));
        q.offer(asg(3, 1, 1000));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(1)));
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(2)));
        assert!(!q.wants_work(), "task 3 waits");
        assert!(!q.release(TaskId(1), 1), "started: never released");
        assert!(!q.release(TaskId(3), 2), "another attempt");
        assert!(q.release(TaskId(3), 1));
        assert!(q.get(TaskId(3)).is_none());
        assert_eq!(q.queued_len(), 0);
        assert!(!q.wants_work(), "no free core");
        assert!(q.finished(TaskId(1), 1, 0));
        assert!(q.wants_work());
        assert_eq!(q.start_next(), None, "the released task never starts here");
    }
}
