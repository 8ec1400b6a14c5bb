//! `ClusterState` — the replicated state machine of the masters. Pure and deterministic:
//! `apply` reads no clock (every command carries the leader's timestamp), does no I/O, and
//! iterates ordered maps only, so the same log yields byte-identical state on every replica.
//!
//! "Submitted later" means "a higher log index": ids are handed out in apply order.
//!
//! The state is a set of books, each owning its data (private to it) and the changes that
//! touch only it:
//! - [`NodeBook`] (`node_book.rs`): nodes, registration keys, node ids; registers, brings up
//!   and down, drains.
//! - [`JobBook`] (`job_book.rs`): jobs, job ids, the finishing order; closes finished jobs.
//! - [`TaskBook`] (`task_book.rs`): tasks, task ids, the pending queue, waiting preemptors;
//!   fences reports to the current attempt.
//! - [`RequestBook`] (`request_book.rs`): client request outcomes for retries.
//! - [`ProfileBook`] (`profile_book.rs`): engine profiles, the task–engine relation, the
//!   CPU-count history.
//! - [`BatchBook`] (`batch.rs`), [`AclBook`] (`acl.rs`), [`FlowBook`] (`flows.rs`).
//! - [`DependencyBook`] (`dependency_book.rs`): dependents by the job they follow, singleton
//!   jobs by user and name; derived from the open jobs' specs (rebuilt on restore).
//!
//! A change that moves a task also changes its node's resources and its job's open count,
//! so such rules span books. They are handlers, one per command family, each borrowing
//! only the books it touches (as openraft's engine handlers do) and saying in its doc why
//! it spans them; [`apply`](ClusterState::apply) builds the one a command needs:
//!
//! ```text
//! apply ─▶ book method      RegisterNode NodeUp DrainNode UndrainNode RecordCalls
//!                           CreateToken RevokeToken
//!       ─▶ SubmitRules      SubmitJob SubmitBatch ReplanBatchJob   (submit.rs)
//!       ─▶ FlowRules        SubmitFlow: SubmitRules per step, the record (flows.rs)
//!       ─▶ PlanRules        ApplyPlan, SubmitPlaced's placements  (plan.rs)
//!       ─▶ ReportRules      TaskStarted TaskFinished TaskLost TimeoutTask TaskReports
//!                           GroupedTaskReports (each group as its TaskReports entry)
//!       ─▶ LifecycleRules   NodeDown RequeueDrained CancelJob CancelTask (lifecycle.rs)
//!       ─▶ CpuRules         SetTaskCpus CompressTask              (cpu_changes.rs)
//!       ─▶ StealRules       StealTask                             (steal.rs)
//!       ─▶ GcRules          GcJobs                                (gc.rs)
//!       ─▶ DependencyRules  after any entry that ended tasks, and after a submission:
//!                           the dependency cascade                (dependencies.rs)
//!       ─▶ here             SubmitPlaced (SubmitRules, then PlanRules), SetPriorityConfig,
//!                           RecordProfile, RecordCpuConfig (a book and a setting or two)
//!       ─▶ Replica          Bench                                 (replica.rs)
//! ```
//!
//! Under them, [`Grants`](grants::Grants) (`grants.rs`) gives back what a task holds on its
//! node and [`QueueRules`](slave_queue::QueueRules) (`slave_queue.rs`) promotes slave-queued
//! tasks into the room that frees. Read-only queries are in `views.rs`; encoding, the hash
//! and the planning copy in `codec.rs`. Benchmark counters (`Command::Bench`) are not cluster
//! state: they live beside it in the [`Replica`] the masters run. The snapshot bytes do not
//! follow this layout: `snapshot.rs` keeps the flat document older binaries wrote and read.

mod accounting;
mod acl;
mod admin;
mod batch;
mod booking;
mod codec;
mod command;
mod cpu_changes;
mod dependencies;
mod dependency_book;
mod flows;
mod gc;
mod grants;
mod hash;
mod job_book;
mod lifecycle;
mod listing;
mod model;
mod node_book;
mod plan;
mod profile_book;
mod replica;
mod reports;
mod request_book;
mod slave_queue;
mod snapshot;
mod steal;
mod submit;
mod task_book;
mod views;

pub use accounting::{
    AccountingBook, AccountingSettings, DEFAULT_HALF_LIFE_MS, DEFAULT_RETENTION_MS,
};
pub use acl::{AclBook, TokenRecord};
pub use admin::{BenchBook, BenchCounter};
pub use batch::{
    Batch, BatchBlock, BatchBook, BatchJob, BatchJobSpec, BatchSpec, BatchTask, Real, TaskBlock,
};
pub use booking::{engine_count, free_units, with_unit};
pub use command::{
    Assign, Command, CommandEnvelope, NodeReports, Outcome, PlaceNew, Plan, Preemption, TaskRef,
};
pub use dependencies::{DepState, DependencyRefusal, DependencyView, JobStates};
pub use dependency_book::DependencyBook;
pub use flows::{Flow, FlowBook};
pub use hash::fnv1a64;
pub use job_book::JobBook;
pub use listing::ListError;
pub use model::{
    partition_of, Booking, CompressReserve, CpuSearchPhase, Drain, Job, Node, NodeLiveness,
    NodeProfile, Stopping, Task,
};
pub use node_book::NodeBook;
pub use profile_book::ProfileBook;
pub use replica::Replica;
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
        Command::GroupedTaskReports { groups } => nodes.extend(
            groups
                .iter()
                .filter(|g| !g.reports.is_empty())
                .map(|g| g.node),
        ),
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

use cpu_changes::CpuRules;
use dependencies::DependencyRules;
use flows::FlowRules;
use gc::GcRules;
use hetsched_common::priority::PriorityConfig;
use hetsched_common::program::{EngineDecl, EngineTotal, SelectionTable, TaskKind};
use hetsched_common::{ClientRequestId, JobId, JobSpec, NodeId, TaskClass, TaskId};
use lifecycle::LifecycleRules;
use plan::PlanRules;
use reports::ReportRules;
use std::collections::{BTreeMap, BTreeSet};
use steal::StealRules;
use submit::SubmitRules;

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
    /// Issue 51: flows, each step's job (written only once a flow was submitted).
    flows: FlowBook,
    /// Issue 53: the accounting settings in force (set by each leader's barrier).
    accounting_settings: AccountingSettings,
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

    /// Issue 53: the accounting settings in force (retention, fair share's half-life), as
    /// the last leader's barrier set them.
    pub fn accounting_settings(&self) -> AccountingSettings {
        self.accounting_settings
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

    /// Issue 55: the tasks the last applied entry added or handed out for change (some
    /// maybe unchanged): what the master's event stream compares. Not state.
    pub fn touched_tasks(&self) -> &BTreeSet<TaskId> {
        self.tasks.touched()
    }

    /// One task.
    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    /// Pending tasks in queue order (lower id = submitted earlier).
    pub fn pending(&self) -> &BTreeSet<TaskId> {
        self.tasks.pending()
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
    /// nothing but `last_index`. Benchmark traffic (`Command::Bench`) is the [`Replica`]'s:
    /// here it changes nothing else either.
    pub fn apply(&mut self, index: u64, env: CommandEnvelope) -> Outcome {
        self.apply_observed(index, env, &mut |_, _| {})
    }

    /// [`apply`](Self::apply), showing `before` the state as it is before each group of a
    /// [`Command::GroupedTaskReports`] applies — as it would be before that group's own
    /// `TaskReports` entry (the replica drafts usage records there).
    pub fn apply_observed(
        &mut self,
        index: u64,
        env: CommandEnvelope,
        before: &mut dyn FnMut(&ClusterState, &NodeReports),
    ) -> Outcome {
        let CommandEnvelope {
            at_ms,
            request,
            command,
        } = env;
        self.tasks.clear_touched();
        self.applied(index, at_ms, request, |s| {
            let outcome = s.dispatch(index, at_ms, command, before);
            s.follow_dependencies(&outcome);
            outcome
        })
    }

    /// Issue 54: each slave's batch as the `TaskReports` entry it stands for, its
    /// dependents followed after it as after that entry, so the state is the same as if
    /// the batches had been entries of their own. Updated if any batch updated a task.
    fn grouped_reports(
        &mut self,
        at_ms: u64,
        groups: Vec<NodeReports>,
        before: &mut dyn FnMut(&ClusterState, &NodeReports),
    ) -> Outcome {
        let mut updated = false;
        for group in groups {
            before(self, &group);
            let NodeReports { node, reports } = group;
            let outcome = self
                .report_rules(at_ms)
                .apply(Command::TaskReports { node, reports });
            self.follow_dependencies(&outcome);
            updated |= outcome == Outcome::TaskUpdated;
        }
        if updated {
            Outcome::TaskUpdated
        } else {
            Outcome::Ignored("no report in the group changed anything".into())
        }
    }

    /// After every command, inside its entry: a new job's edges (and what of it can never
    /// start, cancelled at once), then the dependents of every task the command ended
    /// ([`DependencyRules::settle`]) — so a leader change can neither start a dependent early
    /// nor lose its cancellation, and nothing extra is proposed.
    fn follow_dependencies(&mut self, outcome: &Outcome) {
        let mut rules = self.dependency_rules();
        match outcome {
            Outcome::Submitted { job, .. } | Outcome::SubmittedPlaced { job, .. } => {
                rules.follow_submit(*job);
            }
            Outcome::FlowSubmitted { jobs, .. } => {
                for (_, job) in jobs {
                    rules.follow_submit(*job);
                }
            }
            _ => {}
        }
        rules.settle();
    }

    /// What every entry does around its command: the applied index and the clock move, a
    /// retried client request is answered with its first outcome (and `command` does not
    /// run), and a client request's outcome is remembered unless it was refused.
    fn applied(
        &mut self,
        index: u64,
        at_ms: u64,
        request: Option<ClientRequestId>,
        command: impl FnOnce(&mut Self) -> Outcome,
    ) -> Outcome {
        self.last_index = index;
        self.last_ms = self.last_ms.max(at_ms);
        if let Some(prev) = request.and_then(|req| self.requests.outcome_of(req)) {
            return prev;
        }
        let outcome = command(self);
        if let Some(req) = request {
            if !matches!(outcome, Outcome::Rejected(_)) {
                self.requests.record(req, self.last_ms, &outcome);
            }
        }
        outcome
    }

    /// Hands `command` to the book or the handler of its family (see the module docs).
    fn dispatch(
        &mut self,
        index: u64,
        at_ms: u64,
        command: Command,
        before: &mut dyn FnMut(&ClusterState, &NodeReports),
    ) -> Outcome {
        match command {
            c @ Command::RegisterNode { .. } => self.nodes.register(c),
            Command::NodeUp { node } => self.nodes.up(node),
            Command::DrainNode { node, deadline_ms } => self.nodes.drain(node, at_ms, deadline_ms),
            Command::UndrainNode { node } => self.nodes.undrain(node),
            c @ (Command::NodeDown { .. }
            | Command::RequeueDrained { .. }
            | Command::CancelJob { .. }
            | Command::CancelTask { .. }) => self.lifecycle_rules().apply(c),
            c @ (Command::SubmitJob { .. }
            | Command::SubmitBatch { .. }
            | Command::ReplanBatchJob { .. }) => self.submit_rules(index, at_ms).apply(c),
            Command::SubmitPlaced {
                spec,
                place,
                queue_depth,
            } => self.submit_placed(index, at_ms, spec, &place, queue_depth),
            Command::SubmitFlow { flow } => self.flow_rules(index, at_ms).submit_flow(flow),
            Command::ApplyPlan(plan) => self.plan_rules(at_ms).apply_plan(plan),
            c @ (Command::TaskStarted { .. }
            | Command::TaskFinished { .. }
            | Command::TaskLost { .. }
            | Command::TimeoutTask { .. }
            | Command::TaskReports { .. }) => self.report_rules(at_ms).apply(c),
            Command::GroupedTaskReports { groups } => self.grouped_reports(at_ms, groups, before),
            Command::RecordCalls {
                node,
                task,
                attempt,
                summary,
            } => self.tasks.record_calls(node, task, attempt, summary),
            c @ (Command::SetTaskCpus { .. } | Command::CompressTask { .. }) => {
                self.cpu_rules().apply(c)
            }
            Command::RecordCpuConfig {
                task,
                class,
                cpu_milli,
            } => self.record_cpu_config(task, class, cpu_milli),
            Command::StealTask {
                task,
                attempt,
                from,
                to,
            } => self.steal_rules().steal(task, attempt, from, to),
            Command::GcJobs {
                jobs_finished_before_ms,
                requests_before_ms,
                keyed_requests_before_ms,
            } => self.gc_rules().collect(
                jobs_finished_before_ms,
                requests_before_ms,
                keyed_requests_before_ms,
            ),
            Command::SetPriorityConfig { config } => self.set_priority(config),
            Command::RecordProfile {
                node,
                engines,
                table,
            } => self.record_profile(node, engines, table),
            Command::CreateToken { token, bootstrap } => self
                .acl
                .create_token(token, bootstrap, at_ms)
                .map_or_else(Outcome::Rejected, Outcome::Ignored),
            Command::RevokeToken { accessor } => self
                .acl
                .revoke_token(&accessor)
                .map_or_else(Outcome::Rejected, Outcome::Ignored),
            Command::LeaderBarrier { master, accounting } => {
                if let Some(a) = accounting {
                    self.accounting_settings = a;
                }
                Outcome::Ignored(format!("barrier of master {master}"))
            }
            Command::Bench { .. } => {
                Outcome::Ignored("benchmark traffic counts in a replica".into())
            }
        }
    }

    fn lifecycle_rules(&mut self) -> LifecycleRules<'_> {
        LifecycleRules {
            nodes: &mut self.nodes,
            tasks: &mut self.tasks,
            jobs: &mut self.jobs,
            now_ms: self.last_ms,
        }
    }

    fn submit_rules(&mut self, index: u64, at_ms: u64) -> SubmitRules<'_> {
        self.flow_rules(index, at_ms).submit
    }

    fn flow_rules(&mut self, index: u64, at_ms: u64) -> FlowRules<'_> {
        FlowRules {
            submit: SubmitRules {
                jobs: &mut self.jobs,
                tasks: &mut self.tasks,
                nodes: &self.nodes,
                profiles: &mut self.profiles,
                priority: &self.priority,
                batch: &mut self.batch,
                index,
                at_ms,
            },
            flows: &mut self.flows,
        }
    }

    fn plan_rules(&mut self, at_ms: u64) -> PlanRules<'_> {
        PlanRules {
            nodes: &mut self.nodes,
            tasks: &mut self.tasks,
            jobs: &self.jobs,
            batch: &self.batch,
            at_ms,
        }
    }

    fn report_rules(&mut self, at_ms: u64) -> ReportRules<'_> {
        ReportRules {
            nodes: &mut self.nodes,
            tasks: &mut self.tasks,
            jobs: &mut self.jobs,
            at_ms,
            now_ms: self.last_ms,
        }
    }

    fn cpu_rules(&mut self) -> CpuRules<'_> {
        CpuRules {
            nodes: &mut self.nodes,
            tasks: &mut self.tasks,
            jobs: &self.jobs,
        }
    }

    fn steal_rules(&mut self) -> StealRules<'_> {
        StealRules {
            nodes: &mut self.nodes,
            tasks: &mut self.tasks,
            jobs: &self.jobs,
        }
    }

    fn dependency_rules(&mut self) -> DependencyRules<'_> {
        DependencyRules {
            jobs: &mut self.jobs,
            tasks: &mut self.tasks,
            deps: &mut self.deps,
            now_ms: self.last_ms,
        }
    }

    fn gc_rules(&mut self) -> GcRules<'_> {
        GcRules {
            jobs: &mut self.jobs,
            tasks: &mut self.tasks,
            batch: &mut self.batch,
            flows: &mut self.flows,
            requests: &mut self.requests,
            nodes: &self.nodes,
        }
    }

    /// [`Command::SubmitPlaced`]: the submission, then its placements re-checked as a
    /// plan's (the one road from a submit to a placement when the leader planned it ahead).
    fn submit_placed(
        &mut self,
        index: u64,
        at_ms: u64,
        spec: JobSpec,
        place: &[PlaceNew],
        queue_depth: u32,
    ) -> Outcome {
        match self.submit_rules(index, at_ms).submit(spec) {
            Outcome::Submitted { job, tasks } => {
                self.plan_rules(at_ms)
                    .place_submitted(job, tasks, place, queue_depth)
            }
            o => o,
        }
    }

    /// S1: a new priority configuration, one version after the one in force.
    fn set_priority(&mut self, mut config: PriorityConfig) -> Outcome {
        config.version = self.priority.version + 1;
        self.priority = config;
        Outcome::Ignored(format!("priority configuration v{}", self.priority.version))
    }

    /// S0.5: a registered node's engines and selection table.
    fn record_profile(
        &mut self,
        node: NodeId,
        engines: Vec<EngineDecl>,
        table: SelectionTable,
    ) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        self.profiles.record(node, NodeProfile { engines, table });
        Outcome::Ignored(String::new())
    }

    /// S3.2: a task's CPU-count search ends with the count its class keeps.
    fn record_cpu_config(&mut self, task: TaskId, class: TaskClass, cpu_milli: u64) -> Outcome {
        if cpu_milli == 0 {
            return Outcome::Rejected("a recorded CPU count is at least 1".into());
        }
        if !self.tasks.search_done(task) {
            return Outcome::Rejected(format!("unknown {task}"));
        }
        self.profiles.record_cpu(class, cpu_milli);
        Outcome::TaskUpdated
    }
}

#[cfg(test)]
mod encoding_tests;
#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests;
