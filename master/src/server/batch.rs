//! S2 batches on the client API (docs/DESIGN.md §S2, "In the cluster"): `submit-batch` is
//! planned here, in the leader's server actor, against the live cluster and committed as
//! one `SubmitBatch` entry; `batch N` reads planned against actual makespan; `cancel
//! batch-N` cancels every job of the batch.
//!
//! Planning runs off the Raft and apply paths: the hosts are read under the state's read
//! lock, then the lock is dropped and the planner runs on a blocking thread.

use super::reply::{invalid, not_found, unexpected};
use super::Master;
use hetsched_common::protocol::{
    BatchSubmit, BatchSubmitted, ClientResponse, ErrorKind, ErrorReply,
};
use hetsched_common::{ClientRequestId, JobId};
use hetsched_master_core::plan::batch_submit::{live_hosts, parse_batch_file, plan_on};
use hetsched_master_core::state::{Command, Outcome};

impl Master {
    /// Plans and submits a batch.
    pub(super) async fn submit_batch(
        &self,
        request: ClientRequestId,
        batch: BatchSubmit,
    ) -> Result<ClientResponse, ErrorReply> {
        let applied = self.shared.read_state().request_applied(request);
        let spec = if applied {
            None // a retry: the log answers it, whatever the cluster looks like now
        } else {
            let file = parse_batch_file(&batch.file).map_err(invalid)?;
            let hosts = live_hosts(&self.shared.read_state(), &file).map_err(invalid)?;
            let started = std::time::Instant::now();
            let spec = tokio::task::spawn_blocking(move || plan_on(&file, &hosts, &batch))
                .await
                .map_err(|e| ErrorReply::new(ErrorKind::Internal, e.to_string()))?
                .map_err(invalid)?;
            metrics::histogram!("hetsched_master_batch_plan_seconds")
                .record(started.elapsed().as_secs_f64());
            Some(spec)
        };
        let planned = spec.as_ref().map_or(0.0, |s| s.planned_makespan_s.0);
        // A retry proposes an empty batch: apply answers it from the request id before
        // reading the command (and refuses it if the id was forgotten meanwhile).
        let command = Command::SubmitBatch {
            batch: spec.unwrap_or_default(),
        };
        match self.propose(command, Some(request)).await? {
            Outcome::BatchSubmitted { batch, jobs, tasks } => {
                let planned = self
                    .shared
                    .read_state()
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

    /// One batch, planned against actual.
    pub(super) async fn batch(&self, stale: bool, id: u64) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        self.shared
            .read_state()
            .batch_info(id)
            .map(ClientResponse::Batch)
            .ok_or_else(|| not_found(format!("no such batch: batch-{id} (or it was collected)")))
    }

    /// Cancels `jobs`, each `(i, job)` in one entry idempotent on its own request id, the
    /// client's plus `i` (so a retry names each job as the first try did); the tasks
    /// cancelled. Shared by `cancel batch-N` and `cancel flow-N`.
    pub(super) async fn cancel_jobs(
        &self,
        request: ClientRequestId,
        jobs: impl Iterator<Item = (usize, JobId)>,
    ) -> Result<u32, ErrorReply> {
        let mut cancelled = 0u32;
        for (i, job) in jobs {
            let req = ClientRequestId(request.0.wrapping_add(i as u64));
            match self.propose(Command::CancelJob { job }, Some(req)).await? {
                Outcome::Cancelled { tasks, .. } => cancelled += tasks,
                o => return Err(unexpected(o)),
            }
        }
        Ok(cancelled)
    }

    /// Cancels every job of a batch (one entry per job; each is idempotent on its own
    /// request id derived from the client's).
    pub(super) async fn cancel_batch(
        &self,
        request: ClientRequestId,
        id: u64,
    ) -> Result<ClientResponse, ErrorReply> {
        let jobs = self
            .shared
            .read_state()
            .batch_book()
            .batches
            .get(&id)
            .map(|b| b.jobs.clone())
            .ok_or_else(|| not_found(format!("no such batch: batch-{id}")))?;
        let cancelled = self
            .cancel_jobs(request, jobs.iter().copied().enumerate())
            .await?;
        match jobs.first() {
            Some(job) => Ok(ClientResponse::Cancelled {
                job: *job,
                tasks: cancelled,
            }),
            None => Err(not_found(format!("batch-{id} has no job left"))),
        }
    }
}
