//! The client API's I/O: [`Master::client`] routes each request (the cluster port, the
//! admin port and the HTTP API all come through here) to the handler of its family —
//! [`ClientJobs`] for writes, [`ClientQueries`] for reads, [`Admin`] for membership,
//! benchmarks, faults and log exports, [`Acl`] for tokens — and carries out what it decides:
//! the read barrier before a read, the proposal of the command it built, the answer to the
//! outcome. No decision is taken here.

use super::acl::{Acl, TokenToCreate};
use super::admin::Admin;
use super::client_flows::ClientFlows;
use super::client_jobs::ClientJobs;
use super::client_queries::{ClientQueries, RaftFacts};
use super::duties_executor::Submit;
use super::{hooks, logs, now_ms, Master};
use hetsched_common::protocol::{
    BatchSubmit, ClientRequest, ClientResponse, ErrorKind, ErrorReply,
};
use hetsched_common::{ClientRequestId, FlowSpec, JobId, JobSpec, MasterId};
use hetsched_consensus::Role;
use hetsched_master_core::plan::batch_submit::plan_on;
use hetsched_master_core::state::{Command, Replica};

/// Writes check what they name (a job, a task, a node) against the applied state before
/// proposing: only the leader's is current for that. A follower's may lag behind a submit
/// the leader already acknowledged, so it redirects instead.
fn checked_on_the_leader(req: &ClientRequest) -> bool {
    matches!(
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
    )
}

impl Master {
    /// Answers one client request.
    pub(crate) async fn client(
        &self,
        mut req: ClientRequest,
    ) -> Result<ClientResponse, ErrorReply> {
        if checked_on_the_leader(&req) {
            self.require_leader()?;
            super::authz::bind_idempotency_key(&mut req);
        }
        use ClientRequest as R;
        match req {
            R::Submit {
                request,
                spec,
                allow_unplaceable,
            } => self.submit(request, spec, allow_unplaceable).await,
            R::Cancel { request, job } => {
                let cmd = self.decide(|s| ClientJobs::new(s).cancel_job(job))?;
                ClientJobs::cancelled(self.propose(cmd, Some(request)).await?)
            }
            R::CancelTask { request, task } => {
                let cmd = self.decide(|s| ClientJobs::new(s).cancel_task(task))?;
                ClientJobs::cancelled(self.propose(cmd, Some(request)).await?)
            }
            R::SubmitBatch { request, batch } => self.submit_batch(request, batch).await,
            R::CancelBatch { request, batch } => self.cancel_batch(request, batch).await,
            R::SubmitFlow { request, flow } => self.submit_flow(request, flow).await,
            R::CancelFlow { request, flow } => {
                let (job, cancels) = self.decide(|s| ClientFlows::new(s).cancel(request, flow))?;
                self.cancel_each(job, cancels).await
            }
            R::Drain {
                request,
                node,
                deadline_after_ms,
            } => {
                let cmd =
                    self.decide(|s| ClientJobs::new(s).drain(&node, deadline_after_ms, now_ms()))?;
                self.drain_change(cmd, request).await
            }
            R::Undrain { request, node } => {
                let cmd = self.decide(|s| ClientJobs::new(s).undrain(&node))?;
                self.drain_change(cmd, request).await
            }
            R::SetPriorityConfig { request, config } => {
                let o = self
                    .propose(Command::SetPriorityConfig { config }, Some(request))
                    .await?;
                self.decide(|s| ClientJobs::new(s).priority_set(o))
            }
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
            other => self.read_or_admin(other).await,
        }
    }

    /// The reads, membership, benchmark, fault, export and token requests.
    async fn read_or_admin(&self, req: ClientRequest) -> Result<ClientResponse, ErrorReply> {
        use ClientRequest as R;
        match req {
            R::Status { stale } => {
                self.read_barrier(stale).await?;
                let raft = self.raft_facts();
                self.query(true, |q| {
                    Ok(ClientResponse::Status(q.status(raft, &self.digest, stale)))
                })
                .await
            }
            R::Jobs { stale, filter } => self.query(stale, |q| q.jobs(filter)).await,
            R::Tasks { stale, job, filter } => self.query(stale, |q| q.tasks(job, filter)).await,
            R::Explain { task } => {
                self.query(false, |q| q.explain(task, &self.sched.preemption))
                    .await
            }
            R::Usage => self.query(false, |q| Ok(q.usage())).await,
            R::WaitJob {
                job,
                timeout_ms,
                change,
            } => self.wait_job(job, timeout_ms, change).await,
            R::AccountingHistory { filter, stale } => {
                self.query(stale, |q| Ok(q.accounting_history(&filter)))
                    .await
            }
            R::AccountingUsage {
                since_ms,
                by,
                user,
                stale,
            } => {
                self.query(stale, |q| Ok(q.accounting_usage(since_ms, by, user)))
                    .await
            }
            R::Nodes { stale } => self.query(stale, |q| Ok(q.nodes(&self.engine_loads))).await,
            R::PriorityConfig { stale } => self.query(stale, |q| Ok(q.priority_config())).await,
            R::Profiles { stale } => self.query(stale, |q| Ok(q.profiles())).await,
            R::Batch { stale, batch } => self.query(stale, |q| q.batch(batch)).await,
            R::Flow { stale, flow } => {
                self.read_barrier(stale).await?;
                self.decide(|s| ClientFlows::new(s).show(flow))
            }
            R::DryRun { spec } => {
                ClientQueries::check_dry_run(&spec)?;
                let id = self.shared.id.0;
                self.query(false, |q| q.dry_run(spec, &self.sched, id))
                    .await
            }
            R::Calls { task } => {
                self.read_barrier(false).await?;
                let (node, addr, attempt) =
                    super::programs::locate(&self.shared.read_state(), task)?;
                super::programs::fetch_calls(task, node, &addr, attempt).await
            }
            other => self.admin(other).await,
        }
    }

    /// Membership, benchmark, fault, export and token requests.
    async fn admin(&self, req: ClientRequest) -> Result<ClientResponse, ErrorReply> {
        use ClientRequest as R;
        let consensus = |e| self.shared.propose_error(e);
        match req {
            R::Members { stale } => {
                self.read_barrier(stale).await?;
                let leader = self.raft.status().leader;
                Ok(Admin::members(self.raft.members(), leader))
            }
            R::AddMember { id, addr } => {
                Admin::member_to_add(id, &addr)?;
                self.raft.add_member(id.0, addr).await.map_err(consensus)?;
                Ok(ClientResponse::Done)
            }
            R::RemoveMember { id } => {
                self.raft.remove_member(id.0).await.map_err(consensus)?;
                Ok(ClientResponse::Done)
            }
            R::TransferLeader { id } => {
                self.raft.transfer_leader(id.0).await.map_err(consensus)?;
                Ok(ClientResponse::Done)
            }
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
                self.propose(cmd, None).await?;
                Ok(ClientResponse::Done)
            }
            R::BenchCheck { client, acked } => {
                self.read_barrier(false).await?;
                Ok(self.decide(|s| Admin::new(s).bench_checked(client, acked)))
            }
            R::SetFaults(f) => {
                tracing::warn!(faults = ?f, "fault injection changed");
                self.raft.set_faults(Admin::faults(&f));
                Ok(ClientResponse::Done)
            }
            R::SetBugs(_) => Err(hooks::not_here()),
            R::ExportLog { from, max_bytes } => {
                let page = self
                    .raft
                    .export_log(from, Admin::page_bytes(max_bytes))
                    .await
                    .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?;
                Ok(Admin::log_page(MasterId(self.raft.id()), page))
            }
            other => self.acl(other).await,
        }
    }

    /// The token requests.
    async fn acl(&self, req: ClientRequest) -> Result<ClientResponse, ErrorReply> {
        use ClientRequest as R;
        match req {
            R::AclBootstrap => {
                self.require_leader()?;
                self.create_token(Acl::bootstrap(Acl::secret()?)).await
            }
            R::CreateToken { user, role, ttl_ms } => {
                self.require_leader()?;
                let t = Acl::create(Acl::secret()?, user, role, ttl_ms, now_ms())?;
                self.create_token(t).await
            }
            R::Tokens => Ok(self.decide(|s| Acl::new(s).tokens())),
            R::RevokeToken { accessor } => {
                self.require_leader()?;
                let cmd = self.decide(|s| Acl::new(s).revoke(accessor))?;
                Acl::revoked(self.propose(cmd, None).await?)
            }
            other => Err(ErrorReply::new(
                ErrorKind::Internal,
                format!("no handler for {other:?}"),
            )),
        }
    }

    /// A decision over the applied state (its lock is let go before any await).
    fn decide<T>(&self, decide: impl FnOnce(&Replica) -> T) -> T {
        decide(&self.shared.read_state())
    }

    /// A read: the barrier (unless `stale`), then the answer over the applied state.
    pub(super) async fn query(
        &self,
        stale: bool,
        answer: impl FnOnce(&ClientQueries<'_>) -> Result<ClientResponse, ErrorReply>,
    ) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        let s = self.shared.read_state();
        answer(&ClientQueries::new(&s, &self.reasons, now_ms()))
    }

    /// Consensus as this master sees it, for `status`.
    fn raft_facts(&self) -> RaftFacts {
        let status = self.raft.status();
        RaftFacts {
            master: self.shared.id,
            leader_addr: status.leader.and_then(|l| self.shared.addr_of(l)),
            stats: self.raft.stats(),
            snapshot_bytes: std::fs::metadata(&self.snapshot_file).map_or(0, |m| m.len()),
            insecure: hetsched_common::wire::tls::current().is_none(),
            open_files: hetsched_common::wire::fdlimit::open_files(),
            heartbeat_ms: self.heartbeats.floor_ms(),
            status,
        }
    }

    /// A job submission: checked and admitted on the leader here, then handed to the
    /// duties, which plan it when nothing else waits and propose it (docs/ARCHITECTURE.md,
    /// the submit flow).
    async fn submit(
        &self,
        request: ClientRequestId,
        spec: JobSpec,
        allow_unplaceable: bool,
    ) -> Result<ClientResponse, ErrorReply> {
        self.decide(|s| {
            let jobs = ClientJobs::new(s);
            jobs.check_submit(request, &spec, allow_unplaceable)?;
            if self.raft.status().role != Role::Leader {
                return Ok(());
            }
            let mut admission = match self.admission.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            jobs.admit(request, &spec, &mut admission, now_ms())
        })?;
        // The duties plan it when nothing else waits, and propose it.
        let proposed = self
            .duties
            .send(Submit { request, spec })
            .await
            .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?
            .await
            .map_err(|e| ErrorReply::new(ErrorKind::Unknown, e.to_string()))?;
        let o = proposed.map_err(|e| self.shared.propose_error(e))?;
        tracing::debug!(target: "hetsched::trace", request = request.0, "submit: applied, answering");
        ClientJobs::submitted(o)
    }

    /// Proposes a drain change and answers with the node as it is after it applied.
    async fn drain_change(
        &self,
        cmd: Command,
        request: ClientRequestId,
    ) -> Result<ClientResponse, ErrorReply> {
        let o = self.propose(cmd, Some(request)).await?;
        self.decide(|s| ClientJobs::new(s).drain_changed(o))
    }

    /// Plans a batch off the Raft and apply paths (the hosts read under the state's lock,
    /// the planner on a blocking thread), then submits it as one `SubmitBatch` entry.
    async fn submit_batch(
        &self,
        request: ClientRequestId,
        batch: BatchSubmit,
    ) -> Result<ClientResponse, ErrorReply> {
        let spec = match self.decide(|s| ClientJobs::new(s).batch_input(request, &batch))? {
            // A retry: the log answers it, whatever the cluster looks like now.
            None => None,
            Some((file, hosts)) => {
                let started = std::time::Instant::now();
                let spec = tokio::task::spawn_blocking(move || plan_on(&file, &hosts, &batch))
                    .await
                    .map_err(|e| ErrorReply::new(ErrorKind::Internal, e.to_string()))?
                    .map_err(|why| ErrorReply::new(ErrorKind::Invalid, why))?;
                metrics::histogram!("hetsched_master_batch_plan_seconds")
                    .record(started.elapsed().as_secs_f64());
                Some(spec)
            }
        };
        let planned = spec.as_ref().map_or(0.0, |s| s.planned_makespan_s.0);
        // A retry proposes an empty batch: apply answers it from the request id before
        // reading the command (and refuses it if the id was forgotten meanwhile).
        let command = Command::SubmitBatch {
            batch: spec.unwrap_or_default(),
        };
        let o = self.propose(command, Some(request)).await?;
        self.decide(|s| ClientJobs::new(s).batch_submitted(o, planned))
    }

    /// Cancels every job of a batch, one entry per job.
    async fn cancel_batch(
        &self,
        request: ClientRequestId,
        id: u64,
    ) -> Result<ClientResponse, ErrorReply> {
        let (job, cancels) = self.decide(|s| ClientJobs::new(s).cancel_batch(request, id))?;
        self.cancel_each(job, cancels).await
    }

    /// Proposes `cancels` one by one (a batch's or a flow's jobs); the answer names `job`.
    async fn cancel_each(
        &self,
        job: JobId,
        cancels: Vec<(ClientRequestId, Command)>,
    ) -> Result<ClientResponse, ErrorReply> {
        let mut tasks = 0u32;
        for (req, cmd) in cancels {
            tasks += ClientJobs::cancelled_tasks(self.propose(cmd, Some(req)).await?)?;
        }
        Ok(ClientResponse::Cancelled { job, tasks })
    }

    /// Checks and admits a flow on the leader, then proposes it as one `SubmitFlow` entry.
    async fn submit_flow(
        &self,
        request: ClientRequestId,
        flow: FlowSpec,
    ) -> Result<ClientResponse, ErrorReply> {
        self.decide(|s| {
            let (user, tasks) = ClientFlows::new(s).check(request, &flow)?;
            if self.raft.status().role != Role::Leader {
                return Ok(());
            }
            let mut admission = match self.admission.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            ClientJobs::new(s).admit_tasks(request, &user, tasks, &mut admission, now_ms())
        })?;
        let o = self
            .propose(Command::SubmitFlow { flow }, Some(request))
            .await?;
        ClientFlows::submitted(o)
    }

    /// Creates a token: its hash proposed, its secret in the answer.
    async fn create_token(&self, t: TokenToCreate) -> Result<ClientResponse, ErrorReply> {
        let o = self.propose(t.command.clone(), None).await?;
        t.answer(o)
    }
}
