//! Why a task waits, in words: the checks the scheduler's stages make, read back against the
//! applied state so that a refusal can be named (docs/CONTRACT.md, "Waiting reasons").
//!
//! A plan names a stopped task's reason from the cluster's [`Shape`] (no scan of every
//! node per task) and keeps it beside its caches, never in the log: a reason is derived
//! data, recomputed at every plan, and only ever shown. The [`Reader`] completes what a plan
//! left to refine — a `resources` detail's node counts, from every node's verdict — and
//! names `quota`, against the state it reads. `explain` uses the same per-node checks
//! ([`node_verdict`]), so a task's reason and its nodes' verdicts agree.

use crate::policy::placeable::{unplaceable, Unplaceable};
use crate::state::{partition_of, ClusterState, Job, Node, Task};
use hetsched_common::protocol::{NodeVerdict, WaitingInfo};
use hetsched_common::{NodeResources, ResourceRequest, TaskId, GPU_MILLI_PER_DEVICE};
use std::collections::BTreeMap;

/// What the scheduler said about one waiting task at its latest plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The reason and what the plan knew of it (shared by the tasks of a blocked key or a
    /// stuck job).
    pub info: std::sync::Arc<WaitingInfo>,
    /// The detail is completed when read with every node's verdict ([`Reader`]): a plan
    /// does not scan every node for every task it stops.
    pub refine: bool,
}

/// Reads the latest plan's reasons against the state of the moment: completes the details
/// a plan left to refine (once per job per reader), and names `quota` for a task admitted
/// over its quota. The one place a plan's reason becomes what users see.
#[derive(Debug)]
pub struct Reader<'v> {
    view: &'v ClusterState,
    details: BTreeMap<hetsched_common::JobId, String>,
}

impl<'v> Reader<'v> {
    /// A reader of `view`.
    pub fn new(view: &'v ClusterState) -> Self {
        Self {
            view,
            details: BTreeMap::new(),
        }
    }

    /// What users see of `w`, the latest plan's reason for `t` of `job`.
    pub fn read(&mut self, t: &Task, job: &Job, w: &Waiting) -> WaitingInfo {
        // Issue 51: a hold names the jobs it waits for as they are now (a quiet plan's
        // reason may be older than their latest moves).
        if matches!(w.info.reason.as_str(), "dependency" | "throttle") {
            if let Some(now) = held_reason(self.view, t, job) {
                return now;
            }
        }
        let mut info = WaitingInfo::clone(&w.info);
        if w.refine {
            let view = self.view;
            let more = self
                .details
                .entry(job.id)
                .or_insert_with(|| stuck_reason(view, job, t.id).detail);
            info.detail = if info.detail.is_empty() {
                more.clone()
            } else {
                format!("{}; {more}", info.detail)
            };
        }
        quota_reason(self.view, t, job, &info).unwrap_or(info)
    }

    /// The reason's name alone (for counts: nothing formatted).
    pub fn name<'w>(&self, t: &Task, job: &Job, w: &'w Waiting) -> &'w str {
        if over_quota(self.view, t, job) {
            "quota"
        } else {
            w.info.reason.as_str()
        }
    }
}

/// What a plan reads of the cluster once to name reasons without scanning every node per
/// task: the largest node in each dimension, and which partitions nodes taking work serve.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    cpu_milli: u64,
    mem_mib: u64,
    gpus: usize,
    /// Per partition: nodes taking work, draining, down.
    partitions: BTreeMap<String, (usize, usize, usize)>,
}

impl Shape {
    /// The shape of `view`'s registered nodes.
    pub fn of(view: &ClusterState) -> Self {
        let mut s = Shape::default();
        for n in view.nodes().values() {
            s.cpu_milli = s.cpu_milli.max(n.capacity.cpu_milli);
            s.mem_mib = s.mem_mib.max(n.capacity.mem_mib);
            s.gpus = s.gpus.max(n.capacity.gpus.len());
            let default = ["default".to_string()];
            let names = if n.partitions.is_empty() {
                &default[..]
            } else {
                &n.partitions[..]
            };
            for p in names {
                // A name is copied once per partition, not once per node.
                if !s.partitions.contains_key(p) {
                    s.partitions.insert(p.clone(), Default::default());
                }
                let Some(e) = s.partitions.get_mut(p) else {
                    continue;
                };
                if !n.is_up() {
                    e.2 += 1;
                } else if n.drain.is_some() {
                    e.1 += 1;
                } else {
                    e.0 += 1;
                }
            }
        }
        s
    }

    /// Why a task of `job` found no node, as far as the shape tells: larger than every
    /// node, or no node it may use takes work (`locality`, `drained`); else `resources`
    /// with the detail left to refine (`true`).
    pub fn stuck(&self, view: &ClusterState, job: &Job) -> (WaitingInfo, bool) {
        let req = &job.spec.resources;
        if view.nodes().is_empty() {
            return (
                WaitingInfo::new("resources", "no node is registered"),
                false,
            );
        }
        let big = req.cpu_milli > self.cpu_milli
            || req.mem_mib > self.mem_mib
            || req.gpu.count as usize > self.gpus
            || !req.gpu.models.is_empty()
            || !req.engines.is_empty();
        if big {
            if let Some(u) = unplaceable(req, view.nodes().values().map(|n| &n.capacity)) {
                let total = view.nodes().len();
                let d = format!(
                    "{}: larger than every node ({u}; {total} nodes)",
                    dimension(&u)
                );
                return (WaitingInfo::new("resources", d), false);
            }
        }
        let partition = partition_of(&job.spec);
        let container_node =
            |n: &Node| n.takes_work() && n.serves(partition) && n.runs_containers();
        if job.spec.image.is_some() && !view.nodes().values().any(container_node) {
            return (stuck_reason(view, job, TaskId(0)), false);
        }
        if !job.candidates.is_empty() {
            let image = job.spec.image.is_some();
            let usable = job.candidates.iter().any(|c| {
                view.node(*c).is_some_and(|n| {
                    n.takes_work() && n.serves(partition) && (!image || n.runs_containers())
                })
            });
            if !usable {
                return (stuck_reason(view, job, TaskId(0)), false);
            }
        } else {
            let (up, drained, down) = self.partitions.get(partition).copied().unwrap_or_default();
            if up == 0 {
                let reason = if drained > 0 && down == 0 {
                    "drained"
                } else {
                    "locality"
                };
                let d = format!(
                    "no node that takes work serves partition {partition} ({drained} draining, \
                     {down} down)"
                );
                return (WaitingInfo::new(reason, d), false);
            }
        }
        (WaitingInfo::new("resources", ""), true)
    }
}

/// Whether `t` was admitted at the base priority because its user's quota was full.
pub fn over_quota(view: &ClusterState, t: &Task, job: &Job) -> bool {
    let cfg = view.priority();
    t.quota.is_none()
        && t.priority == cfg.base_priority
        && cfg
            .resolve(&job.spec.user, partition_of(&job.spec))
            .is_some_and(|e| e.priority > cfg.base_priority)
}

pub use super::pipeline::WaitBoard;

/// Cores as users write them.
fn cores(milli: u64) -> String {
    format!("{}", milli as f64 / 1000.0)
}

/// GPUs as users write them (whole devices, or a fraction of one).
fn gpus_text(req: &ResourceRequest) -> String {
    if req.gpu.milli >= GPU_MILLI_PER_DEVICE {
        req.gpu.count.to_string()
    } else {
        format!(
            "{}",
            f64::from(req.gpu.milli) / f64::from(GPU_MILLI_PER_DEVICE)
        )
    }
}

/// Free GPUs of a node in the request's terms: devices with room for one share.
fn gpus_free(res: &NodeResources, req: &ResourceRequest) -> usize {
    res.gpus
        .iter()
        .filter(|d| req.gpu.accepts_model(&d.model) && d.free_milli >= req.gpu.milli)
        .count()
}

/// Whether `res` has the GPUs `req` asks, as `allocate_gpus` decides it, without building
/// the allocation (this runs for every node for every stuck task).
fn gpus_fit(res: &NodeResources, req: &ResourceRequest) -> bool {
    let g = &req.gpu;
    g.is_none()
        || res
            .gpus
            .iter()
            .filter(|d| d.free_milli >= g.milli && g.accepts_model(&d.model))
            .count()
            >= g.count as usize
}

/// Whether `req` passes every resource check against the free resources `free` (the part
/// of [`verdict_kind`] a node's free vector decides; a cheap first filter before it).
pub(crate) fn free_fits(free: &NodeResources, req: &ResourceRequest) -> bool {
    short_kind(free, req).is_none()
}

/// The first resource check `res` fails for `req`: `cpus`, `mem`, `gpu-model`, `gpus`,
/// `engine` (no allocation: the driver asks this of every node for every stuck task).
fn short_kind(res: &NodeResources, req: &ResourceRequest) -> Option<&'static str> {
    if res.cpu_milli < req.cpu_milli {
        return Some("cpus");
    }
    if res.mem_mib < req.mem_mib {
        return Some("mem");
    }
    if !gpus_fit(res, req) {
        if !req.gpu.models.is_empty() && !res.gpus.iter().any(|d| req.gpu.accepts_model(&d.model)) {
            return Some("gpu-model");
        }
        return Some("gpus");
    }
    if req
        .engines
        .iter()
        .any(|(k, n)| res.engines.get(k).copied().unwrap_or(0) < *n)
    {
        return Some("engine");
    }
    None
}

/// By how much `res` fails check `kind` for `req`; `what` says whose resources (`free`,
/// `in all`).
fn short_detail(kind: &str, res: &NodeResources, req: &ResourceRequest, what: &str) -> String {
    match kind {
        "cpus" => format!(
            "asks cpus {}, {} {what}",
            cores(req.cpu_milli),
            cores(res.cpu_milli)
        ),
        "mem" => format!("asks mem {}, {} {what}", req.mem_mib, res.mem_mib),
        "gpu-model" => format!("asks gpu model {}, has none", req.gpu.models.join(" or ")),
        "gpus" => format!(
            "asks gpus {}, {} {what}",
            gpus_text(req),
            gpus_free(res, req)
        ),
        _ => req
            .engines
            .iter()
            .map(|(k, n)| {
                let have = res.engines.get(k).copied().unwrap_or(0);
                format!("asks {k} {n}, {have} {what}")
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A preemptor other than `task` holds `node` while its victims stop.
fn reserved_for(view: &ClusterState, node: &Node, task: TaskId) -> Option<TaskId> {
    view.awaiting()
        .iter()
        .find(|(t, (n, _))| {
            *n == node.id
                && **t != task
                && view
                    .task(**t)
                    .is_some_and(|x| x.status.state == hetsched_common::TaskState::Pending)
        })
        .map(|(t, _)| *t)
}

/// The first check `node` fails for `task` of `job`, in the stages' order (liveness and
/// drain, partition, locality, capacity, free resources, a preemptor's reservation), as
/// [`NodeVerdict::verdict`] names it; `fits` when none fails.
pub fn verdict_kind(view: &ClusterState, node: &Node, job: &Job, task: TaskId) -> &'static str {
    let req = &job.spec.resources;
    if !node.is_up() {
        "down"
    } else if node.drain.is_some() {
        "drained"
    } else if !node.serves(partition_of(&job.spec)) {
        "partition"
    } else if !job.candidates.is_empty() && !job.candidates.contains(&node.id) {
        "locality"
    } else if job.spec.image.is_some() && !node.runs_containers() {
        "containers"
    } else if let Some(k) = short_kind(&node.capacity, req) {
        k
    } else if let Some(k) = short_kind(&node.free, req) {
        k
    } else if reserved_for(view, node, task).is_some() {
        "reserved"
    } else {
        "fits"
    }
}

/// `node`'s verdict on `task` of `job` ([`verdict_kind`]), with by how much.
pub fn node_verdict(view: &ClusterState, node: &Node, job: &Job, task: TaskId) -> NodeVerdict {
    let req = &job.spec.resources;
    let partition = partition_of(&job.spec);
    let verdict = verdict_kind(view, node, job, task);
    let detail = match verdict {
        "down" => "node is down".to_string(),
        "drained" => "draining: takes no new tasks".to_string(),
        "partition" => {
            let serves = if node.partitions.is_empty() {
                "default".to_string()
            } else {
                node.partitions.join(", ")
            };
            format!("serves {serves}, not {partition}")
        }
        "locality" => "not among the job's --nodes".to_string(),
        "containers" => format!(
            "runs no containers: {}",
            node.containers_info().why.unwrap_or_default()
        ),
        "reserved" => match reserved_for(view, node, task) {
            Some(h) => format!("held for task-{} while its victims stop", h.get()),
            None => String::new(),
        },
        "fits" => format!(
            "free cpus {}, mem {}",
            cores(node.free.cpu_milli),
            node.free.mem_mib
        ),
        k if short_kind(&node.capacity, req).is_some() => {
            format!(
                "too small: {}",
                short_detail(k, &node.capacity, req, "in all")
            )
        }
        k => short_detail(k, &node.free, req, "free"),
    };
    NodeVerdict {
        node: node.id,
        name: node.name.clone(),
        verdict: verdict.to_string(),
        detail,
    }
}

/// Every registered node's verdict on `task`, in id order.
pub fn node_verdicts(view: &ClusterState, job: &Job, task: TaskId) -> Vec<NodeVerdict> {
    view.nodes()
        .values()
        .map(|n| node_verdict(view, n, job, task))
        .collect()
}

/// Verdict counts as `2 cpus, 1 drained`.
fn tally(kinds: &[(&Node, &'static str)]) -> (BTreeMap<&'static str, usize>, String) {
    let mut by: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (_, v) in kinds {
        *by.entry(v).or_insert(0) += 1;
    }
    let text = by
        .iter()
        .map(|(v, n)| format!("{n} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    (by, text)
}

/// The dimension an unplaceable request lacks, as the CLI names it.
fn dimension(u: &Unplaceable) -> &'static str {
    match u {
        Unplaceable::Cpus { .. } => "cpus",
        Unplaceable::Mem { .. } => "mem",
        Unplaceable::GpuModel { .. } | Unplaceable::Gpus { .. } => "gpus",
        Unplaceable::Engine { .. } => "engine",
        Unplaceable::Together(_) => "cpus, mem",
    }
}

/// Why `task` found no node at the end of the chain (nothing placed, queued or preempted):
/// `resources` with the dimension and node counts, `locality` or `drained` where the job
/// may use no node that takes work, `reserved` where only a preemptor's reservation is in
/// the way.
pub fn stuck_reason(view: &ClusterState, job: &Job, task: TaskId) -> WaitingInfo {
    let req = &job.spec.resources;
    let total = view.nodes().len();
    if total == 0 {
        return WaitingInfo::new("resources", "no node is registered");
    }
    if let Some(u) = unplaceable(req, view.nodes().values().map(|n| &n.capacity)) {
        let d = format!(
            "{}: larger than every node ({u}; {total} nodes)",
            dimension(&u)
        );
        return WaitingInfo::new("resources", d);
    }
    let kinds: Vec<(&Node, &'static str)> = view
        .nodes()
        .values()
        .map(|n| (n, verdict_kind(view, n, job, task)))
        .collect();
    let (by, text) = tally(&kinds);
    let count = |v: &str| by.get(v).copied().unwrap_or(0);
    if !job.candidates.is_empty() {
        let pinned: Vec<&(&Node, &str)> = kinds
            .iter()
            .filter(|(n, _)| job.candidates.contains(&n.id))
            .collect();
        let names = |want: &str| -> Vec<String> {
            pinned
                .iter()
                .filter(|(_, v)| *v == want)
                .map(|(n, _)| format!("{} (node-{})", n.name, n.id.get()))
                .collect()
        };
        let (drained, down) = (names("drained"), names("down"));
        if !pinned.is_empty() && drained.len() + down.len() == pinned.len() {
            let mut parts = Vec::new();
            if !drained.is_empty() {
                parts.push(format!("drained: {}", drained.join(", ")));
            }
            if !down.is_empty() {
                parts.push(format!("down: {}", down.join(", ")));
            }
            let reason = if down.is_empty() {
                "drained"
            } else {
                "locality"
            };
            let d = format!("pinned to nodes that take no work ({})", parts.join("; "));
            return WaitingInfo::new(reason, d);
        }
    }
    let usable = total - count("down") - count("drained") - count("partition") - count("locality");
    if usable == 0 {
        let partition = partition_of(&job.spec);
        let d = format!("no node it may use takes work in partition {partition} ({text})");
        let reason = if count("drained") > 0 && count("down") == 0 {
            "drained"
        } else {
            "locality"
        };
        return WaitingInfo::new(reason, d);
    }
    if usable == count("containers") {
        // Issue 52: a container job on nodes none of which runs containers.
        let d = format!("containers: no node it may use runs container tasks ({text})");
        return WaitingInfo::new("resources", d);
    }
    if count("reserved") > 0 && count("fits") == 0 {
        let d = format!("the nodes with room are held for preemptors ({text})");
        return WaitingInfo::new("reserved", d);
    }
    // The resource dimension most nodes lack names the reason.
    let dim = ["cpus", "mem", "gpus", "gpu-model", "engine"]
        .into_iter()
        .max_by_key(|d| (count(d), std::cmp::Reverse(*d)))
        .filter(|d| count(d) > 0)
        .unwrap_or("cpus");
    let fits = count("fits");
    let d = format!("{dim}: {fits} of {total} nodes have room ({text})");
    WaitingInfo::new("resources", d)
}

/// A task queued on `node`'s local queue (S0.3): it waits there for room.
pub fn queued_reason(node: &Node, job: &Job, task: TaskId) -> WaitingInfo {
    let ahead = node.queued.iter().take_while(|t| **t != task).count();
    let req = &job.spec.resources;
    let why = match short_kind(&node.free, req) {
        Some(dim) => format!("{dim}: {}", short_detail(dim, &node.free, req, "free")),
        None => "waiting to be promoted".to_string(),
    };
    let d = format!(
        "in {}'s local queue (node-{}, {ahead} ahead): {why}",
        node.name,
        node.id.get()
    );
    WaitingInfo::new("resources", d)
}

/// When `t` was admitted at the base priority because its user's quota was full, the
/// `quota` reason that replaces `under` (the stage's own reason, kept in the detail).
pub fn quota_reason(
    view: &ClusterState,
    t: &Task,
    job: &Job,
    under: &WaitingInfo,
) -> Option<WaitingInfo> {
    let cfg = view.priority();
    if t.quota.is_some() || t.priority != cfg.base_priority {
        return None;
    }
    let partition = partition_of(&job.spec);
    let entry = cfg.resolve(&job.spec.user, partition)?;
    if entry.priority <= cfg.base_priority {
        return None;
    }
    let mut limits = Vec::new();
    if let Some(c) = entry.quota.cpu_milli {
        limits.push(format!("cpus {}", cores(c)));
    }
    if let Some(m) = entry.quota.mem_mib {
        limits.push(format!("mem {m}"));
    }
    if let Some(g) = entry.quota.gpu_milli {
        limits.push(format!(
            "gpus {}",
            g as f64 / f64::from(GPU_MILLI_PER_DEVICE)
        ));
    }
    let d = format!(
        "over the quota of {} in partition {partition} ({}): admitted at base priority {}, \
         not {}; then {}: {}",
        job.spec.user,
        limits.join(", "),
        cfg.base_priority,
        entry.priority,
        under.reason,
        under.detail
    );
    Some(WaitingInfo::new("quota", d))
}

/// Issue 51: `dependency` while another singleton job of its user and name is under way.
pub fn singleton_reason(other: hetsched_common::JobId) -> WaitingInfo {
    WaitingInfo::new("dependency", format!("singleton: {other} running"))
}

/// Issue 51: `throttle` while `n` of its job's tasks are assigned or running, `max` allowed.
pub fn throttle_reason(max: u32, n: u32) -> WaitingInfo {
    WaitingInfo::new(
        "throttle",
        format!("max_running {max}: {n} of its tasks assigned or running"),
    )
}

/// Issue 51: why the dependency gate (`sched/pipeline/dependency_stage.rs`) holds `t` of
/// `job` in `view` now, as the gate decides it at the start of a plan; `None` when it
/// would let it through.
pub fn held_reason(view: &ClusterState, t: &Task, job: &Job) -> Option<WaitingInfo> {
    if !job.spec.is_gated() {
        return None;
    }
    if job.spec.has_dependencies() {
        let mut states = crate::state::JobStates::default();
        match view.dependency_state(job, t.index, &mut states) {
            crate::state::DepState::Met => {}
            crate::state::DepState::Waiting(d) | crate::state::DepState::Never(d) => {
                return Some(WaitingInfo::new("dependency", d))
            }
        }
    }
    if job.spec.singleton {
        if let Some(other) = view.singleton_holder(job) {
            return Some(singleton_reason(other));
        }
    }
    let max = job.spec.max_running?;
    let n = view.tasks_under_way(job);
    (n >= max).then(|| throttle_reason(max, n))
}

/// A retry back-off: the task is not considered before `until_ms`.
pub fn backoff_reason(t: &Task, until_ms: u64, now_ms: u64) -> WaitingInfo {
    let left = until_ms.saturating_sub(now_ms).div_ceil(1000);
    let d = format!(
        "retry back-off after {} failure(s): {left}s left (not before {until_ms} ms)",
        t.failures
    );
    WaitingInfo::new("backoff", d)
}
