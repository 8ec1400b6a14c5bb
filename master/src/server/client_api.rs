//! The client API: [`Master::client`] routes each request to its handler (one per request,
//! grouped by family in `client_api` for writes, `client_queries` for reads, `membership`
//! and `admin`), and the writes live here: submit (with admission back-pressure), cancel,
//! drain and undrain, and the priority configuration.

use super::duties_executor::{PlaceNew, PlanSlotRelease};
use super::reply::{job_not_found, not_found, unexpected};
use super::{logs, now_ms, Master};
use hetsched_common::priority::PriorityConfig;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, ErrorReply};
use hetsched_common::{ClientRequestId, JobId, JobSpec, NodeId, TaskId};
use hetsched_consensus::Role;
use hetsched_master_core::policy::unplaceable;
use hetsched_master_core::state::{Command, Outcome};

impl Master {
    /// Answers one client request (the cluster port, the admin port and the HTTP API all
    /// come through here).
    pub(crate) async fn client(&self, req: ClientRequest) -> Result<ClientResponse, ErrorReply> {
        // Writes check what they name (a job, a task, a node) against the applied state
        // before proposing: only the leader's is current for that. A follower's may lag
        // behind a submit the leader already acknowledged, so it redirects instead.
        if matches!(
            req,
            ClientRequest::Submit { .. }
                | ClientRequest::SubmitBatch { .. }
                | ClientRequest::CancelBatch { .. }
                | ClientRequest::SubmitFlow { .. }
                | ClientRequest::CancelFlow { .. }
                | ClientRequest::Cancel { .. }
                | ClientRequest::CancelTask { .. }
                | ClientRequest::Drain { .. }
                | ClientRequest::Undrain { .. }
        ) {
            self.require_leader()?;
        }
        use ClientRequest as R;
        match req {
            R::Submit {
                request,
                spec,
                allow_unplaceable,
            } => self.submit(request, spec, allow_unplaceable).await,
            R::Cancel { request, job } => self.cancel_job(request, job).await,
            R::SubmitBatch { request, batch } => self.submit_batch(request, batch).await,
            R::Batch { stale, batch } => self.batch(stale, batch).await,
            R::CancelBatch { request, batch } => self.cancel_batch(request, batch).await,
            R::SubmitFlow { request, flow } => self.submit_flow(request, flow).await,
            R::Flow { stale, flow } => self.flow(stale, flow).await,
            R::CancelFlow { request, flow } => self.cancel_flow(request, flow).await,
            R::CancelTask { request, task } => self.cancel_task(request, task).await,
            R::Drain {
                request,
                node,
                deadline_after_ms,
            } => self.drain(request, &node, deadline_after_ms).await,
            R::Undrain { request, node } => self.undrain(request, &node).await,
            R::SetPriorityConfig { request, config } => {
                self.set_priority_config(request, config).await
            }
            R::Status { stale } => self.status(stale).await,
            R::Jobs { stale, filter } => self.jobs(stale, filter).await,
            R::Tasks { stale, job, filter } => self.tasks(stale, job, filter).await,
            R::Explain { task } => self.explain(task).await,
            R::Usage => self.usage().await,
            R::Nodes { stale } => self.nodes(stale).await,
            R::PriorityConfig { stale } => self.priority_config(stale).await,
            R::DryRun { spec } => self.dry_run_request(spec).await,
            R::Logs {
                task,
                attempt,
                stderr,
                offset,
                max_bytes,
            } => {
                let q = logs::LogQuery {
                    task,
                    attempt,
                    stderr,
                    offset,
                    max_bytes,
                };
                logs::read(&self.shared, q).await
            }
            R::Calls { task } => self.calls(task).await,
            R::Profiles { stale } => self.profiles(stale).await,
            R::Members { stale } => self.members(stale).await,
            R::AddMember { id, addr } => self.add_member(id, addr).await,
            R::RemoveMember { id } => self.remove_member(id).await,
            R::TransferLeader { id } => self.transfer_leader(id).await,
            R::BenchPropose {
                client,
                seq,
                record,
                payload,
            } => {
                let cmd = Command::Bench {
                    client,
                    seq,
                    record,
                    payload,
                };
                self.bench_propose(cmd).await
            }
            R::BenchCheck { client, acked } => self.bench_check(client, acked).await,
            R::SetFaults(f) => Ok(self.set_faults(f)),
            R::SetBugs(b) => Ok(self.set_bugs(b)),
            R::ExportLog { from, max_bytes } => self.export_log(from, max_bytes).await,
            R::AclBootstrap => self.acl_bootstrap().await,
            R::CreateToken { user, role, ttl_ms } => self.create_token(user, role, ttl_ms).await,
            R::Tokens => Ok(self.tokens()),
            R::RevokeToken { accessor } => self.revoke_token(accessor).await,
        }
    }

    /// A job submission: validated and held to the per-task limits, its locality candidates
    /// checked, refused when no registered node could ever hold a task (unless
    /// `allow_unplaceable`), admitted, proposed.
    async fn submit(
        &self,
        request: ClientRequestId,
        spec: JobSpec,
        allow_unplaceable: bool,
    ) -> Result<ClientResponse, ErrorReply> {
        spec.validate()
            .and_then(|()| spec.check_limits())
            .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
        self.check_dependencies(request, &spec)?; // issue 51: exit 4 / 2
        if let Some(n) = {
            let s = self.shared.read_state();
            spec.nodes
                .iter()
                .find(|n| s.resolve_node(n).is_none())
                .cloned()
        } {
            return Err(ErrorReply::new(
                ErrorKind::NotFound,
                format!("no such node: {n:?} (locality candidates must be registered nodes)"),
            ));
        }
        if !allow_unplaceable {
            self.check_placeable(request, &spec)?;
        }
        self.admit(request, &spec.user, u64::from(spec.count))?;
        if let Some(fake) = self.ack_before_commit_bug(request, &spec) {
            return Ok(fake);
        }
        // When nothing else waits, the leader plans the job's tasks now and the submission
        // carries the placements: one Raft round to the dispatch instead of two. With tasks
        // pending the duties would decline: a busy leader's submits skip asking them.
        let nothing_pending = self.shared.read_state().pending().is_empty();
        let placed = match self.raft.status().role {
            Role::Leader if nothing_pending => self
                .duties
                .send(PlaceNew { spec: spec.clone() })
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        let (command, _slot) = match placed {
            Some(p) => (
                p.command(spec),
                Some(PlanSlotRelease::new(self.duties.clone(), p.tag)),
            ),
            None => (Command::SubmitJob { spec }, None),
        };
        tracing::debug!(target: "hetsched::trace", request = request.0, "submit: proposing");
        match self.propose(command, Some(request)).await? {
            Outcome::Submitted { job, tasks } | Outcome::SubmittedPlaced { job, tasks, .. } => {
                tracing::debug!(target: "hetsched::trace", request = request.0, %job, tasks = tasks.len(), "submit: applied, answering");
                Ok(ClientResponse::Submitted { job, tasks })
            }
            o => Err(unexpected(o)),
        }
    }

    /// Refuses (as invalid: exit 2, HTTP 400) a job no registered node could ever hold,
    /// saying why (`cpus 1000: no node has more than 2`). Advisory, at the edge: it reads
    /// the applied state before proposing and never runs in `apply`. A retried request that
    /// already applied is never refused.
    pub(super) fn check_placeable(
        &self,
        request: ClientRequestId,
        spec: &JobSpec,
    ) -> Result<(), ErrorReply> {
        let s = self.shared.read_state();
        if s.request_applied(request) {
            return Ok(());
        }
        let capacities = s.nodes().values().map(|n| &n.capacity);
        match unplaceable(&spec.resources, capacities) {
            None => Ok(()),
            Some(why) => {
                metrics::counter!("hetsched_master_submits_refused_unplaceable_total").increment(1);
                Err(ErrorReply::new(
                    ErrorKind::Invalid,
                    format!(
                        "{why}; no registered node could ever run this job's tasks \
                         (submit --allow-unplaceable, or \"allow_unplaceable\": true over \
                         HTTP, to queue it for nodes that may join later)"
                    ),
                ))
            }
        }
    }

    /// Admission back-pressure on the leader (a follower's submit is redirected anyway):
    /// refuses with `Busy` "busy, retry" (exit 5) when the pending queue is at its
    /// cap or the user is over the submit rate. A retried request that already applied is
    /// never refused (its answer is in the state).
    pub(super) fn admit(
        &self,
        request: ClientRequestId,
        user: &str,
        tasks: u64,
    ) -> Result<(), ErrorReply> {
        if self.raft.status().role != Role::Leader {
            return Ok(());
        }
        let pending = {
            let s = self.shared.read_state();
            if s.request_applied(request) {
                return Ok(());
            }
            s.pending().len() as u64
        };
        let mut a = match self.admission.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let now = now_ms();
        a.forget_idle(now);
        a.admit(user, tasks, pending, now).map_err(|busy| {
            metrics::counter!("hetsched_master_submits_refused_busy_total").increment(1);
            ErrorReply::new(ErrorKind::Busy, busy.to_string())
        })
    }

    /// Cancels a whole job.
    async fn cancel_job(
        &self,
        request: ClientRequestId,
        job: JobId,
    ) -> Result<ClientResponse, ErrorReply> {
        {
            let s = self.shared.read_state();
            if !s.jobs().contains_key(&job) {
                return Err(job_not_found(&s, job));
            }
        }
        match self
            .propose(Command::CancelJob { job }, Some(request))
            .await?
        {
            Outcome::Cancelled { job, tasks, .. } => Ok(ClientResponse::Cancelled { job, tasks }),
            o => Err(unexpected(o)),
        }
    }

    /// Cancels one task of a job.
    async fn cancel_task(
        &self,
        request: ClientRequestId,
        task: TaskId,
    ) -> Result<ClientResponse, ErrorReply> {
        if !self.shared.read_state().tasks().contains_key(&task) {
            return Err(not_found(format!("no such task: {task}")));
        }
        match self
            .propose(Command::CancelTask { task }, Some(request))
            .await?
        {
            Outcome::Cancelled { job, tasks, .. } => Ok(ClientResponse::Cancelled { job, tasks }),
            o => Err(unexpected(o)),
        }
    }

    /// Drains a node, with a deadline after which what still runs there is re-queued.
    async fn drain(
        &self,
        request: ClientRequestId,
        node: &str,
        deadline_after_ms: Option<u64>,
    ) -> Result<ClientResponse, ErrorReply> {
        let id = self.node_named(node)?;
        let deadline_ms = deadline_after_ms.map(|d| now_ms().saturating_add(d));
        let cmd = Command::DrainNode {
            node: id,
            deadline_ms,
        };
        self.node_change(cmd, request, id).await
    }

    /// Lifts a node's drain.
    async fn undrain(
        &self,
        request: ClientRequestId,
        node: &str,
    ) -> Result<ClientResponse, ErrorReply> {
        let id = self.node_named(node)?;
        self.node_change(Command::UndrainNode { node: id }, request, id)
            .await
    }

    /// The node a client names (name, id or `node-N`), or a not-found answer.
    fn node_named(&self, name: &str) -> Result<NodeId, ErrorReply> {
        self.shared
            .read_state()
            .resolve_node(name)
            .ok_or_else(|| not_found(format!("no such node: {name:?}")))
    }

    /// Proposes a drain change and answers with the node as it is after it applied.
    async fn node_change(
        &self,
        cmd: Command,
        request: ClientRequestId,
        id: NodeId,
    ) -> Result<ClientResponse, ErrorReply> {
        match self.propose(cmd, Some(request)).await? {
            Outcome::DrainChanged { node } => {
                let s = self.shared.read_state();
                s.nodes()
                    .get(&node)
                    .map(|n| ClientResponse::Node(s.node_info(n)))
                    .ok_or_else(|| not_found(format!("no such node: {id}")))
            }
            o => Err(unexpected(o)),
        }
    }

    /// Replaces the priority configuration; answers with the one in force after it applied.
    async fn set_priority_config(
        &self,
        request: ClientRequestId,
        config: PriorityConfig,
    ) -> Result<ClientResponse, ErrorReply> {
        match self
            .propose(Command::SetPriorityConfig { config }, Some(request))
            .await?
        {
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            _ => Ok(ClientResponse::PriorityConfig(
                self.shared.read_state().priority().clone(),
            )),
        }
    }
}
