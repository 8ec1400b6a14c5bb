//! Issue 55: this master's journal of job and task state changes, fed by every entry it
//! applies (any master, not only the leader), read by `GET /v1/events` (server-sent events)
//! and by the waits of `GET /v1/jobs/{id}/wait` and `ClientRequest::WaitJob`.
//!
//! An event's `seq` is the log index of the entry that made the change, so a client resumes
//! with `?since=SEQ` after the last event it saw. The journal keeps the last
//! [`KEPT_EVENTS`] events (whole entries); older ones are gone and a `since` before the
//! oldest kept answers 410 with it, so that the client re-reads the state and resumes.
//! What it compares after an entry is only what the entry handed out for change
//! ([`ClusterState::touched_tasks`]) and those tasks' jobs: nothing changes, nothing costs.

use hetsched_common::{JobId, TaskId, TaskState};
use hetsched_master_core::state::ClusterState;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, VecDeque};
use tokio::sync::{oneshot, watch};

/// Events kept for `since` (whole entries are dropped, oldest first).
pub const KEPT_EVENTS: usize = 100_000;

/// One change of a job's or a task's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Log index of the entry that made it.
    pub seq: u64,
    /// `job` or `task`.
    pub kind: &'static str,
    /// The job (of the task, for a task event).
    pub job: JobId,
    /// The task (task events only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    /// The job's user.
    pub user: String,
    /// The new state (a job's as `jobs` lists it, a task's as `tasks` does).
    pub state: String,
}

/// The journal: recent events, the last state seen of every unfinished job and task, and
/// who waits for which job.
pub struct Journal {
    events: VecDeque<Event>,
    /// Every event with a `seq` above it is kept.
    floor: u64,
    cap: usize,
    tasks: HashMap<TaskId, TaskState>,
    jobs: HashMap<JobId, &'static str>,
    waiters: HashMap<JobId, Vec<oneshot::Sender<()>>>,
    /// How many jobs had waiters after the last sweep of closed ones.
    swept_at: usize,
    /// The last applied index, for streams waiting for more.
    applied: watch::Sender<u64>,
}

impl Default for Journal {
    fn default() -> Self {
        Self::new(KEPT_EVENTS)
    }
}

impl Journal {
    /// An empty journal keeping `cap` events.
    pub fn new(cap: usize) -> Self {
        Self {
            events: VecDeque::new(),
            floor: 0,
            cap: cap.max(1),
            tasks: HashMap::new(),
            jobs: HashMap::new(),
            waiters: HashMap::new(),
            swept_at: 0,
            applied: watch::channel(0).0,
        }
    }

    /// After entry `index` applied to `s`: the changes of the tasks it touched and of their
    /// jobs become events; a job that changed wakes its waiters.
    pub fn record(&mut self, index: u64, s: &ClusterState) {
        let mut jobs = BTreeSet::new();
        for id in s.touched_tasks() {
            let Some(t) = s.task(*id) else { continue };
            jobs.insert(t.job);
            let state = t.status.state;
            if self.tasks.get(id) == Some(&state) {
                continue;
            }
            if state.is_final() {
                self.tasks.remove(id);
            } else {
                self.tasks.insert(*id, state);
            }
            let user = s
                .job(t.job)
                .map(|j| j.spec.user.clone())
                .unwrap_or_default();
            self.push(Event {
                seq: index,
                kind: "task",
                job: t.job,
                task: Some(*id),
                user,
                state: state.as_str().to_string(),
            });
        }
        for id in jobs {
            self.record_job(index, s, id);
        }
        self.trim();
        self.applied.send_replace(index);
    }

    fn record_job(&mut self, index: u64, s: &ClusterState, id: JobId) {
        let Some(j) = s.job(id) else { return };
        // A running job with tasks left stays running for the stream: its state is not
        // recounted over all its tasks for each entry that touched one.
        let state = if j.open > 0 && self.jobs.get(&id) == Some(&"running") {
            "running"
        } else {
            s.job_state(j)
        };
        if self.jobs.get(&id) != Some(&state) {
            if final_job_state(state) {
                self.jobs.remove(&id);
            } else {
                self.jobs.insert(id, state);
            }
            self.push(Event {
                seq: index,
                kind: "job",
                job: id,
                task: None,
                user: j.spec.user.clone(),
                state: state.to_string(),
            });
        }
        // A task's change is the job's too (`watch` redraws on it).
        for w in self.waiters.remove(&id).unwrap_or_default() {
            let _ = w.send(());
        }
    }

    /// After a snapshot (at `index`) replaced the state: the states seen start over from
    /// it, the events before it are gone, every waiter looks again.
    pub fn restored(&mut self, index: u64, s: &ClusterState) {
        self.events.clear();
        self.floor = index;
        self.tasks = (s.tasks().iter())
            .filter(|(_, t)| !t.status.state.is_final())
            .map(|(id, t)| (*id, t.status.state))
            .collect();
        self.jobs = (s.jobs().iter())
            .map(|(id, j)| (*id, s.job_state(j)))
            .filter(|(_, st)| !final_job_state(st))
            .collect();
        for (_, ws) in self.waiters.drain() {
            for w in ws {
                let _ = w.send(());
            }
        }
        self.applied.send_replace(index);
    }

    fn push(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// Drops whole entries, oldest first, down to the cap.
    fn trim(&mut self) {
        while self.events.len() > self.cap {
            let Some(seq) = self.events.front().map(|e| e.seq) else {
                return;
            };
            while self.events.front().is_some_and(|e| e.seq == seq) {
                self.events.pop_front();
            }
            self.floor = seq;
        }
    }

    /// The events after `seq` that `visible` lets through, at most `max`; `Err(oldest)`
    /// when events after `seq` may be gone (`oldest`: the `since` to resume from after
    /// re-reading the state).
    pub fn since(
        &self,
        seq: u64,
        max: usize,
        visible: impl Fn(&Event) -> bool,
    ) -> Result<Vec<Event>, u64> {
        if seq < self.floor {
            return Err(self.floor);
        }
        let from = self.events.partition_point(|e| e.seq <= seq);
        Ok((self.events.range(from..))
            .filter(|e| visible(e))
            .take(max)
            .cloned()
            .collect())
    }

    /// The last applied index, to start a stream at now.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Tells of every applied index from now on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Woken at `job`'s next change (or a restore). One waiter per call, dropped with it.
    pub fn wait_job(&mut self, job: JobId) -> oneshot::Receiver<()> {
        // Waits that timed out on jobs that never changed leave closed wakers: dropped
        // whenever the map has doubled since the last sweep.
        if self.waiters.len() >= self.swept_at.max(1024) * 2 {
            self.waiters.retain(|_, ws| {
                ws.retain(|w| !w.is_closed());
                !ws.is_empty()
            });
            self.swept_at = self.waiters.len();
        }
        let (tx, rx) = oneshot::channel();
        let ws = self.waiters.entry(job).or_default();
        ws.retain(|w| !w.is_closed());
        ws.push(tx);
        rx
    }

    /// Jobs with someone waiting (for the tests' and the metrics' count).
    pub fn waiting_jobs(&self) -> usize {
        self.waiters.values().filter(|ws| !ws.is_empty()).count()
    }
}

/// Whether a job state (as `jobs` lists it) is final.
pub fn final_job_state(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled")
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
