//! Issue 51 flows on the client API: `submit-flow` checked here as `submit` checks a job
//! (each step valid and within the per-task limits, the jobs outside the flow it follows
//! known, some node able to hold it, admission for all its tasks) and committed as one
//! `SubmitFlow` entry, every step's job or none; `flow N` reads the record; `cancel flow-N`
//! cancels every unfinished step.

use super::reply::{invalid, not_found, unexpected};
use super::Master;
use hetsched_common::protocol::{ClientResponse, ErrorReply, FlowSubmitted};
use hetsched_common::{ClientRequestId, FlowSpec, JobId};
use hetsched_master_core::state::{Command, Outcome};

impl Master {
    /// Checks and submits a flow.
    pub(super) async fn submit_flow(
        &self,
        request: ClientRequestId,
        flow: FlowSpec,
    ) -> Result<ClientResponse, ErrorReply> {
        flow.order().map_err(|e| invalid(e.to_string()))?;
        let mut tasks = 0u64;
        for step in &flow.steps {
            let named = |e: ErrorReply| {
                ErrorReply::new(e.kind, format!("step {:?}: {}", step.name, e.message))
            };
            step.spec
                .validate()
                .and_then(|()| step.spec.check_limits())
                .map_err(|e| invalid(format!("step {:?}: {e}", step.name)))?;
            // The step's own keys name only jobs outside the flow.
            self.check_dependencies(request, &step.spec)
                .map_err(named)?;
            self.check_placeable(request, &step.spec).map_err(named)?;
            tasks += u64::from(step.spec.count);
        }
        let user = flow
            .steps
            .first()
            .map(|s| s.spec.user.clone())
            .unwrap_or_default();
        self.admit(request, &user, tasks)?;
        match self
            .propose(Command::SubmitFlow { flow }, Some(request))
            .await?
        {
            Outcome::FlowSubmitted { flow, jobs } => {
                Ok(ClientResponse::FlowSubmitted(FlowSubmitted {
                    flow_id: flow,
                    jobs: jobs.into_iter().collect(),
                }))
            }
            Outcome::Rejected(why) => Err(invalid(why)),
            o => Err(unexpected(o)),
        }
    }

    /// One flow's steps with their jobs and states.
    pub(super) async fn flow(&self, stale: bool, id: u64) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        let s = self.shared.read_state();
        s.flow_info(id).map(ClientResponse::Flow).ok_or_else(|| {
            not_found(if s.flow_book().was_handed_out(id) {
                format!("flow-{id}: its jobs finished and were collected")
            } else {
                format!("no such flow: flow-{id}")
            })
        })
    }

    /// Cancels every unfinished step of a flow, the last submitted first (so that a step's
    /// dependents end `cancelled`, not `dependency`); one entry per job, each idempotent on
    /// its own request id derived from the client's.
    pub(super) async fn cancel_flow(
        &self,
        request: ClientRequestId,
        id: u64,
    ) -> Result<ClientResponse, ErrorReply> {
        let mut jobs: Vec<_> = {
            let s = self.shared.read_state();
            let f = s
                .flow_book()
                .get(id)
                .ok_or_else(|| not_found(format!("no such flow: flow-{id}")))?;
            f.steps.iter().map(|(_, j)| *j).collect()
        };
        jobs.sort_unstable_by(|a, b| b.cmp(a));
        let open: Vec<(usize, JobId)> = {
            let s = self.shared.read_state();
            let open = |j: &JobId| s.job(*j).is_some_and(|j| j.finished_ms.is_none());
            jobs.iter()
                .copied()
                .enumerate()
                .filter(|(_, j)| open(j))
                .collect()
        };
        let cancelled = self.cancel_jobs(request, open.into_iter()).await?;
        let first = jobs
            .last()
            .copied()
            .ok_or_else(|| not_found(format!("flow-{id} has no job")))?;
        Ok(ClientResponse::Cancelled {
            job: first,
            tasks: cancelled,
        })
    }
}
