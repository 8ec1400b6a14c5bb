//! Why tasks wait, as the leader knows it (docs/CONTRACT.md, "Waiting reasons"), and the
//! last hour of queue lengths and allocation for the dashboard's plots.
//!
//! Both are leader-local, like heartbeat data: the duties executor copies the scheduler's
//! latest reasons here after each event that changed them, and samples the applied state
//! every [`SAMPLE_EVERY`]; nothing of it is in the log. Every read of a task's reason goes
//! through [`Reasons::source`], the one place a per-user filter would go.

use hetsched_common::protocol::{HistorySample, ListFilter, TaskInfo, WaitingInfo};
use hetsched_common::{TaskId, TaskState};
use hetsched_master_core::sched::explain::queued_on;
use hetsched_master_core::sched::waiting::{
    over_quota, queued_reason, quota_reason, Reader, WaitBoard, Waiting,
};
use hetsched_master_core::state::ClusterState;
use hetsched_master_core::state::Node;
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

    /// The latest plan's board.
    pub fn board(&self) -> Arc<WaitBoard> {
        self.lock().board.clone()
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

/// Where a waiting task's reason comes from.
enum Source<'s> {
    /// The latest plan's reason for a pending task.
    Plan(Waiting),
    /// It waits in this node's local queue.
    Queued(&'s Node),
}

/// One read of the reasons: the latest board, against one state, at one time.
pub(super) struct Reasons<'s> {
    board: Arc<WaitBoard>,
    reader: Reader<'s>,
    s: &'s ClusterState,
    now_ms: u64,
}

impl<'s> Reasons<'s> {
    /// Where `task`'s reason comes from (`None`: it does not wait, or no plan reached it
    /// yet). The one lookup of a task's reason: a per-user filter goes here.
    fn source(&self, task: TaskId) -> Option<Source<'s>> {
        let s = self.s;
        let t = s.task(task)?;
        match t.status.state {
            TaskState::Pending => {
                let job = s.jobs().get(&t.job)?;
                self.board.get(t, job, self.now_ms).map(Source::Plan)
            }
            TaskState::Assigned => queued_on(s, task).map(|(n, _)| Source::Queued(n)),
            _ => None,
        }
    }

    /// Why `task` waits: the latest plan's reason for a pending task (its detail completed
    /// against the state), `resources` on its node for one in a slave's local queue;
    /// `quota` where it was admitted over its quota; `None` for a task that does not wait.
    pub fn waiting(&mut self, task: TaskId) -> Option<WaitingInfo> {
        let s = self.s;
        let t = s.task(task)?;
        let job = s.jobs().get(&t.job)?;
        match self.source(task)? {
            Source::Plan(w) => Some(self.reader.read(t, job, &w)),
            Source::Queued(node) => {
                let info = queued_reason(node, job, task);
                Some(quota_reason(s, t, job, &info).unwrap_or(info))
            }
        }
    }

    /// The name of `task`'s reason alone (nothing formatted: for counts and filters).
    pub fn name(&self, task: TaskId) -> Option<String> {
        let s = self.s;
        let t = s.task(task)?;
        let job = s.jobs().get(&t.job)?;
        Some(match self.source(task)? {
            Source::Plan(w) => self.reader.name(t, job, &w).to_string(),
            Source::Queued(_) if over_quota(s, t, job) => "quota".to_string(),
            Source::Queued(_) => "resources".to_string(),
        })
    }
}

impl WaitReasons {
    /// A read of the reasons against `s` at `now_ms`.
    pub(super) fn read<'s>(&self, s: &'s ClusterState, now_ms: u64) -> Reasons<'s> {
        Reasons {
            board: self.board(),
            reader: Reader::new(s),
            s,
            now_ms,
        }
    }
}

impl Reasons<'_> {
    /// Fills `tasks`' reasons, keeps those `filter` asks for (its reason) and applies its
    /// limit (taken off the state's listing when a reason is asked for).
    pub(super) fn fill(&mut self, mut tasks: Vec<TaskInfo>, filter: &ListFilter) -> Vec<TaskInfo> {
        if let Some(want) = &filter.reason {
            tasks.retain(|t| self.name(t.id).is_some_and(|n| n == *want));
        }
        if let Some(l) = filter.limit {
            tasks.truncate(l as usize);
        }
        for t in &mut tasks {
            t.waiting = self.waiting(t.id);
        }
        tasks
    }

    /// Waiting tasks by reason (`status`): pending tasks and the slaves' local queues;
    /// names only, nothing formatted.
    pub(super) fn counts(&self) -> BTreeMap<String, u64> {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        let s = self.s;
        let queued = s.nodes().values().flat_map(|n| n.queued.iter());
        for task in s.pending().iter().chain(queued) {
            if let Some(name) = self.name(*task) {
                *by.entry(name).or_insert(0) += 1;
            }
        }
        by
    }
}
