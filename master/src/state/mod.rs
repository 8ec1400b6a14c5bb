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
        Command::TaskReports { node, reports }
            if reports
                .iter()
                .any(|r| matches!(r, TaskReport::Finished { .. })) =>
        {
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

use hetsched_common::protocol::{JobInfo, NodeCounts, NodeInfo, TaskInfo, TaskReport};
use hetsched_common::{
    Attempt, ClientRequestId, GpuAlloc, JobId, JobSpec, NodeId, NodeResources, TaskId, TaskState,
    TaskStatus,
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
    /// Leader's clock when its last task reached a final state (retention counts from here).
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Tasks not yet in a final state. Derived (rebuilt on restore), not serialised.
    #[serde(skip)]
    pub open: u32,
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

/// A client request's outcome, kept in compact form for retries (CONTRACT.md, Retention):
/// a `Submitted` of 100,000 tasks is a job id, its first task id and a count, since a job's
/// task ids are consecutive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOutcome {
    /// A job was submitted: tasks `first_task .. first_task + count`.
    Submitted {
        /// Job.
        job: JobId,
        /// Its first task id.
        first_task: TaskId,
        /// Number of tasks.
        count: u32,
    },
    /// A job was cancelled.
    Cancelled {
        /// Job.
        job: JobId,
        /// Tasks that went to cancelled.
        tasks: u32,
    },
    /// Anything else, kept whole.
    Other(Outcome),
}

impl RequestOutcome {
    fn compact(o: &Outcome) -> Self {
        match o {
            Outcome::Submitted { job, tasks } => {
                let consecutive = tasks.windows(2).all(|w| w[1].0 == w[0].0 + 1);
                match (tasks.first(), consecutive) {
                    (Some(first), true) => RequestOutcome::Submitted {
                        job: *job,
                        first_task: *first,
                        count: tasks.len() as u32,
                    },
                    _ => RequestOutcome::Other(o.clone()),
                }
            }
            Outcome::Cancelled { job, tasks, .. } => RequestOutcome::Cancelled {
                job: *job,
                tasks: *tasks,
            },
            o => RequestOutcome::Other(o.clone()),
        }
    }

    /// The outcome a retried request is answered with. A retried cancel stops nothing:
    /// the first application already did.
    pub fn expand(&self) -> Outcome {
        match self {
            RequestOutcome::Submitted {
                job,
                first_task,
                count,
            } => Outcome::Submitted {
                job: *job,
                tasks: (0..*count as u64)
                    .map(|i| TaskId(first_task.0 + i))
                    .collect(),
            },
            RequestOutcome::Cancelled { job, tasks } => Outcome::Cancelled {
                job: *job,
                tasks: *tasks,
                stop: Vec::new(),
            },
            RequestOutcome::Other(o) => o.clone(),
        }
    }
}

/// One remembered client request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRequest {
    /// Leader's clock when it applied.
    pub at_ms: u64,
    /// What it returned.
    pub outcome: RequestOutcome,
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
    /// Outcomes of client requests already applied, so a retried request applies once;
    /// forgotten by `GcJobs` after the retry window.
    requests: BTreeMap<ClientRequestId, RecentRequest>,
    /// Snapshots written before compact request outcomes existed carry this; it is folded
    /// into `requests` on restore and never written again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    applied_requests: BTreeMap<ClientRequestId, Outcome>,
    /// `requests` in time order (derived).
    #[serde(skip)]
    requests_by_time: BTreeSet<(u64, ClientRequestId)>,
    /// Finished jobs in the order they finished (derived).
    #[serde(skip)]
    finished_jobs: BTreeSet<(u64, JobId)>,
    /// Benchmark counters per benchmark client.
    pub bench: BTreeMap<u64, BenchCounter>,
    next_job: u64,
    next_task: u64,
    next_node: u64,
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
            if let Some(prev) = self.requests.get(&req) {
                return prev.outcome.expand();
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
            Command::GcJobs {
                jobs_finished_before_ms,
                requests_before_ms,
            } => self.gc(jobs_finished_before_ms, requests_before_ms),
            Command::TaskReports { node, reports } => self.task_reports(node, reports),
        };
        if let Some(req) = env.request {
            if !matches!(outcome, Outcome::Rejected(_)) {
                let at_ms = self.last_ms;
                self.requests.insert(
                    req,
                    RecentRequest {
                        at_ms,
                        outcome: RequestOutcome::compact(&outcome),
                    },
                );
                self.requests_by_time.insert((at_ms, req));
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

    fn submit(&mut self, index: u64, at_ms: u64, spec: JobSpec) -> Outcome {
        if let Err(e) = spec.validate() {
            return Outcome::Rejected(e.to_string());
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
                finished_ms: None,
                open: tasks.len() as u32,
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
        let mut finals = 0u32;
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
            finals += 1;
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
        self.tasks_became_final(job, finals);
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
        let req = &self.jobs.get(&task.job)?.spec.resources;
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
        let now_final = t.status.state.is_final();
        self.release(node, task, job, &gpus);
        if now_final {
            self.tasks_became_final(job, 1);
        }
        Outcome::TaskUpdated
    }

    /// Applies a slave's batch of reports in order; each is fenced as a single report is.
    fn task_reports(&mut self, node: NodeId, reports: Vec<TaskReport>) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        let mut updated = 0usize;
        for r in reports {
            let o = match r {
                TaskReport::Started { task, attempt } => self.task_started(node, task, attempt),
                TaskReport::Finished {
                    task,
                    attempt,
                    exit_code,
                } => self.task_finished(node, task, attempt, exit_code),
            };
            if o == Outcome::TaskUpdated {
                updated += 1;
            }
        }
        if updated > 0 {
            Outcome::TaskUpdated
        } else {
            Outcome::Ignored("no report in the batch changed anything".into())
        }
    }

    /// `n` tasks of `job` reached a final state: once none is left open, the job is
    /// finished and its retention starts.
    fn tasks_became_final(&mut self, job: JobId, n: u32) {
        let at = self.last_ms;
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        j.open = j.open.saturating_sub(n);
        if j.open == 0 && j.finished_ms.is_none() {
            j.finished_ms = Some(at);
            self.finished_jobs.insert((at, job));
        }
    }

    /// Removes finished jobs (with their tasks) that finished before `jobs_before`, and
    /// client request outcomes older than `requests_before`.
    fn gc(&mut self, jobs_before: Option<u64>, requests_before: Option<u64>) -> Outcome {
        let (mut jobs, mut tasks, mut requests) = (0u64, 0u64, 0u64);
        if let Some(cut) = jobs_before {
            let due: Vec<(u64, JobId)> = self
                .finished_jobs
                .range(..(cut, JobId(0)))
                .copied()
                .collect();
            for key in due {
                self.finished_jobs.remove(&key);
                let Some(j) = self.jobs.get(&key.1) else {
                    continue;
                };
                // The counter says finished; the tasks must agree before anything goes.
                let all_final = j
                    .tasks
                    .iter()
                    .all(|t| self.tasks.get(t).is_none_or(|t| t.status.state.is_final()));
                if !all_final {
                    continue;
                }
                if let Some(j) = self.jobs.remove(&key.1) {
                    for t in &j.tasks {
                        if self.tasks.remove(t).is_some() {
                            tasks += 1;
                        }
                        self.pending.remove(t);
                    }
                    jobs += 1;
                }
            }
        }
        if let Some(cut) = requests_before {
            let due: Vec<(u64, ClientRequestId)> = self
                .requests_by_time
                .range(..(cut, ClientRequestId(0)))
                .copied()
                .collect();
            for key in due {
                self.requests_by_time.remove(&key);
                if self.requests.remove(&key.1).is_some() {
                    requests += 1;
                }
            }
        }
        Outcome::Collected {
            jobs,
            tasks,
            requests,
        }
    }

    /// Whether a `GcJobs` with these cut-offs would remove anything (the leader asks before
    /// proposing one).
    pub fn gc_due(&self, jobs_before: Option<u64>, requests_before: Option<u64>) -> bool {
        jobs_before.is_some_and(|cut| self.finished_jobs.first().is_some_and(|f| f.0 < cut))
            || requests_before
                .is_some_and(|cut| self.requests_by_time.first().is_some_and(|r| r.0 < cut))
    }

    /// Whether a client request id has applied (and its outcome is still remembered).
    pub fn request_applied(&self, request: ClientRequestId) -> bool {
        self.requests.contains_key(&request)
    }

    /// Whether `job` existed once and was garbage-collected (ids are never reused).
    pub fn job_was_collected(&self, job: JobId) -> bool {
        job.0 >= 1 && job.0 <= self.next_job && !self.jobs.contains_key(&job)
    }

    /// Whether `task` existed once and was garbage-collected with its job.
    pub fn task_was_collected(&self, task: TaskId) -> bool {
        task.0 >= 1 && task.0 <= self.next_task && !self.tasks.contains_key(&task)
    }

    /// Recomputes what is derived rather than serialised: open-task counters, the
    /// finished-job and request orders; folds a legacy request map into the compact one.
    fn rebuild_derived(&mut self) {
        let legacy = std::mem::take(&mut self.applied_requests);
        for (req, o) in legacy {
            self.requests.entry(req).or_insert(RecentRequest {
                at_ms: self.last_ms,
                outcome: RequestOutcome::compact(&o),
            });
        }
        self.requests_by_time = self.requests.iter().map(|(r, v)| (v.at_ms, *r)).collect();
        self.finished_jobs.clear();
        let tasks = &self.tasks;
        for j in self.jobs.values_mut() {
            j.open = j
                .tasks
                .iter()
                .filter(|t| tasks.get(t).is_some_and(|t| !t.status.state.is_final()))
                .count() as u32;
            if j.open == 0 && j.finished_ms.is_none() {
                // Finished before retention was recorded: count from the snapshot's clock.
                j.finished_ms = Some(self.last_ms);
            }
            if let (0, Some(f)) = (j.open, j.finished_ms) {
                self.finished_jobs.insert((f, j.id));
            }
        }
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
        let mut s: Self = rmp_serde::from_slice(b).map_err(|e| format!("bad snapshot: {e}"))?;
        s.rebuild_derived();
        Ok(s)
    }

    /// Size of the serialised state, bytes (`status --json` `"state_bytes"`).
    pub fn state_bytes(&self) -> u64 {
        rmp_serde::to_vec_named(self).map_or(0, |b| b.len() as u64)
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
        }
    }

    /// The resources each task of `job` asks for.
    pub fn job_resources(&self, job: JobId) -> Option<&hetsched_common::ResourceRequest> {
        self.jobs.get(&job).map(|j| &j.spec.resources)
    }
}

#[cfg(test)]
mod tests;
