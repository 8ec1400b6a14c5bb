//! The reasons of one plan: what each stage's refusal means for the task it stopped
//! (docs/CONTRACT.md, "Waiting reasons"), and the board that keeps them.
//!
//! The driver hands each task a stage decided to [`Reasons`]; refusals become reasons: the
//! gang stage's skip (`gang`), engine choice's wait (`engine`), a preemption or take-back
//! (`reserved`, `pool`), or the end of the chain (`resources`, `locality`, `drained`,
//! `reserved`, `pool`). A task stuck for resources behind a waiting task of higher priority
//! waits for `priority` (Slurm's rule); behind another user's at equal priority under DRF,
//! for `fair-share`, naming both users' fair-share factors when they decided (issue 53).
//!
//! A blocked key's reason covers every task of its shape, whoever's, so it does not name a
//! user: the board keeps who parked each key beside it, and a task of another user at that
//! priority, found by the key, is told at read time that it waits behind that user's task
//! (`fair-share`, with its own factor), never behind itself.
//!
//! Costs follow the decisions, not the backlog: a plan records a reason per task a stage
//! decided, per job stuck at a priority, and per blocked key, and nothing for the tasks it
//! passes over — those are found on the [`WaitBoard`] when read: by their job, by the key
//! that parked them, or by their back-off (read against the leader's clock). Nor does a
//! plan scan every node for every task it stops: it names the reason from the cluster's
//! shape, and leaves the node counts of a `resources` detail to the reader
//! (`sched::waiting::Reader`), which also names `quota`. Kept beside the scheduler's caches,
//! out of the log: derived, shown, never decided on.

use super::blocked::BlockKey;
use super::context::Decision;
use super::stage::PendingTask;
use crate::sched::multiqueue::{Ordering, QueueKind};
use crate::sched::waiting::{backoff_reason, free_fits, verdict_kind, Shape, Waiting};
use crate::state::{partition_of, ClusterState, Job, Task};
use hetsched_common::protocol::WaitingInfo;
use hetsched_common::{JobId, TaskId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// S3: nodes have room by their free resources, yet the stages found none: the pools hid
/// it. A CPU task does not see GPU nodes' reserved CPUs while GPU tasks wait; a GPU task
/// sees the other GPU pool only as borrowed capacity.
fn pool_reason(view: &ClusterState, head: &PendingTask<'_>) -> Option<WaitingInfo> {
    let req = head.req;
    // Counted, not collected; the free vector first (cheap), the node's whole verdict
    // only where that passes (a stuck probe asks this of every node).
    let (mut fits, mut gpu_nodes) = (0usize, 0usize);
    for n in view.nodes().values() {
        let gpus = !n.capacity.gpus.is_empty();
        if (head.is_gpu() || gpus)
            && free_fits(&n.free, req)
            && verdict_kind(view, n, head.job, head.task) == "fits"
        {
            fits += 1;
            gpu_nodes += usize::from(gpus);
        }
    }
    if fits == 0 {
        return None;
    }
    let d = if head.is_gpu() {
        format!(
            "its GPU pool has no room; {fits} node(s) with room are in the other GPU pool, \
             which it may borrow only while that pool's own tasks do not need it"
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

/// The highest-priority task of a partition found waiting for resources so far this plan;
/// also the task that parked a blocked key.
#[derive(Clone, Debug)]
struct Ahead {
    task: TaskId,
    priority: i64,
    user: String,
}

/// A reason, shared by the tasks it covers, and whether its detail is refined when read.
type Shared = (Arc<WaitingInfo>, bool);

/// The latest plan's reasons: per decided task, per stuck job (at a priority), per blocked
/// key, and the plan's queue order (for positions).
#[derive(Debug, Default)]
pub struct WaitBoard {
    order: Vec<TaskId>,
    tasks: BTreeMap<TaskId, Shared>,
    jobs: BTreeMap<(JobId, i64), Shared>,
    keys: Arc<BTreeMap<BlockKey, Shared>>,
    /// The task that parked each key (its user and priority).
    parked_by: Arc<BTreeMap<BlockKey, Ahead>>,
    /// The plan's fair-share factors and whether users are ordered by them (not FIFO).
    fair: Arc<FairShare>,
}

/// What `fair-share` reasons read: the plan's factors (parts per billion; empty: off or
/// no usage) and whether the queue order weighs users at all (DRF or the pipeline order).
#[derive(Debug, Default)]
struct FairShare {
    factors: BTreeMap<String, u64>,
    weighs_users: bool,
}

impl FairShare {
    /// `fair-share`'s detail for `user`'s task behind `a`: both factors when they differ
    /// (the factors decided the order), else DRF's rule.
    fn detail(&self, user: &str, a: &Ahead) -> String {
        let factor = |u: &str| self.factors.get(u).copied().unwrap_or(1_000_000_000) as f64 / 1e9;
        let (own, theirs) = (factor(user), factor(&a.user));
        if !self.factors.is_empty() && theirs > own {
            format!(
                "behind {}'s task-{}: {user}'s fair-share factor {own:.3} is below {}'s \
                 {theirs:.3} (less past usage goes first)",
                a.user,
                a.task.get(),
                a.user
            )
        } else {
            format!(
                "behind {}'s task-{}: users with smaller dominant shares go first",
                a.user,
                a.task.get()
            )
        }
    }

    /// Whether `user`'s task at `priority` waits behind `a` for fair share.
    fn behind(&self, user: &str, priority: i64, a: &Ahead) -> bool {
        self.weighs_users && a.priority == priority && a.user != user
    }
}

impl WaitBoard {
    /// Why pending task `t` of `job` waits, at leader time `now_ms` (`None`: the latest
    /// plan did not reach it).
    pub fn get(&self, t: &Task, job: &Job, now_ms: u64) -> Option<Waiting> {
        if let Some(nb) = t.not_before_ms.filter(|nb| *nb > now_ms) {
            let info = Arc::new(backoff_reason(t, nb, now_ms));
            return Some(Waiting {
                info,
                refine: false,
            });
        }
        let key = || {
            let req = &job.spec.resources;
            let head = PendingTask {
                task: t.id,
                t,
                job,
                req,
                queue: QueueKind::of(req),
            };
            let k = job.spec.program.is_none().then(|| BlockKey::of(&head))?;
            let user = &job.spec.user;
            match self.parked_by.get(&k) {
                // Another user's task parked the key: this one waits behind it.
                Some(a) if self.fair.behind(user, t.priority, a) => {
                    let info = WaitingInfo::new("fair-share", self.fair.detail(user, a));
                    Some((Arc::new(info), false))
                }
                _ => self.keys.get(&k).cloned(),
            }
        };
        let (info, refine) = self
            .tasks
            .get(&t.id)
            .or_else(|| self.jobs.get(&(t.job, t.priority)))
            .cloned()
            .or_else(key)?;
        Some(Waiting { info, refine })
    }

    /// `task`'s place in the latest plan's queue order (1: first).
    pub fn position(&self, task: TaskId) -> Option<u64> {
        self.order
            .iter()
            .position(|t| *t == task)
            .map(|p| p as u64 + 1)
    }
}

/// The reasons the scheduler keeps: the latest plan's board, and the one being built.
#[derive(Debug, Default)]
pub(super) struct Reasons {
    /// The latest plan's reasons (shared with the leader's queries without a copy).
    board: Arc<WaitBoard>,
    /// Changes whenever `board` does.
    generation: u64,
    /// Tasks decided this plan.
    tasks: BTreeMap<TaskId, Shared>,
    /// Jobs (at a priority) stuck this plan, with the reason of the task that stuck them.
    stuck: BTreeMap<(JobId, i64), Shared>,
    /// The reason each blocked key was parked with (kept while the key is blocked).
    by_key: Arc<BTreeMap<BlockKey, Shared>>,
    /// The task that parked each key (kept with it).
    parked_by: Arc<BTreeMap<BlockKey, Ahead>>,
    /// Issue 53: the plan's fair-share factors.
    fair: Arc<FairShare>,
    /// Per partition, the most important task waiting for resources so far this plan.
    ahead: BTreeMap<String, Ahead>,
    /// This plan's queue order (DRF and the pipeline order give `fair-share`).
    ordering: Ordering,
    /// S3 pools are on (free CPUs of GPU nodes may be hidden: `pool`).
    pools: bool,
    /// The cluster's shape, taken at the plan's first stuck task.
    shape: Option<Shape>,
    /// The plain `resources` reason (its detail completed when read), shared by every
    /// task and key that has it rather than allocated for each.
    resources: Option<Arc<WaitingInfo>>,
}

impl Reasons {
    /// The latest plan's board and its generation.
    pub fn board(&self) -> (Arc<WaitBoard>, u64) {
        (self.board.clone(), self.generation)
    }

    /// A plan starts, in `ordering`, with S3 pools on or not, with these fair-share
    /// `factors` (parts per billion).
    pub fn begin(&mut self, ordering: Ordering, pools: bool, factors: BTreeMap<String, u64>) {
        self.ordering = ordering;
        let weighs_users = ordering != Ordering::Submission;
        if self.fair.factors != factors || self.fair.weighs_users != weighs_users {
            self.fair = Arc::new(FairShare {
                factors,
                weighs_users,
            });
        }
        self.pools = pools;
        self.tasks.clear();
        self.stuck.clear();
        self.ahead.clear();
        self.shape = None;
    }

    /// The stages decided `decision` for `head` (`key`: its blocked key, if it has one).
    pub fn decided(
        &mut self,
        view: &ClusterState,
        head: &PendingTask<'_>,
        decision: &Decision,
        key: Option<&BlockKey>,
    ) {
        let gang = matches!(decision, Decision::Skip) && view.is_gang(head.t.job);
        if gang && self.stuck.contains_key(&(head.t.job, head.t.priority)) {
            return; // the gang's reason, found at its first task, covers it
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
            Decision::Hold { info, .. } => (info.clone(), false),
        };
        let plain = info.reason == "resources" && info.detail.is_empty();
        let info = match &self.resources {
            Some(r) if plain => r.clone(),
            _ if plain => self.resources.insert(Arc::new(info)).clone(),
            _ => Arc::new(info),
        };
        let w = (info, refine);
        if let Decision::Hold { job: true, .. } = decision {
            self.stuck.insert((head.t.job, head.t.priority), w.clone());
        }
        if gang || matches!(decision, Decision::Stuck) {
            self.stuck.insert((head.t.job, head.t.priority), w.clone());
            if let Some(k) = key {
                Arc::make_mut(&mut self.by_key).insert(k.clone(), w.clone());
                let by = Ahead {
                    task: head.task,
                    priority: head.t.priority,
                    user: head.job.spec.user.clone(),
                };
                Arc::make_mut(&mut self.parked_by).insert(k.clone(), by);
            }
        }
        self.tasks.insert(head.task, w);
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
                WaitingInfo::new("fair-share", self.fair.detail(user, a))
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

    /// The plan ends. `order` is its queue order, of which it reached the first `reached`
    /// tasks; with no node taking work, the rest get the end of the chain's reason (per job).
    /// `keep`: the blocked keys whose reasons stay.
    pub fn finish(
        &mut self,
        view: &ClusterState,
        order: Vec<TaskId>,
        reached: usize,
        no_nodes: bool,
        keep: impl Fn(&BlockKey) -> bool,
    ) {
        if no_nodes {
            for task in &order[reached.min(order.len())..] {
                let Some(t) = view.task(*task) else { continue };
                let Some(job) = view.jobs().get(&t.job) else {
                    continue;
                };
                if self.stuck.contains_key(&(t.job, t.priority)) {
                    continue;
                }
                let shape = self.shape.get_or_insert_with(|| Shape::of(view));
                let (info, refine) = shape.stuck(view, job);
                self.stuck
                    .insert((t.job, t.priority), (Arc::new(info), refine));
            }
        }
        if self.by_key.keys().any(|k| !keep(k)) {
            Arc::make_mut(&mut self.by_key).retain(|k, _| keep(k));
        }
        if self.parked_by.keys().any(|k| !keep(k)) {
            Arc::make_mut(&mut self.parked_by).retain(|k, _| keep(k));
        }
        self.board = Arc::new(WaitBoard {
            order,
            tasks: std::mem::take(&mut self.tasks),
            jobs: std::mem::take(&mut self.stuck),
            keys: self.by_key.clone(),
            parked_by: self.parked_by.clone(),
            fair: self.fair.clone(),
        });
        self.generation += 1;
    }
}
