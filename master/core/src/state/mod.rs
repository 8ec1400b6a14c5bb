//! `ClusterState` — the replicated state machine of the masters. Pure and deterministic:
//! `apply` reads no clock (every command carries the leader's timestamp), does no I/O, and
//! iterates ordered maps only, so the same log yields byte-identical state on every replica.
//!
//! "Submitted later" means "a higher log index": ids are handed out in apply order.

mod command;
mod cpus;
mod hash;
mod lifecycle;
mod listing;

pub use command::{Assign, Command, CommandEnvelope, Outcome, Plan, Preemption, TaskRef};
pub use cpus::{CompressReserve, CpuSearchPhase};
pub use hash::fnv1a64;
pub use lifecycle::Drain;
pub use listing::ListError;

/// The nodes whose free resources or liveness applying `command` may change, known before
/// it applies (so the command need not be kept, or copied, past `apply`).
pub fn command_nodes(command: &Command) -> BTreeSet<NodeId> {
    let mut nodes = BTreeSet::new();
    match command {
        Command::NodeDown { node }
        | Command::NodeUp { node }
        | Command::TaskFinished { node, .. }
        | Command::TaskLost { node, .. }
        | Command::DrainNode { node, .. }
        | Command::UndrainNode { node }
        | Command::RequeueDrained { node }
        | Command::TimeoutTask { node, .. }
        | Command::SetTaskCpus { node, .. }
        | Command::CompressTask { node, .. } => {
            nodes.insert(*node);
        }
        Command::TaskReports { node, reports }
            if reports.iter().any(|r| {
                matches!(
                    r,
                    TaskReport::Finished { .. } | TaskReport::Compressed { .. }
                )
            }) =>
        {
            nodes.insert(*node);
        }
        Command::ApplyPlan(plan) => {
            nodes.extend(plan.assignments.iter().map(|a| a.node));
            // Victims leave their nodes' task sets (their resources stay held until they
            // stop): caches of who holds what there (sched::loads) must re-read them.
            nodes.extend(
                plan.preempt
                    .iter()
                    .flat_map(|p| p.victims.iter().map(|v| v.node)),
            );
        }
        Command::StealTask { from, to, .. } => nodes.extend([*from, *to]),
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

use hetsched_common::priority::{Principal, PriorityConfig, Usage};
use hetsched_common::program::{
    relation, CallSummary, EngineDecl, EngineTotal, SelectionTable, TaskKind,
};
use hetsched_common::protocol::{EngineInfo, JobInfo, NodeCounts, NodeInfo, TaskInfo, TaskReport};
use hetsched_common::{
    Attempt, ClientRequestId, EngineKind, GpuAlloc, JobId, JobSpec, NodeId, NodeResources, TaskId,
    TaskReason, TaskState, TaskStatus,
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
    /// Locality: `spec.nodes` resolved to ids at submission (empty: any node).
    #[serde(default)]
    pub candidates: Vec<NodeId>,
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
    /// S1 priority, decided at admission and never re-evaluated.
    #[serde(default)]
    pub priority: i64,
    /// The principal whose quota this task holds (it got that entry's priority), if any.
    #[serde(default)]
    pub quota: Option<Principal>,
    /// How many times it was preempted.
    #[serde(default)]
    pub preemptions: u32,
    /// Never chosen as a preemption victim (`--no-preempt` at an allowed priority).
    #[serde(default)]
    pub protected: bool,
    /// Failed attempts so far (each re-run consumes one of the job's retries).
    #[serde(default)]
    pub failures: u32,
    /// A re-run waits in the queue until this leader time (ms since the Unix epoch).
    #[serde(default)]
    pub not_before_ms: Option<u64>,
    /// Leader time at which the current attempt was reported started.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// The node of every attempt so far (where its output files are).
    #[serde(default)]
    pub attempt_nodes: BTreeMap<Attempt, NodeId>,
    /// A program task's calls in brief, as its slave reported them.
    #[serde(default)]
    pub calls: Option<CallSummary>,
    /// The current attempt's CPU allocation when changed live (S3.2 search, S3.6
    /// compression), millicores; `None`: what the job asks for.
    #[serde(default)]
    pub cpu_milli: Option<u64>,
    /// S3.2: where the current attempt's CPU-count search is (`None`: no `--class`).
    #[serde(default)]
    pub cpu_search: Option<CpuSearchPhase>,
    /// S3.6: the current attempt's cores were halved.
    #[serde(default)]
    pub compressed: bool,
    /// S0.1–2: the engine kind the scheduler chose for the current attempt of a program
    /// task (its load counts against that kind on its node).
    #[serde(default)]
    pub engine: Option<EngineKind>,
    /// S3: the current (or last) attempt was placed on borrowed capacity.
    #[serde(default)]
    pub borrowed: bool,
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
    /// Partitions it serves (empty: only `default`).
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Preempted attempts still stopping there: their resources stay held (not `free`)
    /// until the slave reports them ended, so the node is never over-committed.
    #[serde(default)]
    pub stopping: Vec<Stopping>,
    /// Set while the node is draining (takes no new tasks).
    #[serde(default)]
    pub drain: Option<Drain>,
    /// S3.6: cores freed by compressions, held (not `free`) for a GPU task until it ends.
    #[serde(default)]
    pub compress_reserves: Vec<CompressReserve>,
    /// S0.3: tasks assigned beyond its free resources, in arrival order. They hold nothing
    /// of `free` (so running tasks never exceed capacity) and are not in `tasks`; the head
    /// moves into `tasks` when its resources free up or when the slave reports it started.
    #[serde(default)]
    pub queued: Vec<TaskId>,
    /// S0.4: tasks stolen from other nodes' queues by this node.
    #[serde(default)]
    pub steals_in: u64,
    /// S0.4: tasks other nodes stole from this node's queue.
    #[serde(default)]
    pub steals_out: u64,
}

/// A preempted attempt that has not stopped yet, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    /// The task.
    pub task: TaskId,
    /// Its attempt.
    pub attempt: Attempt,
    /// Its job (for its resources).
    pub job: JobId,
    /// Its GPU devices.
    pub gpus: GpuAlloc,
    /// Its CPU allocation when changed live (`None`: the job's).
    #[serde(default)]
    pub cpu_milli: Option<u64>,
}

/// The partition a job names, `default` when it names none.
pub fn partition_of(spec: &JobSpec) -> &str {
    if spec.partition.is_empty() {
        "default"
    } else {
        &spec.partition
    }
}

impl Node {
    /// Whether the node serves `partition`.
    pub fn serves(&self, partition: &str) -> bool {
        if self.partitions.is_empty() {
            partition == "default"
        } else {
            self.partitions.iter().any(|p| p == partition)
        }
    }

    /// Whether the node takes work.
    pub fn is_up(&self) -> bool {
        self.liveness == NodeLiveness::Up
    }

    /// Whether new tasks may be placed here: up and not draining.
    pub fn takes_work(&self) -> bool {
        self.is_up() && self.drain.is_none()
    }

    /// S3: the GPU pool of the node's GPUs, as its slave announced it (label
    /// [`GPU_POOL_LABEL`](hetsched_common::protocol::GPU_POOL_LABEL)) or else by GPU
    /// count; `None` without GPUs.
    pub fn gpu_pool(&self) -> Option<hetsched_common::protocol::GpuPool> {
        let announced = self
            .labels
            .get(hetsched_common::protocol::GPU_POOL_LABEL)
            .and_then(|l| l.parse().ok());
        hetsched_common::protocol::GpuPool::of_node(self.capacity.gpus.len(), announced)
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
    nodes: BTreeMap<NodeId, Node>,
    /// Registration key → node id.
    node_keys: BTreeMap<u64, NodeId>,
    /// Jobs by id.
    jobs: BTreeMap<JobId, Job>,
    /// Tasks by id.
    tasks: BTreeMap<TaskId, Task>,
    /// Pending tasks in queue order (lower id = submitted earlier).
    pending: BTreeSet<TaskId>,
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
    bench: BTreeMap<u64, BenchCounter>,
    /// The S1 priority configuration in force.
    #[serde(default)]
    priority: PriorityConfig,
    /// Preemptors waiting for their victims to stop: node and victims.
    #[serde(default)]
    awaiting: BTreeMap<TaskId, (NodeId, Vec<TaskRef>)>,
    next_job: u64,
    next_task: u64,
    next_node: u64,
    /// Engines and selection tables by node (S0.5).
    #[serde(default)]
    profiles: BTreeMap<NodeId, NodeProfile>,
    /// The task–engine relation (S0.1): per task kind of every program submitted, engines by
    /// total time ascending, built from all slaves' tables.
    #[serde(default)]
    relations: BTreeMap<TaskKind, Vec<EngineTotal>>,
    /// S3.2 class history: each class's best CPU count as last recorded, millicores.
    #[serde(default)]
    cpu_history: BTreeMap<hetsched_common::TaskClass, u64>,
    /// Last applied log index.
    last_index: u64,
    /// Leader's clock of the last applied command.
    last_ms: u64,
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the entry at `index` could not be decoded: it changes nothing but the
    /// applied index, identically on every replica, so the log keeps moving.
    pub fn skip_undecodable(&mut self, index: u64) {
        self.last_index = index;
    }

    /// Test hook, only with the `forge` feature: the nodes, mutable, so that a checker's
    /// tests can forge a state no log could produce. Product code changes state through
    /// [`apply`](Self::apply) alone.
    #[cfg(feature = "forge")]
    pub fn forge_nodes_mut(&mut self) -> &mut BTreeMap<NodeId, Node> {
        &mut self.nodes
    }

    /// Test hook, only with the `forge` feature: the tasks, mutable (see
    /// [`forge_nodes_mut`](Self::forge_nodes_mut)).
    #[cfg(feature = "forge")]
    pub fn forge_tasks_mut(&mut self) -> &mut BTreeMap<TaskId, Task> {
        &mut self.tasks
    }

    /// Nodes by id.
    pub fn nodes(&self) -> &BTreeMap<NodeId, Node> {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(&id)
    }

    /// Jobs by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, Job> {
        &self.jobs
    }

    /// One job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Tasks by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, Task> {
        &self.tasks
    }

    /// One task.
    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    /// Pending tasks in queue order (lower id = submitted earlier).
    pub fn pending(&self) -> &BTreeSet<TaskId> {
        &self.pending
    }

    /// Benchmark counters per benchmark client.
    pub fn bench(&self) -> &BTreeMap<u64, BenchCounter> {
        &self.bench
    }

    /// The S1 priority configuration in force.
    pub fn priority(&self) -> &PriorityConfig {
        &self.priority
    }

    /// Preemptors waiting for their victims to stop: node and victims.
    pub fn awaiting(&self) -> &BTreeMap<TaskId, (NodeId, Vec<TaskRef>)> {
        &self.awaiting
    }

    /// Engines and selection tables by node (S0.5).
    pub fn profiles(&self) -> &BTreeMap<NodeId, NodeProfile> {
        &self.profiles
    }

    /// The task–engine relation (S0.1) by task kind: engines by total time ascending.
    pub fn relations(&self) -> &BTreeMap<TaskKind, Vec<EngineTotal>> {
        &self.relations
    }

    /// S3.2 class history: each class's best CPU count as last recorded, millicores.
    pub fn cpu_history(&self) -> &BTreeMap<hetsched_common::TaskClass, u64> {
        &self.cpu_history
    }

    /// Last applied log index.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// The leader's clock of the last applied command, ms since the Unix epoch.
    pub fn last_ms(&self) -> u64 {
        self.last_ms
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
            c @ Command::RegisterNode { .. } => self.register_node(c),
            Command::NodeDown { node } => self.node_down(node),
            Command::NodeUp { node } => self.node_up(node),
            Command::SubmitJob { spec } => self.submit(index, env.at_ms, spec),
            Command::CancelJob { job } => self.cancel(job),
            Command::ApplyPlan(plan) => self.apply_plan(plan, env.at_ms),
            Command::TaskStarted {
                node,
                task,
                attempt,
            } => self.task_started(node, task, attempt, env.at_ms),
            Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            } => self.task_finished(node, task, attempt, exit_code, reason, env.at_ms),
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
            Command::SetPriorityConfig { mut config } => {
                config.version = self.priority.version + 1;
                self.priority = config;
                Outcome::Ignored(format!("priority configuration v{}", self.priority.version))
            }
            Command::DrainNode { node, deadline_ms } => {
                self.drain_node(node, env.at_ms, deadline_ms)
            }
            Command::UndrainNode { node } => self.undrain_node(node),
            Command::RequeueDrained { node } => self.requeue_drained(node),
            Command::CancelTask { task } => self.cancel_task(task),
            Command::TimeoutTask {
                node,
                task,
                attempt,
            } => self.timeout_task(node, task, attempt, env.at_ms),
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
            Command::TaskReports { node, reports } => self.task_reports(node, reports, env.at_ms),
            Command::SetTaskCpus {
                node,
                task,
                attempt,
                cpu_milli,
            } => self.set_task_cpus(node, task, attempt, cpu_milli),
            Command::RecordCpuConfig {
                task,
                class,
                cpu_milli,
            } => self.record_cpu_config(task, class, cpu_milli),
            Command::CompressTask {
                node,
                task,
                attempt,
                cpu_milli,
                gpu_task,
            } => self.compress_task(node, task, attempt, cpu_milli, gpu_task),
            Command::StealTask {
                task,
                attempt,
                from,
                to,
            } => self.steal_task(task, attempt, from, to),
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

    fn register_node(&mut self, registration: Command) -> Outcome {
        let Command::RegisterNode {
            key,
            node: claimed,
            name,
            addr,
            capacity,
            labels,
            partitions,
        } = registration
        else {
            return Outcome::Rejected("not a registration".into());
        };
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
                n.partitions = partitions;
                n.liveness = NodeLiveness::Up;
                // A node's capacity can only change while it holds nothing: its free vector
                // is capacity minus its tasks' grants and its stopping (preempted) attempts'
                // holdings, and must stay consistent. A slave agent restarted while
                // preempted attempts still stop there holds no tasks but still those.
                if n.tasks.is_empty() && n.queued.is_empty() && n.stopping.is_empty() {
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
                        partitions,
                        stopping: Vec::new(),
                        drain: None,
                        compress_reserves: Vec::new(),
                        queued: Vec::new(),
                        steals_in: 0,
                        steals_out: 0,
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
        let stopping: Vec<(TaskId, Attempt)> =
            n.stopping.iter().map(|s| (s.task, s.attempt)).collect();
        for (t, a) in stopping {
            self.release_stopping(node, t, a);
        }
        let requeued = self.requeue_node(node, TaskReason::Lost);
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
    fn requeue(&mut self, task: TaskId, reason: TaskReason) -> Option<TaskRef> {
        let t = self.tasks.get_mut(&task)?;
        let node = t.status.node?;
        let attempt = t.status.attempt;
        t.status.requeue_because(reason).ok()?;
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

    /// Re-queues every task on `node` (node lost, drain deadline); returns the attempts
    /// that ended.
    fn requeue_node(&mut self, node: NodeId, reason: TaskReason) -> Vec<TaskRef> {
        let held: Vec<TaskId> = self
            .nodes
            .get(&node)
            .map(|n| n.tasks.iter().chain(n.queued.iter()).copied().collect())
            .unwrap_or_default();
        held.into_iter()
            .filter_map(|t| self.requeue(t, reason))
            .collect()
    }

    fn release(&mut self, node: NodeId, task: TaskId, job: JobId, gpus: &GpuAlloc) {
        let Some(mut req) = self.jobs.get(&job).map(|j| j.spec.resources.clone()) else {
            return;
        };
        if let Some(c) = self.tasks.get(&task).and_then(|t| t.cpu_milli) {
            req.cpu_milli = c;
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.tasks.remove(&task) {
                n.free.give_back(&req, gpus, &n.capacity);
                self.promote_queued(node);
            } else {
                n.queued.retain(|t| *t != task);
            }
        }
        self.end_reserves_for(node, task);
    }

    /// S0.3: queued tasks of `node` whose resources are free now take them, head first (the
    /// head blocks those behind it, as in the slave's own queue).
    fn promote_queued(&mut self, node: NodeId) {
        loop {
            let Some(n) = self.nodes.get(&node) else {
                return;
            };
            let Some(&head) = n.queued.first() else {
                return;
            };
            let req = self
                .tasks
                .get(&head)
                .and_then(|t| self.jobs.get(&t.job))
                .map(|j| j.spec.resources.clone());
            let Some(n) = self.nodes.get_mut(&node) else {
                return;
            };
            let Some(req) = req else {
                n.queued.remove(0);
                continue;
            };
            let Some(gpus) = n.free.take(&req) else {
                return;
            };
            n.queued.remove(0);
            n.tasks.insert(head);
            if let Some(t) = self.tasks.get_mut(&head) {
                t.gpus = gpus;
            }
        }
    }

    /// A queued task of `node` started on its slave before its turn here (the slave's
    /// queue order can differ from the log's): it takes its resources now. The slave only
    /// starts what fits its cores, so where this state's vector disagrees the grant is
    /// taken as far as it goes rather than refused.
    fn start_queued(&mut self, node: NodeId, task: TaskId) {
        let req = self
            .tasks
            .get(&task)
            .and_then(|t| self.jobs.get(&t.job))
            .map(|j| j.spec.resources.clone());
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let Some(pos) = n.queued.iter().position(|t| *t == task) else {
            return;
        };
        n.queued.remove(pos);
        n.tasks.insert(task);
        let Some(req) = req else { return };
        match n.free.take(&req) {
            Some(gpus) => {
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.gpus = gpus;
                }
            }
            None => {
                n.free.cpu_milli = n.free.cpu_milli.saturating_sub(req.cpu_milli);
                n.free.mem_mib = n.free.mem_mib.saturating_sub(req.mem_mib);
            }
        }
    }

    /// S0.4: `from` released the queued `attempt` of `task`; it moves to `to` with the next
    /// attempt. Stale (the task is no longer that queued attempt on `from`): ignored, the victim's
    /// release changed nothing the log holds. A thief that can no longer take it (gone,
    /// draining, full, wrong partition): the task goes back to pending with attempt + 1, so
    /// the released attempt is never the one that runs.
    fn steal_task(&mut self, task: TaskId, attempt: Attempt, from: NodeId, to: NodeId) -> Outcome {
        let queued_there = self
            .nodes
            .get(&from)
            .is_some_and(|n| n.queued.contains(&task));
        let Some(t) = self.tasks.get(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if !queued_there
            || t.status.state != TaskState::Assigned
            || t.status.attempt != attempt
            || t.status.node != Some(from)
        {
            return Outcome::Ignored(format!("stale steal: {task} is no longer queued on {from}"));
        }
        let job = t.job;
        let Some(j) = self.jobs.get(&job) else {
            return Outcome::Rejected(format!("unknown {job}"));
        };
        let req = j.spec.resources.clone();
        let partition = partition_of(&j.spec).to_string();
        let allowed = j.candidates.is_empty() || j.candidates.contains(&to);
        if let Some(n) = self.nodes.get_mut(&from) {
            n.queued.retain(|x| *x != task);
        }
        let released = TaskRef {
            task,
            node: from,
            attempt,
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if let Err(e) = t.status.requeue_because(TaskReason::Lost) {
            return Outcome::Ignored(e.to_string());
        }
        t.started_ms = None;
        let fits = self.nodes.get(&to).is_some_and(|n| {
            n.id != from && n.takes_work() && n.serves(&partition) && n.free.fits(&req)
        });
        let grant = if fits && allowed {
            self.nodes.get_mut(&to).and_then(|n| n.free.take(&req))
        } else {
            None
        };
        let Some(gpus) = grant else {
            self.pending.insert(task);
            return Outcome::Stolen {
                from: released,
                assigned: None,
            };
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let new_attempt = match t.status.assign(to) {
            Ok(a) => a,
            Err(e) => return Outcome::Ignored(e.to_string()),
        };
        t.gpus = gpus;
        t.attempt_nodes.insert(new_attempt, to);
        if let Some(n) = self.nodes.get_mut(&to) {
            n.tasks.insert(task);
            n.steals_in += 1;
        }
        if let Some(n) = self.nodes.get_mut(&from) {
            n.steals_out += 1;
        }
        Outcome::Stolen {
            from: released,
            assigned: Some(TaskRef {
                task,
                node: to,
                attempt: new_attempt,
            }),
        }
    }

    fn submit(&mut self, index: u64, at_ms: u64, mut spec: JobSpec) -> Outcome {
        if let Err(e) = spec.validate() {
            return Outcome::Rejected(e.to_string());
        }
        let partition = partition_of(&spec).to_string();
        if spec.no_preempt {
            let p = self.priority.priority_of(&spec.user, &partition);
            match self.priority.protect_min_priority {
                Some(min) if p >= min => {}
                Some(min) => {
                    return Outcome::Rejected(format!(
                        "--no-preempt needs priority {min} or more; user {:?} has {p} in partition {partition:?}",
                        spec.user
                    ))
                }
                None => {
                    return Outcome::Rejected(
                        "--no-preempt is not enabled (protect_min_priority is not configured)"
                            .into(),
                    )
                }
            }
        }
        let admitted = crate::policy::quota::admit(
            &self.priority,
            &spec.user,
            &partition,
            &spec.resources,
            spec.count,
            |who| self.quota_usage(who, &partition),
        );
        let candidates = match self.resolve_candidates(&spec.nodes) {
            Ok(c) => c,
            Err(why) => return Outcome::Rejected(why),
        };
        if let Some(p) = &spec.program {
            let kind = p.kind();
            let r = relation(&kind, self.profiles.values().map(|p| &p.table));
            self.relations.insert(kind, r);
            spec.carry_program();
        }
        self.next_job += 1;
        let id = JobId(self.next_job);
        let mut tasks = Vec::with_capacity(spec.count as usize);
        for (index, adm) in (0..spec.count).zip(admitted) {
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
                    protected: spec.no_preempt,
                    priority: adm.priority,
                    quota: adm.quota,
                    preemptions: 0,
                    failures: 0,
                    not_before_ms: None,
                    started_ms: None,
                    attempt_nodes: BTreeMap::new(),
                    calls: None,
                    cpu_milli: None,
                    cpu_search: None,
                    compressed: false,
                    engine: None,
                    borrowed: false,
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
                candidates,
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
            task.status.reason = Some(TaskReason::Cancelled);
            task.not_before_ms = None;
            self.pending.remove(&t);
            self.awaiting.remove(&t);
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
    fn apply_plan(&mut self, plan: Plan, at_ms: u64) -> Outcome {
        let mut accepted = Vec::new();
        let mut rejected = 0u32;
        for a in plan.assignments {
            match self.try_assign(&a, plan.queue_depth, at_ms) {
                Some(r) => accepted.push(r),
                None => rejected += 1,
            }
        }
        let mut preempted = Vec::new();
        for p in plan.preempt {
            match self.try_preempt(&p) {
                Some(mut v) => preempted.append(&mut v),
                None => rejected += 1,
            }
        }
        Outcome::PlanApplied {
            accepted,
            rejected,
            preempted,
        }
    }

    /// Re-checks one preemption (S1): the preemptor still pending and of higher priority
    /// than every victim, each victim still that attempt on that node and not protected.
    /// Then every victim goes back to pending with attempt + 1, its resources held on the
    /// node until the slave reports it stopped.
    fn try_preempt(&mut self, p: &Preemption) -> Option<Vec<TaskRef>> {
        let pre = self.tasks.get(&p.preemptor)?;
        if pre.status.state != TaskState::Pending || p.victims.is_empty() {
            return None;
        }
        let prio = pre.priority;
        let node = self.nodes.get(&p.node)?;
        if !node.takes_work() {
            return None;
        }
        // S3 take-back: a GPU preemptor may stop CPU tasks of its own priority or lower.
        let gpu_task = |job| self.job_resources(job).is_some_and(|r| !r.gpu.is_none());
        let take_back = p.take_back && gpu_task(pre.job);
        let valid = p.victims.iter().all(|v| {
            v.node == p.node
                && node.tasks.contains(&v.task)
                && self.tasks.get(&v.task).is_some_and(|t| {
                    t.status.attempt == v.attempt
                        && t.status.node == Some(p.node)
                        && !t.status.state.is_final()
                        && (t.priority < prio
                            || (take_back && t.priority <= prio && !gpu_task(t.job)))
                        && !t.protected
                })
        });
        if !valid {
            return None;
        }
        for v in &p.victims {
            let t = self.tasks.get_mut(&v.task)?;
            let gpus = std::mem::take(&mut t.gpus);
            t.status.requeue_because(TaskReason::Preempted).ok()?;
            t.preemptions += 1;
            t.started_ms = None;
            let job = t.job;
            let cpu_milli = t.cpu_milli;
            if let Some(n) = self.nodes.get_mut(&p.node) {
                n.tasks.remove(&v.task);
                n.stopping.push(Stopping {
                    task: v.task,
                    attempt: v.attempt,
                    job,
                    gpus,
                    cpu_milli,
                });
            }
            self.pending.insert(v.task);
        }
        self.awaiting
            .insert(p.preemptor, (p.node, p.victims.clone()));
        Some(p.victims.clone())
    }

    /// A stopping (preempted) attempt ended: its resources return to the node. Returns
    /// whether it was one.
    fn release_stopping(&mut self, node: NodeId, task: TaskId, attempt: Attempt) -> bool {
        let Some(n) = self.nodes.get_mut(&node) else {
            return false;
        };
        let Some(i) = n
            .stopping
            .iter()
            .position(|s| s.task == task && s.attempt == attempt)
        else {
            return false;
        };
        let s = n.stopping.remove(i);
        if let Some(mut req) = self.jobs.get(&s.job).map(|j| j.spec.resources.clone()) {
            if let Some(c) = s.cpu_milli {
                req.cpu_milli = c;
            }
            if let Some(n) = self.nodes.get_mut(&node) {
                n.free.give_back(&req, &s.gpus, &n.capacity);
            }
        }
        self.end_reserves_for(node, task);
        true
    }

    /// What `who`'s non-final tasks holding its quota use in `partition`.
    fn quota_usage(&self, who: &Principal, partition: &str) -> Usage {
        let mut used = Usage::default();
        let live = self.pending.iter().chain(
            self.nodes
                .values()
                .flat_map(|n| n.tasks.iter().chain(n.queued.iter())),
        );
        for tid in live {
            let Some(t) = self.tasks.get(tid) else {
                continue;
            };
            if t.quota.as_ref() != Some(who) {
                continue;
            }
            if let Some(j) = self.jobs.get(&t.job) {
                if partition_of(&j.spec) == partition {
                    used.add(&j.spec.resources);
                }
            }
        }
        used
    }

    fn try_assign(&mut self, a: &Assign, queue_depth: u32, at_ms: u64) -> Option<TaskRef> {
        let task = self.tasks.get(&a.task)?;
        if task.status.state != TaskState::Pending || task.not_before_ms.is_some_and(|t| t > at_ms)
        {
            return None;
        }
        let job = self.jobs.get(&task.job)?;
        if !job.candidates.is_empty() && !job.candidates.contains(&a.node) {
            return None;
        }
        let req = &job.spec.resources;
        let searched = job.spec.cpu_search.is_some();
        let node = self.nodes.get_mut(&a.node)?;
        if !node.takes_work() {
            return None;
        }
        let partition = partition_of(&self.jobs.get(&task.job)?.spec).to_string();
        if !node.serves(&partition) {
            return None;
        }
        let gpus = if a.queued {
            // S0.3: beyond the free resources, within the queued allowance; only what can
            // ever run there and holds no devices (devices are granted at assignment).
            if node.queued.len() >= queue_depth as usize
                || !req.gpu.is_none()
                || !req.engines.is_empty()
                || !node.capacity.fits(req)
            {
                return None;
            }
            node.queued.push(a.task);
            Vec::new()
        } else {
            let gpus = node.free.take(req)?;
            node.tasks.insert(a.task);
            gpus
        };
        let task = self.tasks.get_mut(&a.task)?;
        let attempt = task.status.assign(a.node).ok()?;
        task.gpus = gpus;
        // A new attempt starts at what the job asks for; its search (if any) starts over.
        task.cpu_milli = None;
        task.compressed = false;
        task.cpu_search = searched.then_some(CpuSearchPhase::Probing);
        task.engine = a.engine;
        task.not_before_ms = None;
        task.started_ms = None;
        task.attempt_nodes.insert(attempt, a.node);
        task.borrowed = a.borrowed;
        self.pending.remove(&a.task);
        self.awaiting.remove(&a.task);
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

    fn task_started(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        at_ms: u64,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let was_running = t.status.state == TaskState::Running;
        match t.status.start(attempt) {
            Ok(()) => {
                if !was_running || t.started_ms.is_none() {
                    t.started_ms = Some(at_ms);
                }
                self.start_queued(node, task);
                Outcome::TaskUpdated
            }
            Err(e) => Outcome::Ignored(e.to_string()),
        }
    }

    fn task_finished(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<hetsched_common::TaskReason>,
        at_ms: u64,
    ) -> Outcome {
        if self.release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        if exit_code != 0 {
            // The slave's observation (oom, cannot-start) wins over what the code implies.
            return self.attempt_failed(
                task,
                attempt,
                reason.or(TaskReason::of_exit_code(exit_code)),
                Some(exit_code),
                at_ms,
            );
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if let Err(e) = t.status.finish_because(attempt, exit_code, reason) {
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
    fn task_reports(&mut self, node: NodeId, reports: Vec<TaskReport>, at_ms: u64) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        let mut updated = 0usize;
        for r in reports {
            let o = match r {
                TaskReport::Started { task, attempt } => {
                    self.task_started(node, task, attempt, at_ms)
                }
                // A supervisor gone without a status: the attempt is lost (attempt + 1).
                TaskReport::Finished {
                    task,
                    attempt,
                    reason: Some(TaskReason::Lost),
                    ..
                } => self.task_lost(node, task, attempt),
                TaskReport::Finished {
                    task,
                    attempt,
                    exit_code,
                    reason,
                } => self.task_finished(node, task, attempt, exit_code, reason, at_ms),
                TaskReport::Compressed {
                    task,
                    attempt,
                    cpu_milli,
                    gpu_task,
                } => self.compress_task(node, task, attempt, cpu_milli, gpu_task),
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

    /// What to tell a client asking for a job that is not in the state.
    pub fn job_missing_message(&self, job: JobId) -> String {
        if self.job_was_collected(job) {
            format!("{job} finished and was collected (finished jobs are kept for --job-gc-after)")
        } else {
            format!("no such job: {job}")
        }
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
        if self.release_stopping(node, task, attempt) {
            return Outcome::TaskUpdated;
        }
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.requeue(task, TaskReason::Lost) {
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
            draining: self.nodes.values().filter(|n| n.drain.is_some()).count() as u64,
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
            priority: t.priority,
            reason: t.status.reason,
            user: self
                .jobs
                .get(&t.job)
                .map(|j| j.spec.user.clone())
                .unwrap_or_default(),
            partition: self
                .jobs
                .get(&t.job)
                .map(|j| partition_of(&j.spec).to_string())
                .unwrap_or_default(),
            preemptions: t.preemptions,
            failures: t.failures,
            not_before_ms: t.not_before_ms,
            cpus: t
                .cpu_milli
                .or_else(|| self.jobs.get(&t.job).map(|j| j.spec.resources.cpu_milli))
                .unwrap_or(0) as f64
                / 1000.0,
            cpu_search: t.cpu_search.map(|p| p.as_str().to_string()),
            compressed: t.compressed,
            calls: t.calls,
            queue: self
                .job_resources(t.job)
                .map(|r| crate::policy::QueueKind::of(r).name().to_string())
                .unwrap_or_default(),
            borrowed: t.borrowed,
        }
    }

    /// S3: pending tasks per queue (every queue present).
    pub fn queue_counts(&self) -> BTreeMap<String, u64> {
        use crate::policy::QueueKind;
        let mut m: BTreeMap<String, u64> = QueueKind::ALL
            .iter()
            .map(|q| (q.name().to_string(), 0))
            .collect();
        for t in &self.pending {
            if let Some(r) = self.tasks.get(t).and_then(|t| self.job_resources(t.job)) {
                *m.entry(QueueKind::of(r).name().to_string()).or_insert(0) += 1;
            }
        }
        m
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
            partitions: if n.partitions.is_empty() {
                vec!["default".to_string()]
            } else {
                n.partitions.clone()
            },
            draining: n.drain.is_some(),
            drain_deadline_ms: n.drain.as_ref().and_then(|d| d.deadline_ms),
            cgroup: n
                .labels
                .get(hetsched_common::protocol::CGROUP_LABEL)
                .cloned()
                .unwrap_or_else(|| "none".into()),
            engines: self.engine_info(n),
            probes: hetsched_common::protocol::ProbesInfo {
                gpu: n
                    .labels
                    .get(hetsched_common::protocol::PROBE_GPU_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "none".into()),
                membw: n
                    .labels
                    .get(hetsched_common::protocol::PROBE_MEMBW_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "none".into()),
            },
            queued: n.queued.len() as u32,
            steals_in: n.steals_in,
            steals_out: n.steals_out,
            gpu_pool: n.gpu_pool().map(|p| p.name().to_string()),
        }
    }

    /// The resources each task of `job` asks for.
    pub fn job_resources(&self, job: JobId) -> Option<&hetsched_common::ResourceRequest> {
        self.jobs.get(&job).map(|j| &j.spec.resources)
    }
}

#[cfg(test)]
mod tests;
