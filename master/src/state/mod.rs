//! `ClusterState` — the replicated state machine of the masters. Pure and deterministic:
//! `apply` reads no clock (every command carries the leader's timestamp), does no I/O, and
//! iterates ordered maps only, so the same log yields byte-identical state on every replica.
//!
//! "Submitted later" means "a higher log index": ids are handed out in apply order.

mod command;
mod hash;

pub use command::{Assign, Command, CommandEnvelope, Outcome, Plan, TaskRef};
pub use hash::fnv1a64;

/// The nodes whose free resources or liveness applying `command` may change, known before
/// it applies (so the command need not be kept, or copied, past `apply`).
pub fn command_nodes(command: &Command) -> BTreeSet<NodeId> {
    let mut nodes = BTreeSet::new();
    match command {
        Command::NodeDown { node }
        | Command::NodeUp { node }
        | Command::TaskFinished { node, .. }
        | Command::TaskLost { node, .. } => {
            nodes.insert(*node);
        }
        Command::ApplyPlan(plan) => nodes.extend(plan.assignments.iter().map(|a| a.node)),
        _ => {}
    }
    nodes
}

/// [`command_nodes`] plus those only the outcome names (a new registration, a cancelled
/// job's nodes): what derived caches such as the placement index must re-read.
pub fn touched_nodes(mut nodes: BTreeSet<NodeId>, outcome: &Outcome) -> Vec<NodeId> {
    match outcome {
        Outcome::Registered { node }
        | Outcome::NodeUp { node }
        | Outcome::NodeDown { node, .. } => {
            nodes.insert(*node);
        }
        Outcome::Cancelled { stop, .. } => nodes.extend(stop.iter().map(|r| r.node)),
        _ => {}
    }
    nodes.into_iter().collect()
}

use hetsched_common::program::{
    relation, CallSummary, EngineDecl, EngineTotal, SelectionTable, TaskKind,
};
use hetsched_common::protocol::{EngineInfo, JobInfo, NodeCounts, NodeInfo, TaskInfo};
use hetsched_common::{
    Attempt, ClientRequestId, EngineKind, GpuAlloc, JobId, JobSpec, NodeId, NodeResources, TaskId,
    TaskState, TaskStatus,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A job as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Id.
    pub id: JobId,
    /// What was submitted.
    pub spec: JobSpec,
    /// Its tasks in index order.
    pub tasks: Vec<TaskId>,
    /// Leader's clock at submission (ms since the Unix epoch).
    pub submitted_ms: u64,
    /// Log index of the submission.
    pub submitted_index: u64,
}

/// A task as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Id.
    pub id: TaskId,
    /// Its job.
    pub job: JobId,
    /// Index within the job.
    pub index: u32,
    /// State, node, attempt, exit code.
    pub status: TaskStatus,
    /// GPU devices held by the current attempt.
    pub gpus: GpuAlloc,
    /// A program task's calls in brief, as its slave reported them.
    #[serde(default)]
    pub calls: Option<CallSummary>,
}

/// Liveness of a node as committed in the log (heartbeats themselves are not logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeLiveness {
    /// Takes work.
    Up,
    /// Declared lost; its tasks went back to pending.
    Down,
}

/// A slave node as the state machine keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Id.
    pub id: NodeId,
    /// The slave's registration key (registration is idempotent on it).
    pub key: u64,
    /// Name.
    pub name: String,
    /// Address masters dispatch to.
    pub addr: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Total resources.
    pub capacity: NodeResources,
    /// Free resources (capacity minus the tasks assigned or running there).
    pub free: NodeResources,
    /// Up or down.
    pub liveness: NodeLiveness,
    /// Tasks assigned or running there.
    pub tasks: BTreeSet<TaskId>,
}

impl Node {
    /// Whether the node takes work.
    pub fn is_up(&self) -> bool {
        self.liveness == NodeLiveness::Up
    }

    /// Whether every GPU on the node is emulated (and it has some).
    pub fn gpus_emulated(&self) -> bool {
        !self.capacity.gpus.is_empty() && self.capacity.gpus.iter().all(|g| g.emulated)
    }
}

/// What the state remembers of one benchmark client's proposals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchCounter {
    /// Proposals applied.
    pub applied: u64,
    /// Sequence numbers of the recorded ones.
    pub recorded: BTreeSet<u64>,
}

/// What a slave declared of its engines and measured of them (S0.5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProfile {
    /// Engines.
    pub engines: Vec<EngineDecl>,
    /// Selection table.
    pub table: SelectionTable,
}

/// The whole replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// Nodes by id.
    pub nodes: BTreeMap<NodeId, Node>,
    /// Registration key → node id.
    node_keys: BTreeMap<u64, NodeId>,
    /// Jobs by id.
    pub jobs: BTreeMap<JobId, Job>,
    /// Tasks by id.
    pub tasks: BTreeMap<TaskId, Task>,
    /// Pending tasks in queue order (lower id = submitted earlier).
    pub pending: BTreeSet<TaskId>,
    /// Outcomes of client requests already applied, so a retried request applies once.
    applied_requests: BTreeMap<ClientRequestId, Outcome>,
    /// Benchmark counters per benchmark client.
    pub bench: BTreeMap<u64, BenchCounter>,
    next_job: u64,
    next_task: u64,
    next_node: u64,
    /// Engines and selection tables by node (S0.5).
    #[serde(default)]
    pub profiles: BTreeMap<NodeId, NodeProfile>,
    /// The task–engine relation (S0.1): per task kind of every program submitted, engines by
    /// total time ascending, built from all slaves' tables.
    #[serde(default)]
    pub relations: BTreeMap<TaskKind, Vec<EngineTotal>>,
    /// Last applied log index.
    pub last_index: u64,
    /// Leader's clock of the last applied command.
    pub last_ms: u64,
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one committed command at log `index`. Never panics on any command: stale or
    /// invalid ones are answered with [`Outcome::Rejected`] or [`Outcome::Ignored`] and change
    /// nothing but `last_index`.
    pub fn apply(&mut self, index: u64, env: CommandEnvelope) -> Outcome {
        self.last_index = index;
        self.last_ms = self.last_ms.max(env.at_ms);
        if let Some(req) = env.request {
            if let Some(prev) = self.applied_requests.get(&req) {
                return prev.clone();
            }
        }
        let outcome = match env.command {
            Command::RegisterNode {
                key,
                node,
                name,
                addr,
                capacity,
                labels,
            } => self.register_node(key, node, name, addr, capacity, labels),
            Command::NodeDown { node } => self.node_down(node),
            Command::NodeUp { node } => self.node_up(node),
            Command::SubmitJob { spec } => self.submit(index, env.at_ms, spec),
            Command::CancelJob { job } => self.cancel(job),
            Command::ApplyPlan(plan) => self.apply_plan(plan),
            Command::TaskStarted {
                node,
                task,
                attempt,
            } => self.task_started(node, task, attempt),
            Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
            } => self.task_finished(node, task, attempt, exit_code),
            Command::Bench {
                client,
                seq,
                record,
                ..
            } => {
                let c = self.bench.entry(client).or_default();
                c.applied += 1;
                if record {
                    c.recorded.insert(seq);
                }
                Outcome::Ignored(String::new())
            }
            Command::LeaderBarrier { master } => {
                Outcome::Ignored(format!("barrier of master {master}"))
            }
            Command::TaskLost {
                node,
                task,
                attempt,
            } => self.task_lost(node, task, attempt),
            Command::RecordProfile {
                node,
                engines,
                table,
            } => self.record_profile(node, engines, table),
            Command::RecordCalls {
                node,
                task,
                attempt,
                summary,
            } => self.record_calls(node, task, attempt, summary),
        };
        if let Some(req) = env.request {
            if !matches!(outcome, Outcome::Rejected(_)) {
                self.applied_requests.insert(req, outcome.clone());
            }
        }
        outcome
    }

    fn register_node(
        &mut self,
        key: u64,
        claimed: Option<NodeId>,
        name: String,
        addr: String,
        capacity: NodeResources,
        labels: BTreeMap<String, String>,
    ) -> Outcome {
        let known = self.node_keys.get(&key).copied();
        if let (Some(c), Some(k)) = (claimed, known) {
            if c != k {
                return Outcome::Rejected(format!(
                    "registration key belongs to {k}, not the claimed {c}"
                ));
            }
        }
        match known {
            Some(id) => {
                let Some(n) = self.nodes.get_mut(&id) else {
                    return Outcome::Rejected(format!("{id} is missing from the node table"));
                };
                n.name = name;
                n.addr = addr;
                n.labels = labels;
                n.liveness = NodeLiveness::Up;
                // A node's capacity can only change while it holds nothing: its free vector
                // is capacity minus its tasks' grants and must stay consistent.
                if n.tasks.is_empty() {
                    n.free = capacity.clone();
                    n.capacity = capacity;
                }
                Outcome::Registered { node: id }
            }
            None => {
                self.next_node += 1;
                let id = NodeId(self.next_node);
                self.node_keys.insert(key, id);
                self.nodes.insert(
                    id,
                    Node {
                        id,
                        key,
                        name,
                        addr,
                        labels,
                        free: capacity.clone(),
                        capacity,
                        liveness: NodeLiveness::Up,
                        tasks: BTreeSet::new(),
                    },
                );
                Outcome::Registered { node: id }
            }
        }
    }

    fn node_down(&mut self, node: NodeId) -> Outcome {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if n.liveness == NodeLiveness::Down {
            return Outcome::Ignored("node already down".into());
        }
        n.liveness = NodeLiveness::Down;
        let lost: Vec<TaskId> = n.tasks.iter().copied().collect();
        let mut requeued = Vec::new();
        for t in lost {
            if let Some(r) = self.requeue(t) {
                requeued.push(r);
            }
        }
        Outcome::NodeDown { node, requeued }
    }

    fn node_up(&mut self, node: NodeId) -> Outcome {
        match self.nodes.get_mut(&node) {
            Some(n) if n.liveness == NodeLiveness::Down => {
                n.liveness = NodeLiveness::Up;
                Outcome::NodeUp { node }
            }
            Some(_) => Outcome::Ignored("node already up".into()),
            None => Outcome::Rejected(format!("unknown {node}")),
        }
    }

    /// Takes a task off its node (releasing its grant) and puts it back in the queue.
    /// Returns the attempt that was lost.
    fn requeue(&mut self, task: TaskId) -> Option<TaskRef> {
        let t = self.tasks.get_mut(&task)?;
        let node = t.status.node?;
        let attempt = t.status.attempt;
        t.status.requeue().ok()?;
        let gpus = std::mem::take(&mut t.gpus);
        let job = t.job;
        self.release(node, task, job, &gpus);
        self.pending.insert(task);
        Some(TaskRef {
            task,
            node,
            attempt,
        })
    }

    fn release(&mut self, node: NodeId, task: TaskId, job: JobId, gpus: &GpuAlloc) {
        let Some(req) = self.jobs.get(&job).map(|j| j.spec.resources.clone()) else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.tasks.remove(&task) {
                n.free.give_back(&req, gpus, &n.capacity);
            }
        }
    }

    fn submit(&mut self, index: u64, at_ms: u64, mut spec: JobSpec) -> Outcome {
        if let Err(e) = spec.validate() {
            return Outcome::Rejected(e.to_string());
        }
        if let Some(p) = &spec.program {
            let kind = p.kind();
            let r = relation(&kind, self.profiles.values().map(|p| &p.table));
            self.relations.insert(kind, r);
            spec.carry_program();
        }
        self.next_job += 1;
        let id = JobId(self.next_job);
        let mut tasks = Vec::with_capacity(spec.count as usize);
        for index in 0..spec.count {
            self.next_task += 1;
            let tid = TaskId(self.next_task);
            tasks.push(tid);
            self.tasks.insert(
                tid,
                Task {
                    id: tid,
                    job: id,
                    index,
                    status: TaskStatus::new(),
                    gpus: Vec::new(),
                    calls: None,
                },
            );
            self.pending.insert(tid);
        }
        self.jobs.insert(
            id,
            Job {
                id,
                spec,
                tasks: tasks.clone(),
                submitted_ms: at_ms,
                submitted_index: index,
            },
        );
        Outcome::Submitted { job: id, tasks }
    }

    fn cancel(&mut self, job: JobId) -> Outcome {
        let Some(j) = self.jobs.get(&job) else {
            return Outcome::Rejected(format!("unknown {job}"));
        };
        let ids = j.tasks.clone();
        let mut cancelled = 0u32;
        let mut stop = Vec::new();
        for t in ids {
            let Some(task) = self.tasks.get_mut(&t) else {
                continue;
            };
            let was = task.status.clone();
            if task.status.cancel().is_err() {
                continue;
            }
            cancelled += 1;
            self.pending.remove(&t);
            if let (TaskState::Assigned | TaskState::Running, Some(node)) = (was.state, was.node) {
                let gpus = std::mem::take(&mut task.gpus);
                self.release(node, t, job, &gpus);
                stop.push(TaskRef {
                    task: t,
                    node,
                    attempt: was.attempt,
                });
            }
        }
        Outcome::Cancelled {
            job,
            tasks: cancelled,
            stop,
        }
    }

    /// Re-checks every assignment against the current state (optimistic concurrency, as
    /// Nomad's plan applier does): a task no longer pending, a node down or unknown, or
    /// resources no longer free make that assignment stale; the rest apply.
    fn apply_plan(&mut self, plan: Plan) -> Outcome {
        let mut accepted = Vec::new();
        let mut rejected = 0u32;
        for a in plan.assignments {
            match self.try_assign(&a) {
                Some(r) => accepted.push(r),
                None => rejected += 1,
            }
        }
        Outcome::PlanApplied { accepted, rejected }
    }

    fn try_assign(&mut self, a: &Assign) -> Option<TaskRef> {
        let task = self.tasks.get(&a.task)?;
        if task.status.state != TaskState::Pending {
            return None;
        }
        let spec = &self.jobs.get(&task.job)?.spec;
        if !spec.nodes.is_empty() && !self.locality(&spec.nodes).contains(&a.node) {
            return None;
        }
        let req = &spec.resources;
        let node = self.nodes.get_mut(&a.node)?;
        if !node.is_up() {
            return None;
        }
        let gpus = node.free.take(req)?;
        node.tasks.insert(a.task);
        let task = self.tasks.get_mut(&a.task)?;
        let attempt = task.status.assign(a.node).ok()?;
        task.gpus = gpus;
        self.pending.remove(&a.task);
        Some(TaskRef {
            task: a.task,
            node: a.node,
            attempt,
        })
    }

    /// The task's current attempt on `node`, if the report is about it (fencing).
    fn current(&self, node: NodeId, task: TaskId, attempt: Attempt) -> Result<&Task, Outcome> {
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

    fn task_started(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.tasks.get_mut(&task).map(|t| t.status.start(attempt)) {
            Some(Ok(())) => Outcome::TaskUpdated,
            Some(Err(e)) => Outcome::Ignored(e.to_string()),
            None => Outcome::Rejected(format!("unknown {task}")),
        }
    }

    fn task_finished(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if let Err(e) = t.status.finish(attempt, exit_code) {
            return Outcome::Ignored(e.to_string());
        }
        let gpus = std::mem::take(&mut t.gpus);
        let job = t.job;
        self.release(node, task, job, &gpus);
        Outcome::TaskUpdated
    }

    fn task_lost(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.requeue(task) {
            Some(_) => Outcome::TaskUpdated,
            None => Outcome::Ignored(format!("{task} was not assigned or running")),
        }
    }

    fn record_profile(
        &mut self,
        node: NodeId,
        engines: Vec<EngineDecl>,
        table: SelectionTable,
    ) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        self.profiles.insert(node, NodeProfile { engines, table });
        self.rebuild_relations();
        Outcome::Ignored(String::new())
    }

    /// Recomputes the relation of every known task kind from all slaves' tables.
    fn rebuild_relations(&mut self) {
        let kinds: Vec<TaskKind> = self.relations.keys().cloned().collect();
        for k in kinds {
            let r = relation(&k, self.profiles.values().map(|p| &p.table));
            self.relations.insert(k, r);
        }
    }

    fn record_calls(
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

    /// The engines of a node as listed: CPU (whole cores) and GPU (devices) from its
    /// resources, the other kinds from its capacity; emulation as its slave declared it.
    pub fn engine_info(&self, n: &Node) -> Vec<EngineInfo> {
        let declared_emulated = |k: EngineKind| {
            self.profiles
                .get(&n.id)
                .is_some_and(|p| p.engines.iter().any(|e| e.kind == k && e.emulated))
        };
        let mut out = vec![EngineInfo {
            kind: EngineKind::Cpu,
            count: (n.capacity.cpu_milli / 1000) as u32,
            free: (n.free.cpu_milli / 1000) as u32,
            emulated: false,
        }];
        if !n.capacity.gpus.is_empty() {
            out.push(EngineInfo {
                kind: EngineKind::Gpu,
                count: n.capacity.gpus.len() as u32,
                free: n
                    .free
                    .gpus
                    .iter()
                    .filter(|g| g.free_milli >= hetsched_common::GPU_MILLI_PER_DEVICE)
                    .count() as u32,
                emulated: n.gpus_emulated(),
            });
        }
        for (k, count) in &n.capacity.engines {
            if *count == 0 || matches!(k, EngineKind::Cpu | EngineKind::Gpu) {
                continue;
            }
            out.push(EngineInfo {
                kind: *k,
                count: *count,
                free: n.free.engines.get(k).copied().unwrap_or(0),
                emulated: declared_emulated(*k),
            });
        }
        out
    }

    /// A fixed hash (FNV-1a, 64 bit) of the canonical serialisation: equal on every replica
    /// that applied the same log.
    pub fn state_hash(&self) -> u64 {
        match rmp_serde::to_vec_named(self) {
            Ok(bytes) => fnv1a64(&bytes),
            Err(_) => 0,
        }
    }

    /// Serialised state (for snapshots).
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// State from [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        rmp_serde::from_slice(b).map_err(|e| format!("bad snapshot: {e}"))
    }

    /// Task counts by state name (every state present).
    pub fn task_counts(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = [
            TaskState::Pending,
            TaskState::Assigned,
            TaskState::Running,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Cancelled,
        ]
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
        for t in self.tasks.values() {
            *m.entry(t.status.state.as_str().to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Node counts.
    pub fn node_counts(&self) -> NodeCounts {
        let up = self.nodes.values().filter(|n| n.is_up()).count() as u64;
        NodeCounts {
            total: self.nodes.len() as u64,
            up,
            down: self.nodes.len() as u64 - up,
        }
    }

    /// Task listing.
    pub fn task_info(&self, t: &Task) -> TaskInfo {
        TaskInfo {
            id: t.id,
            job_id: t.job,
            index: t.index,
            state: t.status.state,
            node: t.status.node,
            attempt: t.status.attempt,
            exit_code: t.status.exit_code,
            calls: t.calls,
        }
    }

    /// Job listing.
    pub fn job_info(&self, j: &Job) -> JobInfo {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for t in &j.tasks {
            if let Some(t) = self.tasks.get(t) {
                *counts
                    .entry(t.status.state.as_str().to_string())
                    .or_insert(0) += 1;
            }
        }
        let n = |s: TaskState| counts.get(s.as_str()).copied().unwrap_or(0);
        let total = j.tasks.len() as u32;
        let finals = n(TaskState::Succeeded) + n(TaskState::Failed) + n(TaskState::Cancelled);
        let state = if n(TaskState::Succeeded) == total {
            "succeeded"
        } else if finals == total && n(TaskState::Cancelled) > 0 {
            "cancelled"
        } else if finals == total {
            "failed"
        } else if n(TaskState::Pending) == total {
            "pending"
        } else {
            "running"
        };
        JobInfo {
            id: j.id,
            name: j.spec.name.clone(),
            user: j.spec.user.clone(),
            partition: j.spec.partition.clone(),
            state: state.to_string(),
            tasks: total,
            task_states: counts,
            submitted_ms: j.submitted_ms,
        }
    }

    /// Node listing.
    pub fn node_info(&self, n: &Node) -> NodeInfo {
        NodeInfo {
            id: n.id,
            name: n.name.clone(),
            addr: n.addr.clone(),
            state: match n.liveness {
                NodeLiveness::Up => "up",
                NodeLiveness::Down => "down",
            }
            .to_string(),
            capacity: n.capacity.clone(),
            free: n.free.clone(),
            tasks: n.tasks.len() as u32,
            gpus_emulated: n.gpus_emulated(),
            engines: self.engine_info(n),
        }
    }

    /// The nodes a locality constraint names (by name, id or `node-<id>`), ascending; names
    /// that match no node are skipped.
    pub fn locality(&self, given: &[String]) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| {
                given
                    .iter()
                    .any(|g| hetsched_common::names_node(g.trim(), n.id, &n.name))
            })
            .map(|n| n.id)
            .collect()
    }

    /// The resources each task of `job` asks for.
    pub fn job_resources(&self, job: JobId) -> Option<&hetsched_common::ResourceRequest> {
        self.jobs.get(&job).map(|j| &j.spec.resources)
    }
}

#[cfg(test)]
mod tests;
