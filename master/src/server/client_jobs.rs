//! The client requests that change jobs and nodes: submit (validation, locality, the
//! placeable check, admission back-pressure), cancel, drain and undrain, the priority
//! configuration, and S2 batches (docs/DESIGN.md §S2, "In the cluster": `submit-batch` is
//! planned in the leader's server, off the Raft and apply paths, and committed as one
//! `SubmitBatch` entry; `cancel batch-N` cancels every job of the batch).
//!
//! [`ClientJobs`] decides, over the applied state: what is refused before proposing (and
//! with which error, so which exit code), the command to propose, and the answer to its
//! outcome. `client_api` does the I/O between the two.

use super::reply::{invalid, job_not_found, not_found, unexpected};
use crate::backpressure::Admission;
use hetsched_common::protocol::{
    BatchSubmit, BatchSubmitted, ClientResponse, ErrorKind, ErrorReply,
};
use hetsched_common::{ClientRequestId, JobId, JobSpec, NodeId, TaskId};
use hetsched_master_core::plan::batch_submit::{live_hosts, parse_batch_file, BatchFile};
use hetsched_master_core::policy::unplaceable;
use hetsched_master_core::state::{ClusterState, Command, Outcome};

/// What a batch submission is planned on: its file and the live hosts it names.
pub(super) type BatchInput = (BatchFile, Vec<(NodeId, usize)>);

/// The decisions on client jobs, over the applied state.
pub(super) struct ClientJobs<'a> {
    state: &'a ClusterState,
}

impl<'a> ClientJobs<'a> {
    /// Decisions against `state`.
    pub fn new(state: &'a ClusterState) -> Self {
        Self { state }
    }

    /// A job submission before it is handed on: valid and within the per-task limits
    /// (else invalid: exit 2, HTTP 400), its locality candidates registered nodes (else
    /// not found: exit 4), and placeable on some registered node unless `allow_unplaceable`.
    pub fn check_submit(
        &self,
        request: ClientRequestId,
        spec: &JobSpec,
        allow_unplaceable: bool,
    ) -> Result<(), ErrorReply> {
        spec.validate()
            .and_then(|()| spec.check_limits())
            .map_err(|e| invalid(e.to_string()))?;
        // Jobs it follows: known, not collected, matching counts (exit 4 / 2).
        super::dependency_checks::check_dependencies(self.state, request, spec)?;
        if let Some(n) = spec
            .nodes
            .iter()
            .find(|n| self.state.resolve_node(n).is_none())
        {
            return Err(ErrorReply::new(
                ErrorKind::NotFound,
                format!("no such node: {n:?} (locality candidates must be registered nodes)"),
            ));
        }
        if allow_unplaceable {
            return Ok(());
        }
        self.check_placeable(request, spec)
    }

    /// Refuses (as invalid: exit 2, HTTP 400) a job no registered node could ever hold,
    /// saying why (`cpus 1000: no node has more than 2`). Advisory, at the edge: it reads
    /// the applied state before proposing and never runs in `apply`. A retried request that
    /// already applied is never refused.
    fn check_placeable(&self, request: ClientRequestId, spec: &JobSpec) -> Result<(), ErrorReply> {
        if self.state.request_applied(request) {
            return Ok(());
        }
        let capacities = self.state.nodes().values().map(|n| &n.capacity);
        let why = unplaceable(&spec.resources, capacities)
            .map(|u| u.to_string())
            .or_else(|| self.no_container_node(spec));
        match why {
            None => Ok(()),
            Some(why) => {
                metrics::counter!("hetsched_master_submits_refused_unplaceable_total").increment(1);
                Err(invalid(format!(
                    "{why}; no registered node could ever run this job's tasks \
                     (submit --allow-unplaceable, or \"allow_unplaceable\": true over \
                     HTTP, to queue it for nodes that may join later)"
                )))
            }
        }
    }

    /// Issue 52: why a container job could run nowhere — nodes are registered and none
    /// runs containers (each one's reason, the first few).
    fn no_container_node(&self, spec: &JobSpec) -> Option<String> {
        let nodes = self.state.nodes();
        if spec.image.is_none() || nodes.is_empty() || nodes.values().any(|n| n.runs_containers()) {
            return None;
        }
        let why: Vec<String> = nodes
            .values()
            .take(3)
            .map(|n| {
                let why = n.containers_info().why.unwrap_or_default();
                format!("{}: {why}", n.name)
            })
            .collect();
        Some(format!(
            "image {}: no node runs container tasks ({})",
            spec.image.as_deref().unwrap_or_default(),
            why.join("; ")
        ))
    }

    /// Admission back-pressure on the leader: refuses with `Busy` "busy, retry" (exit 5,
    /// HTTP 429) when the pending queue is at its cap or the user is over the submit rate.
    /// A retried request that already applied is never refused (its answer is in the
    /// state).
    pub fn admit(
        &self,
        request: ClientRequestId,
        spec: &JobSpec,
        admission: &mut Admission,
        now_ms: u64,
    ) -> Result<(), ErrorReply> {
        let tasks = u64::from(spec.count);
        self.admit_tasks(request, &spec.user, tasks, admission, now_ms)
    }

    /// [`admit`](Self::admit) for `tasks` tasks of `user` (a flow's, all its steps').
    pub fn admit_tasks(
        &self,
        request: ClientRequestId,
        user: &str,
        tasks: u64,
        admission: &mut Admission,
        now_ms: u64,
    ) -> Result<(), ErrorReply> {
        if self.state.request_applied(request) {
            return Ok(());
        }
        let pending = self.state.pending().len() as u64;
        admission.forget_idle(now_ms);
        admission
            .admit(user, tasks, pending, now_ms)
            .map_err(|busy| {
                metrics::counter!("hetsched_master_submits_refused_busy_total").increment(1);
                ErrorReply::new(ErrorKind::Busy, busy.to_string())
            })
    }

    /// The answer to a submission's outcome.
    pub fn submitted(o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::Submitted { job, tasks } | Outcome::SubmittedPlaced { job, tasks, .. } => {
                Ok(ClientResponse::Submitted { job, tasks })
            }
            o => Err(unexpected(o)),
        }
    }

    /// The `CancelJob` of a known job.
    pub fn cancel_job(&self, job: JobId) -> Result<Command, ErrorReply> {
        if !self.state.jobs().contains_key(&job) {
            return Err(job_not_found(self.state, job));
        }
        Ok(Command::CancelJob { job })
    }

    /// The `CancelTask` of a known task.
    pub fn cancel_task(&self, task: TaskId) -> Result<Command, ErrorReply> {
        if !self.state.tasks().contains_key(&task) {
            return Err(not_found(format!("no such task: {task}")));
        }
        Ok(Command::CancelTask { task })
    }

    /// The answer to a cancellation's outcome.
    pub fn cancelled(o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::Cancelled { job, tasks, .. } => Ok(ClientResponse::Cancelled { job, tasks }),
            o => Err(unexpected(o)),
        }
    }

    /// Drains the node a client names, with a deadline `deadline_after_ms` from `now_ms`
    /// after which what still runs there is re-queued.
    pub fn drain(
        &self,
        node: &str,
        deadline_after_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<Command, ErrorReply> {
        Ok(Command::DrainNode {
            node: self.node_named(node)?,
            deadline_ms: deadline_after_ms.map(|d| now_ms.saturating_add(d)),
        })
    }

    /// Lifts the drain of the node a client names.
    pub fn undrain(&self, node: &str) -> Result<Command, ErrorReply> {
        Ok(Command::UndrainNode {
            node: self.node_named(node)?,
        })
    }

    /// The node a client names (name, id or `node-N`), or a not-found answer.
    fn node_named(&self, name: &str) -> Result<NodeId, ErrorReply> {
        self.state
            .resolve_node(name)
            .ok_or_else(|| not_found(format!("no such node: {name:?}")))
    }

    /// The answer to a drain change's outcome: the node as it is after it applied (`self`
    /// reads the state after the apply).
    pub fn drain_changed(&self, o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::DrainChanged { node } => self
                .state
                .nodes()
                .get(&node)
                .map(|n| ClientResponse::Node(self.state.node_info(n)))
                .ok_or_else(|| not_found(format!("no such node: {node}"))),
            o => Err(unexpected(o)),
        }
    }

    /// The answer to a new priority configuration's outcome: the one in force after it
    /// applied.
    pub fn priority_set(&self, o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::Rejected(why) => Err(invalid(why)),
            _ => Ok(ClientResponse::PriorityConfig(
                self.state.priority().clone(),
            )),
        }
    }

    /// What a batch submission is planned on: its file and the live hosts it names;
    /// `None` for a retry that already applied (the log answers it, whatever the cluster
    /// looks like now).
    pub fn batch_input(
        &self,
        request: ClientRequestId,
        batch: &BatchSubmit,
    ) -> Result<Option<BatchInput>, ErrorReply> {
        if self.state.request_applied(request) {
            return Ok(None);
        }
        let file = parse_batch_file(&batch.file).map_err(invalid)?;
        let hosts = live_hosts(self.state, &file).map_err(invalid)?;
        Ok(Some((file, hosts)))
    }

    /// The answer to a `SubmitBatch`'s outcome (`planned`: the makespan planned here, used
    /// when the state no longer has the batch).
    pub fn batch_submitted(&self, o: Outcome, planned: f64) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::BatchSubmitted { batch, jobs, tasks } => {
                let planned = self
                    .state
                    .batch_info(batch)
                    .map_or(planned, |b| b.planned_makespan_s);
                Ok(ClientResponse::BatchSubmitted(BatchSubmitted {
                    batch_id: batch,
                    jobs,
                    tasks: tasks.len() as u32,
                    planned_makespan_s: planned,
                }))
            }
            Outcome::Rejected(why) => Err(invalid(why)),
            o => Err(unexpected(o)),
        }
    }

    /// The tasks a cancellation's outcome cancelled (one job of a batch).
    pub fn cancelled_tasks(o: Outcome) -> Result<u32, ErrorReply> {
        match o {
            Outcome::Cancelled { tasks, .. } => Ok(tasks),
            o => Err(unexpected(o)),
        }
    }

    /// The cancellations of every job of batch `id`, one entry per job, each idempotent
    /// on its own request id derived from the client's; and the first job, which the
    /// answer names.
    pub fn cancel_batch(
        &self,
        request: ClientRequestId,
        id: u64,
    ) -> Result<(JobId, Vec<(ClientRequestId, Command)>), ErrorReply> {
        let b = self
            .state
            .batch_book()
            .batches
            .get(&id)
            .ok_or_else(|| not_found(format!("no such batch: batch-{id}")))?;
        let first = *b
            .jobs
            .first()
            .ok_or_else(|| not_found(format!("batch-{id} has no job left")))?;
        let cancels = b
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let req = ClientRequestId(request.0.wrapping_add(i as u64));
                (req, Command::CancelJob { job: *job })
            })
            .collect();
        Ok((first, cancels))
    }
}

#[cfg(test)]
#[path = "client_jobs_tests.rs"]
mod tests;
