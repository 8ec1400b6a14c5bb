//! `ClusterState` — the replicated state machine of the masters. Pure and deterministic:
//! `apply` reads no clock (every command carries the leader's timestamp), does no I/O, and
//! iterates ordered maps only, so the same log yields byte-identical state on every replica.
//!
//! "Submitted later" means "a higher log index": ids are handed out in apply order.
//!
//! The state is a set of books, each owning its data (private to it) and the changes that
//! touch only it:
//! - [`NodeBook`] (`node_book.rs`): nodes, registration keys, node ids; registers, brings up.
//! - [`JobBook`] (`job_book.rs`): jobs, job ids, the finishing order; closes finished jobs.
//! - [`TaskBook`] (`task_book.rs`): tasks, task ids, the pending queue, waiting preemptors.
//! - [`RequestBook`] (`request_book.rs`): client request outcomes for retries.
//! - [`ProfileBook`] (`profile_book.rs`): engine profiles, the task–engine relation, the
//!   CPU-count history.
//! - [`BatchBook`] (`batch.rs`), [`AclBook`] (`acl.rs`), [`BenchBook`] (`admin.rs`).
//! - [`DependencyBook`] (`dependency_book.rs`, issue 51): dependents by the job they
//!   follow, singleton jobs by user and name; derived from the open jobs' specs.
//!
//! A change that moves a task also changes its node's resources and its job's open count,
//! so such rules span books: they are the `ClusterState` methods of the other files
//! (`nodes`, `jobs`, `plan`, `reports`, `lifecycle`, `promote`, `slave_queue`,
//! `cpu_changes`, `batch_gang`, `gc`, `dependencies`), each reaching the books through their methods, and
//! [`apply`](ClusterState::apply) dispatches each command to a book or to one of those rules.
//! The snapshot bytes do not follow this layout: `snapshot.rs` keeps the flat document
//! older binaries wrote and read.

mod acl;
mod admin;
mod batch;
mod batch_gang;
mod batch_views;
mod booking;
mod codec;
mod command;
mod cpu_changes;
mod dependencies;
mod dependency_book;
mod engines;
mod gc;
mod hash;
mod job_book;
mod jobs;
mod lifecycle;
mod listing;
mod model;
mod node_book;
mod nodes;
mod plan;
mod planning_copy;
mod profile_book;
mod promote;
mod reports;
mod request_book;
mod slave_queue;
mod snapshot;
mod task_book;
mod views;

pub use acl::{AclBook, TokenRecord};
pub use admin::{BenchBook, BenchCounter};
pub use batch::{
    Batch, BatchBlock, BatchBook, BatchJob, BatchJobSpec, BatchSpec, BatchTask, Real, TaskBlock,
};
pub use booking::{engine_count, free_units, with_unit, Booking};
pub use command::{Assign, Command, CommandEnvelope, Outcome, PlaceNew, Plan, Preemption, TaskRef};
pub use cpu_changes::{CompressReserve, CpuSearchPhase};
pub use dependencies::{DepState, JobStates};
pub use dependency_book::DependencyBook;
pub use hash::fnv1a64;
pub use job_book::JobBook;
pub use lifecycle::Drain;
pub use listing::ListError;
pub use model::{partition_of, Job, Node, NodeLiveness, NodeProfile, Stopping, Task};
pub use node_book::NodeBook;
pub use profile_book::ProfileBook;
pub use request_book::{RecentRequest, RequestBook, RequestOutcome};
pub use task_book::{Awaited, TaskBook};

/// The nodes whose free resources or liveness applying `command` may change, known before
/// it applies (so the command need not be kept, or copied, past `apply`).
pub fn command_nodes(command: &Command) -> BTreeSet<NodeId> {
    let mut nodes = BTreeSet::new();
    match command {
        Command::NodeDown { node }
        | Command::NodeUp { node }
        // A task queued on its slave (S0.3) takes its resources when reported started.
        | Command::TaskStarted { node, .. }
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
        Command::TaskReports { node, reports } if !reports.is_empty() => {
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
        Command::SubmitPlaced { place, .. } => nodes.extend(place.iter().map(|p| p.node)),
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

use hetsched_common::priority::PriorityConfig;
use hetsched_common::program::{EngineTotal, TaskKind};
use hetsched_common::{JobId, NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// The whole replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// Nodes, their registration keys and the next node id.
    nodes: NodeBook,
    /// Jobs, the next job id and the finished ones in finishing order.
    jobs: JobBook,
    /// Tasks, the next task id, the pending queue and the preemptors waiting.
    tasks: TaskBook,
    /// Outcomes of client requests already applied, so a retried request applies once.
    requests: RequestBook,
    /// Benchmark counters per benchmark client.
    bench: BenchBook,
    /// The S1 priority configuration in force.
    priority: PriorityConfig,
    /// Engine profiles, the task–engine relation and the S3.2 CPU-count history.
    profiles: ProfileBook,
    /// S2 batches: their jobs' plans, their tasks' pins and blocks.
    batch: BatchBook,
    /// Users' API tokens (hashed) and whether the ACL was bootstrapped.
    acl: AclBook,
    /// Issue 51: dependents by the job they follow, singleton jobs (derived from the open
    /// jobs' specs; rebuilt on restore, never written).
    deps: DependencyBook,
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
        self.nodes.all_mut()
    }

    /// Test hook, only with the `forge` feature: the tasks, mutable (see
    /// [`forge_nodes_mut`](Self::forge_nodes_mut)).
    #[cfg(feature = "forge")]
    pub fn forge_tasks_mut(&mut self) -> &mut BTreeMap<TaskId, Task> {
        self.tasks.all_mut()
    }

    /// Test hook, only with the `forge` feature: the jobs, mutable (see
    /// [`forge_nodes_mut`](Self::forge_nodes_mut)).
    #[cfg(feature = "forge")]
    pub fn forge_jobs_mut(&mut self) -> &mut BTreeMap<JobId, Job> {
        self.jobs.all_mut()
    }

    /// Test hook, only with the `forge` feature: the pending set, mutable (see
    /// [`forge_nodes_mut`](Self::forge_nodes_mut)).
    #[cfg(feature = "forge")]
    pub fn forge_pending_mut(&mut self) -> &mut BTreeSet<TaskId> {
        self.tasks.pending_mut()
    }

    /// Nodes by id.
    pub fn nodes(&self) -> &BTreeMap<NodeId, Node> {
        self.nodes.all()
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(&id)
    }

    /// Jobs by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, Job> {
        self.jobs.all()
    }

    /// One job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Tasks by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, Task> {
        self.tasks.all()
    }

    /// One task.
    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    /// Pending tasks in queue order (lower id = submitted earlier).
    pub fn pending(&self) -> &BTreeSet<TaskId> {
        self.tasks.pending()
    }

    /// Benchmark counters per benchmark client.
    pub fn bench(&self) -> &BTreeMap<u64, BenchCounter> {
        self.bench.counters()
    }

    /// The S1 priority configuration in force.
    pub fn priority(&self) -> &PriorityConfig {
        &self.priority
    }

    /// Preemptors waiting for their victims to stop: node and victims.
    pub fn awaiting(&self) -> &BTreeMap<TaskId, (NodeId, Vec<TaskRef>)> {
        self.tasks.awaiting()
    }

    /// Engines and selection tables by node (S0.5).
    pub fn profiles(&self) -> &BTreeMap<NodeId, NodeProfile> {
        self.profiles.profiles()
    }

    /// The task–engine relation (S0.1) by task kind: engines by total time ascending.
    pub fn relations(&self) -> &BTreeMap<TaskKind, Vec<EngineTotal>> {
        self.profiles.relations()
    }

    /// S3.2 class history: each class's best CPU count as last recorded, millicores.
    pub fn cpu_history(&self) -> &BTreeMap<hetsched_common::TaskClass, u64> {
        self.profiles.cpu_history()
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
            if let Some(prev) = self.requests.outcome_of(req) {
                return prev;
            }
        }
        let outcome = match env.command {
            c @ Command::RegisterNode { .. } => self.nodes.register(c),
            Command::NodeDown { node } => self.node_down(node),
            Command::NodeUp { node } => self.nodes.up(node),
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
            } => {
                let end = reports::AttemptEnd {
                    exit_code,
                    reason,
                    reason_detail: None,
                };
                self.task_finished(node, task, attempt, end, env.at_ms)
            }
            Command::Bench {
                client,
                seq,
                record,
                ..
            } => self.bench.apply(client, seq, record),
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
            Command::SubmitBatch { batch } => self.submit_batch(index, env.at_ms, batch),
            Command::ReplanBatchJob { job, tasks } => self.replan_batch_job(job, tasks),
            Command::CreateToken { token, bootstrap } => {
                self.create_token(token, bootstrap, env.at_ms)
            }
            Command::RevokeToken { accessor } => self.revoke_token(&accessor),
            Command::SubmitPlaced {
                spec,
                place,
                queue_depth,
            } => self.submit_placed(index, env.at_ms, spec, &place, queue_depth),
        };
        if let Some(req) = env.request {
            if !matches!(outcome, Outcome::Rejected(_)) {
                self.requests.record(req, self.last_ms, &outcome);
            }
        }
        outcome
    }
}

#[cfg(test)]
mod encoding_tests;
#[cfg(test)]
mod tests;
