//! Issue 51 flows on the client API: `submit-flow` checked as `submit` checks a job, step
//! by step (valid and within the per-task limits, the jobs outside the flow it follows
//! known, its locality registered, some node able to hold it), admitted for all its tasks,
//! and committed as one `SubmitFlow` entry — every step's job or none; `flow N` reads the
//! record; `cancel flow-N` cancels every unfinished step.
//!
//! [`ClientFlows`] decides over the applied state, as [`ClientJobs`] does for jobs;
//! `client_api` does the I/O.

use super::client_jobs::ClientJobs;
use super::reply::{invalid, not_found, unexpected};
use hetsched_common::protocol::{ClientResponse, ErrorReply, FlowSubmitted};
use hetsched_common::{ClientRequestId, FlowSpec, JobId};
use hetsched_master_core::state::{ClusterState, Command, Outcome};

/// The decisions on flows, over the applied state.
pub(super) struct ClientFlows<'a> {
    state: &'a ClusterState,
}

impl<'a> ClientFlows<'a> {
    /// Decisions against `state`.
    pub fn new(state: &'a ClusterState) -> Self {
        Self { state }
    }

    /// A flow before it is proposed: whole (names, cycles, `each` counts: exit 2), then
    /// each step's job as a submitted job's (its own keys name only jobs outside the
    /// flow); the errors name the step. The user and the tasks to admit.
    pub fn check(
        &self,
        request: ClientRequestId,
        flow: &FlowSpec,
    ) -> Result<(String, u64), ErrorReply> {
        flow.order().map_err(|e| invalid(e.to_string()))?;
        let jobs = ClientJobs::new(self.state);
        let mut tasks = 0u64;
        for step in &flow.steps {
            jobs.check_submit(request, &step.spec, false).map_err(|e| {
                ErrorReply::new(e.kind, format!("step {:?}: {}", step.name, e.message))
            })?;
            tasks += u64::from(step.spec.count);
        }
        let user = flow
            .steps
            .first()
            .map(|s| s.spec.user.clone())
            .unwrap_or_default();
        Ok((user, tasks))
    }

    /// The answer to a `SubmitFlow`'s outcome.
    pub fn submitted(o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
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

    /// `flow N`: the steps with their jobs and states.
    pub fn show(&self, id: u64) -> Result<ClientResponse, ErrorReply> {
        self.state
            .flow_info(id)
            .map(ClientResponse::Flow)
            .ok_or_else(|| {
                not_found(if self.state.flow_book().was_handed_out(id) {
                    format!("flow-{id}: its jobs finished and were collected")
                } else {
                    format!("no such flow: flow-{id}")
                })
            })
    }

    /// The cancellations of every unfinished step of flow `id`, the last submitted first
    /// (so that a step's dependents end `cancelled`, not `dependency`), each idempotent on
    /// its own request id derived from the client's and the step's place; and the first
    /// step's job, which the answer names.
    pub fn cancel(
        &self,
        request: ClientRequestId,
        id: u64,
    ) -> Result<(JobId, Vec<(ClientRequestId, Command)>), ErrorReply> {
        let f = self
            .state
            .flow_book()
            .get(id)
            .ok_or_else(|| not_found(format!("no such flow: flow-{id}")))?;
        let mut jobs: Vec<(usize, JobId)> = f.steps.iter().map(|(_, j)| *j).enumerate().collect();
        let first = jobs
            .iter()
            .map(|(_, j)| *j)
            .min()
            .ok_or_else(|| not_found(format!("flow-{id} has no job")))?;
        jobs.sort_unstable_by_key(|(_, j)| std::cmp::Reverse(*j));
        let open = |j: &JobId| self.state.job(*j).is_some_and(|j| j.finished_ms.is_none());
        let cancels = jobs
            .into_iter()
            .filter(|(_, j)| open(j))
            .map(|(i, job)| {
                let req = ClientRequestId(request.0.wrapping_add(i as u64));
                (req, Command::CancelJob { job })
            })
            .collect();
        Ok((first, cancels))
    }
}

#[cfg(test)]
#[path = "client_flows_tests.rs"]
mod tests;
