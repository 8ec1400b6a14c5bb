//! S3 — multi-queue scheduling for CPU+GPU clusters (docs/DESIGN.md §S3.1, §S3.3, §S3.5).
//!
//! Pure stages, no I/O and no clock:
//! - [`QueueKind::of`] classifies a task: `cpu`, `gpu-single` (< 4 GPUs) or `gpu-multi`.
//! - [`drf_order`] orders tasks within a group by the users' dominant shares (DRF),
//!   progressively: each pick charges the user its task's demand. Ties go to submission.
//! - [`ordered`] is the queue stage of the pipeline: priority first (S1), then — under
//!   [`Ordering::Pipeline`] — GPU queues before the CPU queue, tasks taken back from a
//!   borrowed reserve at the head of the CPU queue, then DRF.
//! - [`ReserveHistory`] sizes the reserved CPU pool of GPU nodes (§S3.3) from the highest
//!   CPU demand per GPU seen among GPU tasks.

use crate::state::{ClusterState, Job, Task};
use hetsched_common::{ResourceRequest, TaskId, TaskReason, GPU_MILLI_PER_DEVICE};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

pub use crate::policy::queue_kind::{QueueKind, MULTI_GPU_THRESHOLD};

/// Amounts in the three DRF dimensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrfUsage {
    /// CPU thousandths.
    pub cpu_milli: u64,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// GPU thousandths.
    pub gpu_milli: u64,
}

impl DrfUsage {
    /// What a task asking `req` uses.
    pub fn of(req: &ResourceRequest) -> Self {
        Self {
            cpu_milli: req.cpu_milli,
            mem_mib: req.mem_mib,
            gpu_milli: req.gpu.total_milli(),
        }
    }

    pub(crate) fn add(&mut self, o: &DrfUsage) {
        self.cpu_milli = self.cpu_milli.saturating_add(o.cpu_milli);
        self.mem_mib = self.mem_mib.saturating_add(o.mem_mib);
        self.gpu_milli = self.gpu_milli.saturating_add(o.gpu_milli);
    }

    pub(crate) fn sub(&mut self, o: &DrfUsage) {
        self.cpu_milli = self.cpu_milli.saturating_sub(o.cpu_milli);
        self.mem_mib = self.mem_mib.saturating_sub(o.mem_mib);
        self.gpu_milli = self.gpu_milli.saturating_sub(o.gpu_milli);
    }

    /// The dominant share of this usage in `capacity`, in parts per billion (dimensions
    /// the cluster lacks count for nothing).
    pub fn dominant_share(&self, capacity: &DrfUsage) -> u64 {
        let part = |u: u64, c: u64| {
            if c == 0 {
                0
            } else {
                (u as u128 * 1_000_000_000 / c as u128).min(u64::MAX as u128) as u64
            }
        };
        part(self.cpu_milli, capacity.cpu_milli)
            .max(part(self.mem_mib, capacity.mem_mib))
            .max(part(self.gpu_milli, capacity.gpu_milli))
    }
}

/// One task to order by DRF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrfEntry<'a> {
    /// The task (a lower id was submitted earlier).
    pub task: TaskId,
    /// Its user.
    pub user: &'a str,
    /// What it asks.
    pub demand: DrfUsage,
}

/// DRF order of `entries` (given in submission order): repeatedly the user with the lowest
/// dominant share (ties: the earliest head task) gives its next task, and is charged that
/// task's demand. `usage` is what users hold now.
pub fn drf_order(
    entries: &[DrfEntry<'_>],
    usage: &BTreeMap<String, DrfUsage>,
    capacity: &DrfUsage,
) -> Vec<TaskId> {
    drf_positions(entries, usage, capacity, &BTreeMap::new())
        .into_iter()
        .map(|i| entries[i].task)
        .collect()
}

/// Issue 53: where a user with fair-share factor `factors[user]` (parts per billion; users
/// absent: 1) sorts, lower first: a higher factor goes first.
fn fair_rank(factors: &BTreeMap<String, u64>, user: &str) -> u64 {
    1_000_000_000u64.saturating_sub(factors.get(user).copied().unwrap_or(1_000_000_000))
}

/// [`drf_order`] as positions in `entries` (the queue stage keeps what it read of each
/// task beside its entry, so that no later pass of the plan looks the task up again); users
/// ordered by their fair-share `factors` (parts per billion) first, higher first.
fn drf_positions(
    entries: &[DrfEntry<'_>],
    usage: &BTreeMap<String, DrfUsage>,
    capacity: &DrfUsage,
    factors: &BTreeMap<String, u64>,
) -> Vec<usize> {
    // One user (the common case while little queues): submission order, nothing to weigh.
    if entries.windows(2).all(|w| w[0].user == w[1].user) {
        return (0..entries.len()).collect();
    }
    let mut queues: BTreeMap<&str, VecDeque<usize>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        queues.entry(e.user).or_default().push_back(i);
    }
    let mut held: BTreeMap<&str, DrfUsage> = queues
        .keys()
        .map(|u| (*u, usage.get(*u).copied().unwrap_or_default()))
        .collect();
    let mut heap: BinaryHeap<Reverse<(u64, u64, TaskId, &str)>> = queues
        .iter()
        .filter_map(|(u, q)| {
            let head = &entries[*q.front()?];
            let share = held[u].dominant_share(capacity);
            Some(Reverse((fair_rank(factors, u), share, head.task, *u)))
        })
        .collect();
    let mut out = Vec::with_capacity(entries.len());
    while let Some(Reverse((_, _, _, user))) = heap.pop() {
        let Some(q) = queues.get_mut(user) else {
            continue;
        };
        let Some(i) = q.pop_front() else { continue };
        out.push(i);
        let h = held.entry(user).or_default();
        h.add(&entries[i].demand);
        if let Some(next) = q.front() {
            heap.push(Reverse((
                fair_rank(factors, user),
                h.dominant_share(capacity),
                entries[*next].task,
                user,
            )));
        }
    }
    out
}

/// What each user's assigned and running tasks hold now.
pub fn user_usage(view: &ClusterState) -> BTreeMap<String, DrfUsage> {
    let mut out: BTreeMap<String, DrfUsage> = BTreeMap::new();
    for n in view.nodes().values() {
        for t in &n.tasks {
            let Some(job) = view.tasks().get(t).and_then(|t| view.jobs().get(&t.job)) else {
                continue;
            };
            out.entry(job.spec.user.clone())
                .or_default()
                .add(&DrfUsage::of(&job.spec.resources));
        }
    }
    out
}

/// The capacity of the nodes taking work.
pub fn cluster_capacity(view: &ClusterState) -> DrfUsage {
    let mut c = DrfUsage::default();
    for n in view.nodes().values().filter(|n| n.takes_work()) {
        c.add(&DrfUsage {
            cpu_milli: n.capacity.cpu_milli,
            mem_mib: n.capacity.mem_mib,
            gpu_milli: n.capacity.gpu_free_milli(),
        });
    }
    c
}

/// How the queue stage orders pending tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ordering {
    /// Priority, then submission (S1; the master's default).
    #[default]
    Submission,
    /// Priority, then DRF between users in one queue.
    Drf,
    /// Priority, then queue (GPU queues first; tasks taken back from a borrowed reserve at
    /// the head of the CPU queue), then DRF within each.
    Pipeline,
}

impl std::str::FromStr for Ordering {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(Ordering::Submission),
            "drf" => Ok(Ordering::Drf),
            "pipeline" => Ok(Ordering::Pipeline),
            _ => Err(format!(
                "unknown queueing {s:?}: expected fifo, drf or pipeline"
            )),
        }
    }
}

/// The master's S3 settings: queue order and, under `pipeline`, the reserve's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueingConfig {
    /// Queue order (`--queueing`).
    pub ordering: Ordering,
    /// Reserved CPU thousandths per GPU until a GPU task is seen (`--gpu-cpu-reserve`).
    pub reserve_start_milli_per_gpu: u64,
}

impl Default for QueueingConfig {
    fn default() -> Self {
        Self {
            // The master's default (`--queueing pipeline`).
            ordering: Ordering::Pipeline,
            reserve_start_milli_per_gpu: ReserveHistory::DEFAULT_START_MILLI,
        }
    }
}

/// Pending tasks of `view` in the order `ordering` gives (users' holdings and the capacity
/// computed afresh; the scheduler keeps them in [`Loads`](super::loads::Loads)).
pub fn ordered(view: &ClusterState, ordering: Ordering) -> Vec<TaskId> {
    ordered_with(view, ordering, &user_usage(view), &cluster_capacity(view))
}

/// [`ordered`] with what users hold now (`usage`) and the capacity taking work.
pub fn ordered_with(
    view: &ClusterState,
    ordering: Ordering,
    usage: &BTreeMap<String, DrfUsage>,
    capacity: &DrfUsage,
) -> Vec<TaskId> {
    ordered_refs(view, ordering, usage, capacity, &BTreeMap::new())
        .into_iter()
        .map(|q| q.task)
        .collect()
}

/// A pending task in queue order, with its task and job as the ordering read them: the
/// plan's later passes (pool counts, admission) take them from here rather than looking
/// every pending task up again (with a deep backlog those lookups were most of a plan).
#[derive(Clone, Copy, Debug)]
pub struct Queued<'v> {
    /// Its id.
    pub task: TaskId,
    /// The task.
    pub t: &'v Task,
    /// Its job.
    pub job: &'v Job,
}

/// [`ordered_with`], each task with what was read of it, users within one priority level
/// ordered by their fair-share `factors` (parts per billion) before DRF (issue 53;
/// empty: DRF alone). Tasks or
/// jobs the state no longer holds are left out (the scheduler would pass them over).
pub fn ordered_refs<'v>(
    view: &'v ClusterState,
    ordering: Ordering,
    usage: &BTreeMap<String, DrfUsage>,
    capacity: &DrfUsage,
    factors: &BTreeMap<String, u64>,
) -> Vec<Queued<'v>> {
    // Every plan orders the whole backlog, so this walk is the plan's floor: the pending ids
    // ascend, and so do the task map's keys, so a cursor walks both (`PendingLookup`); a
    // job's tasks are consecutive, so its job is looked up once per run of them.
    let mut lookup = PendingLookup::new(view);
    let pending = view.pending().iter().filter_map(move |id| lookup.get(*id));
    if ordering == Ordering::Submission {
        // Already in id order: a stable sort by priority alone keeps submission order
        // (as `queue::queue_order`).
        let mut all: Vec<Queued<'v>> = pending.collect();
        all.sort_by_key(|q| Reverse(q.t.priority));
        return all;
    }
    // (priority, queue rank, taken back first) → entries in submission order. Groups are
    // kept in a list in the order they appear (consecutive tasks nearly always share one),
    // and put in key order at the end.
    type Key = (Reverse<i64>, u8, bool);
    let mut groups: Vec<Vec<Queued<'v>>> = Vec::new();
    let mut by_key: BTreeMap<Key, usize> = BTreeMap::new();
    let mut last: Option<(Key, usize)> = None;
    for q in pending {
        let (t, req) = (q.t, &q.job.spec.resources);
        let (rank, head) = match ordering {
            Ordering::Pipeline => {
                let kind = QueueKind::of(req);
                let taken_back =
                    kind == QueueKind::Cpu && t.status.reason == Some(TaskReason::Preempted);
                (kind as u8, !taken_back)
            }
            _ => (0, true),
        };
        let key = (Reverse(t.priority), rank, head);
        let g = match last {
            Some((k, g)) if k == key => g,
            _ => {
                let g = *by_key.entry(key).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                last = Some((key, g));
                g
            }
        };
        groups[g].push(q);
    }
    let mut out = Vec::with_capacity(view.pending().len());
    for g in by_key.values() {
        let refs = &groups[*g];
        // DRF among one user is submission order: its entries are made only for a group
        // that holds more than one user's tasks.
        if refs
            .windows(2)
            .all(|w| w[0].job.spec.user == w[1].job.spec.user)
        {
            out.extend_from_slice(refs);
            continue;
        }
        let entries: Vec<DrfEntry<'v>> = refs
            .iter()
            .map(|q| DrfEntry {
                task: q.task,
                user: &q.job.spec.user,
                demand: DrfUsage::of(&q.job.spec.resources),
            })
            .collect();
        out.extend(
            drf_positions(&entries, usage, capacity, factors)
                .into_iter()
                .map(|i| refs[i]),
        );
    }
    out
}

/// Finds pending tasks, asked for in ascending id order, and their jobs in `view`: a cursor
/// over the task map answers the next id in a few steps where the backlog is dense (a fresh
/// search where it is not), and the last job found answers the tasks that follow it.
struct PendingLookup<'v> {
    view: &'v ClusterState,
    tasks: std::iter::Peekable<std::collections::btree_map::Range<'v, TaskId, Task>>,
    job: Option<&'v Job>,
}

impl<'v> PendingLookup<'v> {
    /// How far the cursor walks before it searches afresh.
    const STEPS: usize = 8;

    fn new(view: &'v ClusterState) -> Self {
        let from = view.pending().first().copied().unwrap_or(TaskId(0));
        Self {
            view,
            tasks: view.tasks().range(from..).peekable(),
            job: None,
        }
    }

    /// Task `id` (greater than every id asked before) with its job; `None` when the state
    /// holds either no longer.
    fn get(&mut self, id: TaskId) -> Option<Queued<'v>> {
        let t = self.task(id)?;
        let job = match self.job {
            Some(j) if j.id == t.job => j,
            _ => {
                let j = self.view.jobs().get(&t.job)?;
                self.job = Some(j);
                j
            }
        };
        Some(Queued { task: id, t, job })
    }

    fn task(&mut self, id: TaskId) -> Option<&'v Task> {
        for step in 0..=Self::STEPS {
            if step == Self::STEPS {
                // Far behind `id`: search afresh (the cursor then starts at `id` or past it).
                self.tasks = self.view.tasks().range(id..).peekable();
            }
            match self.tasks.peek() {
                Some((k, _)) if **k < id => {
                    self.tasks.next();
                }
                Some((k, t)) if **k == id => {
                    let t = *t;
                    self.tasks.next();
                    return Some(t);
                }
                _ => return None,
            }
        }
        None
    }
}

/// The reserved CPU pool's size per GPU (§S3.3): the highest CPU demand per GPU seen among
/// GPU tasks, `start_milli_per_gpu` until one is seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveHistory {
    start_milli_per_gpu: u64,
    highest: Option<u64>,
    /// What single- and multi-GPU tasks asked: the GPU pools' split (`sched::pool_split`).
    demand: super::pool_split::PoolDemand,
}

impl ReserveHistory {
    /// Default start: 4 CPUs per GPU (`--gpu-cpu-reserve`).
    pub const DEFAULT_START_MILLI: u64 = 4000;

    /// A history starting at `start_milli_per_gpu`.
    pub fn new(start_milli_per_gpu: u64) -> Self {
        Self {
            start_milli_per_gpu,
            highest: None,
            demand: Default::default(),
        }
    }

    /// Learns one submitted task's request (CPU tasks teach nothing).
    pub fn observe(&mut self, req: &ResourceRequest) {
        self.demand.observe(req);
        let gpu_milli = req.gpu.total_milli();
        if gpu_milli == 0 {
            return;
        }
        // CPU per whole GPU: a half-GPU task with 2 CPUs wants 4 per GPU. Rounded up, so
        // that a reserve of this per GPU always covers the task (1 CPU over 3 GPUs).
        let per_gpu = (req.cpu_milli as u128 * GPU_MILLI_PER_DEVICE as u128)
            .div_ceil(gpu_milli as u128)
            .min(u64::MAX as u128) as u64;
        self.highest = Some(self.highest.map_or(per_gpu, |h| h.max(per_gpu)));
    }

    /// What single- and multi-GPU tasks asked so far (the GPU pools' split).
    pub fn demand(&self) -> &super::pool_split::PoolDemand {
        &self.demand
    }

    /// CPU thousandths reserved per GPU now.
    pub fn per_gpu_milli(&self) -> u64 {
        self.highest.unwrap_or(self.start_milli_per_gpu)
    }

    /// CPU thousandths reserved on a node with `gpus` devices and `cpu_milli` CPUs.
    pub fn reserve_on(&self, gpus: usize, cpu_milli: u64) -> u64 {
        self.per_gpu_milli()
            .saturating_mul(gpus as u64)
            .min(cpu_milli)
    }
}

impl Default for ReserveHistory {
    fn default() -> Self {
        Self::new(Self::DEFAULT_START_MILLI)
    }
}

#[cfg(test)]
#[path = "multiqueue_tests.rs"]
mod tests;
