//! Why tasks wait, as the leader knows it (docs/CONTRACT.md, "Waiting reasons"), and the
//! last hour of queue lengths and allocation for the dashboard's plots.
//!
//! Both are leader-local, like heartbeat data: the duties executor copies the scheduler's
//! latest reasons here after each event that changed them, and samples the applied state
//! every [`SAMPLE_EVERY`]; nothing of it is in the log. Every read of a task's reason goes
//! through [`Master::waiting_of`], the one place a per-user filter would go.

use super::Master;
use hetsched_common::protocol::{HistorySample, ListFilter, TaskInfo, WaitingInfo};
use hetsched_common::{TaskId, TaskState};
use hetsched_master_core::sched::explain::queued_on;
use hetsched_master_core::sched::waiting::{queued_reason, quota_reason, WaitBoard, Waiting};
use hetsched_master_core::state::ClusterState;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often the history takes a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Samples kept: one hour.
const SAMPLES: usize = 360;

/// A sample of `s` at `t_ms`: pending tasks per queue, local queues, the share of the up
/// nodes' cores and GPUs held.
pub fn sample_of(s: &ClusterState, t_ms: u64) -> HistorySample {
    let (mut cpu_cap, mut cpu_free, mut gpu_cap, mut gpu_free) = (0u64, 0u64, 0u64, 0u64);
    let mut queued = 0u64;
    for n in s.nodes().values().filter(|n| n.is_up()) {
        cpu_cap += n.capacity.cpu_milli;
        cpu_free += n.free.cpu_milli.min(n.capacity.cpu_milli);
        gpu_cap += n.capacity.gpu_free_milli();
        gpu_free += n.free.gpu_free_milli().min(n.capacity.gpu_free_milli());
        queued += n.queued.len() as u64;
    }
    let share = |cap: u64, free: u64| {
        if cap == 0 {
            0.0
        } else {
            (cap - free) as f64 / cap as f64
        }
    };
    HistorySample {
        t_ms,
        queues: s.queue_counts(),
        queued,
        cpu_alloc: share(cpu_cap, cpu_free),
        gpu_alloc: share(gpu_cap, gpu_free),
    }
}

#[derive(Debug, Default)]
struct Inner {
    generation: Option<u64>,
    board: Arc<WaitBoard>,
    history: VecDeque<HistorySample>,
}

/// The leader's copy of the reasons, and the history.
#[derive(Debug, Default)]
pub struct WaitReasons {
    inner: Mutex<Inner>,
}

impl WaitReasons {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The scheduler's latest reasons (shared, not copied).
    pub fn store(&self, board: Arc<WaitBoard>, generation: u64) {
        let mut g = self.lock();
        if g.generation != Some(generation) {
            g.generation = Some(generation);
            g.board = board;
        }
    }

    /// What the latest plan said of `task`.
    pub fn latest(&self, task: TaskId) -> Option<Waiting> {
        self.lock().board.get(&task).cloned()
    }

    /// Adds a sample (the oldest goes beyond an hour).
    pub fn sample(&self, s: HistorySample) {
        let mut g = self.lock();
        if g.history.len() >= SAMPLES {
            g.history.pop_front();
        }
        g.history.push_back(s);
    }

    /// The history, oldest first.
    pub fn history(&self) -> Vec<HistorySample> {
        self.lock().history.iter().cloned().collect()
    }
}

impl Master {
    /// Why `task` waits: the latest plan's reason for a pending task, `resources` on its
    /// node for one in a slave's local queue (`quota` where it was admitted over its quota),
    /// `None` for a task that does not wait. The one lookup of a task's reason.
    pub(super) fn waiting_of(&self, s: &ClusterState, task: TaskId) -> Option<WaitingInfo> {
        let t = s.task(task)?;
        match t.status.state {
            TaskState::Pending => self
                .reasons
                .latest(task)
                .map(|w| WaitingInfo::clone(&w.info)),
            TaskState::Assigned => {
                let (node, _) = queued_on(s, task)?;
                let job = s.jobs().get(&t.job)?;
                let info = queued_reason(node, job, task);
                Some(quota_reason(s, t, job, &info).unwrap_or(info))
            }
            _ => None,
        }
    }

    /// Fills `tasks`' reasons, keeps those `filter` asks for (its reason) and applies its
    /// limit (taken off the state's listing when a reason is asked for).
    pub(super) fn with_reasons(
        &self,
        s: &ClusterState,
        mut tasks: Vec<TaskInfo>,
        filter: &ListFilter,
    ) -> Vec<TaskInfo> {
        for t in &mut tasks {
            t.waiting = self.waiting_of(s, t.id);
        }
        if let Some(r) = &filter.reason {
            tasks.retain(|t| t.waiting.as_ref().is_some_and(|w| w.reason == *r));
        }
        if let Some(l) = filter.limit {
            tasks.truncate(l as usize);
        }
        tasks
    }

    /// Waiting tasks by reason (`status`): one pass over the latest reasons under one
    /// lock, then the slaves' local queues.
    pub(super) fn waiting_counts(&self, s: &ClusterState) -> BTreeMap<String, u64> {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        {
            let g = self.reasons.lock();
            for (task, w) in g.board.iter() {
                if s.pending().contains(task) {
                    *by.entry(w.info.reason.clone()).or_insert(0) += 1;
                }
            }
        }
        for task in s.nodes().values().flat_map(|n| n.queued.iter()) {
            if let Some(w) = self.waiting_of(s, *task) {
                *by.entry(w.reason).or_insert(0) += 1;
            }
        }
        by
    }
}
