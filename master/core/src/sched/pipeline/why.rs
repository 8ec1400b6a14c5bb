//! The reasons of one plan: what each stage's refusal means for the task it stopped
//! (docs/CONTRACT.md, "Waiting reasons").
//!
//! The driver hands every task it passes over or that a stage decided to [`Reasons`];
//! refusals become a [`Waiting`] per task: the queue stage's back-off, the gang stage's
//! skip, engine choice's wait, a preemption (the preemptor waits on a reserved node), or
//! the end of the chain (`sched::waiting::stuck_reason`: resources, locality, drained,
//! reserved). A task stuck for resources behind a waiting task of higher priority waits
//! for `priority` (Slurm's rule); behind another user's at equal priority under DRF, for
//! `fair-share`; one admitted at the base priority over its quota, for `quota`. A task
//! passed over because its key is blocked keeps the reason that parked the key.
//!
//! A plan names the reason and what it knows cheaply (no scan of every node per task: the
//! stages index nodes, and a reason must not cost more than the decision); where the
//! detail needs every node's verdict (`resources`' node counts) the reason is marked to be
//! refined when read, against the state of that moment (`sched::waiting::read`). The quota
//! is read then too. Kept beside the scheduler's caches, out of the log: derived, shown,
//! never decided on.

use super::blocked::BlockKey;
use super::context::Decision;
use super::queue_stage::PendingTask;
use crate::sched::multiqueue::Ordering;
use crate::sched::waiting::{backoff_reason, verdict_kind, Shape, WaitBoard, Waiting};
use crate::state::{partition_of, ClusterState};
use hetsched_common::protocol::WaitingInfo;
use hetsched_common::{JobId, TaskId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// S3: nodes have room by their free resources, yet the stages found none: the pools hid
/// it. A CPU task does not see GPU nodes' reserved CPUs while GPU tasks wait; a GPU task
/// sees the other GPU pool only as borrowed capacity.
fn pool_reason(view: &ClusterState, head: &PendingTask<'_>) -> Option<WaitingInfo> {
    let req = head.req;
    let fits: Vec<&crate::state::Node> = view
        .nodes()
        .values()
        .filter(|n| n.free.cpu_milli >= req.cpu_milli && n.free.mem_mib >= req.mem_mib)
        .filter(|n| head.is_gpu() || !n.capacity.gpus.is_empty())
        .filter(|n| verdict_kind(view, n, head.job, head.task) == "fits")
        .collect();
    if fits.is_empty() {
        return None;
    }
    let gpu_nodes = fits.iter().filter(|n| !n.capacity.gpus.is_empty()).count();
    let d = if head.is_gpu() {
        format!(
            "its GPU pool has no room; {} node(s) with room are in the other GPU pool, which \
             it may borrow only while that pool's own tasks do not need it",
            fits.len()
        )
    } else if gpu_nodes > 0 {
        format!(
            "{gpu_nodes} GPU node(s) have free CPUs in their reserved CPU pools; borrowing \
             them is closed while GPU tasks wait, and possible again once none waits"
        )
    } else {
        return None;
    };
    Some(WaitingInfo::new("pool", d))
}

/// The highest-priority task of a partition found waiting for resources so far this plan.
#[derive(Clone, Debug)]
struct Ahead {
    task: TaskId,
    priority: i64,
    user: String,
}

/// A reason shared by the tasks of a blocked key or a stuck job, and whether its detail is
/// refined when read.
type Shared = (Arc<WaitingInfo>, bool);

/// The reasons the scheduler keeps: the latest plan's, and the one being built.
#[derive(Debug, Default)]
pub(super) struct Reasons {
    /// The latest plan's reasons (shared with the leader's queries without a copy).
    board: Arc<WaitBoard>,
    /// Changes whenever `board` does.
    generation: u64,
    /// The plan being built.
    fresh: WaitBoard,
    /// The reason each blocked key was parked with.
    by_key: BTreeMap<BlockKey, Shared>,
    /// Jobs (at a priority) stuck this plan, with the reason of the task that stuck them.
    stuck: BTreeMap<(JobId, i64), Shared>,
    /// Per partition, the most important task waiting for resources so far this plan.
    ahead: BTreeMap<String, Ahead>,
    /// This plan's queue order (DRF and the pipeline order give `fair-share`).
    ordering: Ordering,
    /// S3 pools are on (free CPUs of GPU nodes may be hidden: `pool`).
    pools: bool,
    /// The cluster's shape, taken at the plan's first stuck task.
    shape: Option<Shape>,
}

impl Reasons {
    /// The latest plan's reasons and their generation.
    pub fn board(&self) -> (Arc<WaitBoard>, u64) {
        (self.board.clone(), self.generation)
    }

    /// A plan starts, in `ordering`, with S3 pools on or not.
    pub fn begin(&mut self, ordering: Ordering, pools: bool) {
        self.ordering = ordering;
        self.pools = pools;
        self.fresh.clear();
        self.stuck.clear();
        self.ahead.clear();
        self.shape = None;
    }

    fn put(&mut self, task: TaskId, (info, refine): Shared, position: usize) {
        let position = position as u64 + 1;
        self.fresh.insert(
            task,
            Waiting {
                info,
                position,
                refine,
            },
        );
    }

    /// The queue stage passed `task` over: a back-off, or its job is stuck this plan.
    pub fn passed_over(&mut self, view: &ClusterState, now_ms: u64, task: TaskId, pos: usize) {
        let Some(t) = view.task(task) else { return };
        if let Some(nb) = t.not_before_ms.filter(|nb| *nb > now_ms) {
            self.put(task, (Arc::new(backoff_reason(t, nb, now_ms)), false), pos);
        } else if let Some(w) = self.stuck.get(&(t.job, t.priority)).cloned() {
            self.put(task, w, pos);
        }
    }

    /// `task` was passed over because `key` is blocked.
    pub fn blocked(&mut self, task: TaskId, key: &BlockKey, pos: usize) {
        let w = self.by_key.get(key).cloned().unwrap_or_else(|| {
            let d = "blocked until resources free or nodes change";
            (Arc::new(WaitingInfo::new("blocked", d)), false)
        });
        self.put(task, w, pos);
    }

    /// The stages decided `decision` for `head` (`key`: its blocked key, if it has one).
    pub fn decided(
        &mut self,
        view: &ClusterState,
        head: &PendingTask<'_>,
        decision: &Decision,
        key: Option<&BlockKey>,
        pos: usize,
    ) {
        let gang = matches!(decision, Decision::Skip) && view.is_gang(head.t.job);
        if let Some(w) = self
            .stuck
            .get(&(head.t.job, head.t.priority))
            .filter(|_| gang)
        {
            let w = w.clone(); // the gang's reason, found at its first task
            self.put(head.task, w, pos);
            return;
        }
        let (info, refine) = match decision {
            Decision::Assign(_) | Decision::Gang(_) => return,
            Decision::Preempt(p) if p.take_back => {
                let d = format!(
                    "taking back its pool's reserved CPUs on node-{} from {} borrowing CPU task(s)",
                    p.node.get(),
                    p.victims.len()
                );
                (WaitingInfo::new("pool", d), false)
            }
            Decision::Preempt(p) => {
                let d = format!(
                    "preempting {} lower-priority task(s) on node-{}: held for it until they stop",
                    p.victims.len(),
                    p.node.get()
                );
                (WaitingInfo::new("reserved", d), false)
            }
            Decision::Skip if gang => {
                let d = format!(
                    "its batch job's {} tasks start together on their pinned slaves, and not all \
                     have room",
                    head.job.tasks.len()
                );
                (WaitingInfo::new("gang", d), true)
            }
            Decision::Skip => {
                let d = "the node chosen for it was taken by this plan's earlier decisions";
                (WaitingInfo::new("resources", d), false)
            }
            Decision::Stuck => self.stuck_info(view, head),
        };
        let w = (Arc::new(info), refine);
        if gang || matches!(decision, Decision::Stuck) {
            self.stuck.insert((head.t.job, head.t.priority), w.clone());
            if let Some(k) = key {
                self.by_key.insert(k.clone(), w.clone());
            }
        }
        self.put(head.task, w, pos);
    }

    /// Why a task no stage could place, queue or make room for waits, and whether the
    /// detail is refined when read.
    fn stuck_info(&mut self, view: &ClusterState, head: &PendingTask<'_>) -> (WaitingInfo, bool) {
        if let Some((node, victims)) = view.awaiting().get(&head.task) {
            let d = format!(
                "waiting for {} preempted task(s) to stop on node-{}",
                victims.len(),
                node.get()
            );
            return (WaitingInfo::new("reserved", d), false);
        }
        let shape = self.shape.get_or_insert_with(|| Shape::of(view));
        let (info, refine) = shape.stuck(view, head.job);
        if !refine {
            return (info, false); // larger than every node, or no node it may use
        }
        if self.pools {
            if let Some(p) = pool_reason(view, head) {
                return (p, false);
            }
        }
        if head.job.spec.program.is_some() {
            let d = "no engine of its kinds has room or queue space";
            return (WaitingInfo::new("engine", d), true);
        }
        let partition = partition_of(&head.job.spec);
        let user = &head.job.spec.user;
        let info = match self.ahead.get(partition) {
            Some(a) if a.priority > head.t.priority => {
                let d = format!(
                    "behind task-{} (priority {} > {})",
                    a.task.get(),
                    a.priority,
                    head.t.priority
                );
                WaitingInfo::new("priority", d)
            }
            Some(a)
                if a.priority == head.t.priority
                    && a.user != *user
                    && self.ordering != Ordering::Submission =>
            {
                let d = format!(
                    "behind {}'s task-{}: users with smaller dominant shares go first",
                    a.user,
                    a.task.get()
                );
                WaitingInfo::new("fair-share", d)
            }
            Some(_) => info,
            None => {
                self.ahead.insert(
                    partition.to_string(),
                    Ahead {
                        task: head.task,
                        priority: head.t.priority,
                        user: user.clone(),
                    },
                );
                info
            }
        };
        (info, true)
    }

    /// The plan ends. `rest`: the tasks of its order it did not reach (the plan was full,
    /// or no node takes work): they keep their last reason, or, with no node taking work,
    /// get the end of the chain's. `keep`: the blocked keys whose reasons stay.
    pub fn finish(
        &mut self,
        view: &ClusterState,
        rest: impl Iterator<Item = (usize, TaskId)>,
        no_nodes: bool,
        keep: impl Fn(&BlockKey) -> bool,
    ) {
        let mut per_job: BTreeMap<JobId, Shared> = BTreeMap::new();
        for (pos, task) in rest {
            if no_nodes {
                let Some(t) = view.task(task) else { continue };
                let Some(job) = view.jobs().get(&t.job) else {
                    continue;
                };
                let shape = self.shape.get_or_insert_with(|| Shape::of(view));
                let w = per_job
                    .entry(t.job)
                    .or_insert_with(|| {
                        let (info, refine) = shape.stuck(view, job);
                        (Arc::new(info), refine)
                    })
                    .clone();
                self.put(task, w, pos);
            } else if let Some(w) = self.board.get(&task).cloned() {
                self.put(task, (w.info, w.refine), pos);
            }
        }
        self.by_key.retain(|k, _| keep(k));
        self.board = Arc::new(std::mem::take(&mut self.fresh));
        self.generation += 1;
    }
}
