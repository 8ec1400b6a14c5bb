//! Issue 51 — flows: a flow file's steps submitted in one log entry, every step's job or
//! none, and the record of which job each step became (`hetsched flow ID`, `cancel flow-N`).
//!
//! ```text
//! SubmitFlow{steps} ─ FlowSpec::order fails (unknown name, duplicate, cycle, each counts) ─▶ rejected
//!        │          ─ a step's job would be refused (spec, a job outside it, locality) ──▶ rejected
//!        ▼                                       (nothing changed, no id handed out)
//! each step in order: its names resolved to the ids already handed out, then submitted
//! as SubmitJob is (`SubmitRules::submit`) ──▶ the flow's record; the dependency rules then
//! follow every new job's edges (`ClusterState::follow_dependencies`)
//! ```
//!
//! All or nothing without undo: job ids are handed out in order, so step *k* of the order
//! becomes job `next + k`; every step is checked with those ids before the first is
//! submitted, and what `submit` checks then cannot fail.

use super::command::Outcome;
use super::dependencies::check_dependencies;
use super::submit::SubmitRules;
use hetsched_common::{FlowSpec, JobId, JobSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One flow: its steps' names and jobs, in the file's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// Id (display `flow-N`).
    pub id: u64,
    /// The user whose jobs these are.
    pub user: String,
    /// Leader's clock at submission.
    pub submitted_ms: u64,
    /// Step name and its job, in the file's order.
    pub steps: Vec<(String, JobId)>,
}

/// Every flow whose jobs are not all collected.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowBook {
    /// Flows by id.
    flows: BTreeMap<u64, Flow>,
    /// Last flow id handed out.
    next: u64,
    /// Derived: the flow of each job still kept (rebuilt on restore, never written).
    #[serde(skip)]
    by_job: BTreeMap<JobId, u64>,
}

impl FlowBook {
    /// Whether nothing was ever recorded: the snapshot leaves the book out, so that states
    /// without flows keep their bytes.
    pub fn is_unused(&self) -> bool {
        self.next == 0 && self.flows.is_empty()
    }

    /// One flow.
    pub fn get(&self, id: u64) -> Option<&Flow> {
        self.flows.get(&id)
    }

    /// Flows by id.
    pub fn all(&self) -> &BTreeMap<u64, Flow> {
        &self.flows
    }

    /// The flow `job` is a step of.
    pub fn flow_of(&self, job: JobId) -> Option<u64> {
        self.by_job.get(&job).copied()
    }

    /// Whether flow `id` was handed out (and so, if absent now, collected).
    pub fn was_handed_out(&self, id: u64) -> bool {
        id >= 1 && id <= self.next
    }

    /// Records flow `flow`, its id the next one.
    fn add(&mut self, mut flow: Flow) -> u64 {
        self.next += 1;
        flow.id = self.next;
        for (_, j) in &flow.steps {
            self.by_job.insert(*j, flow.id);
        }
        self.flows.insert(flow.id, flow);
        self.next
    }

    /// A collected job leaves its flow; a flow with no job left goes too.
    pub(super) fn forget_job(&mut self, job: JobId) {
        let Some(id) = self.by_job.remove(&job) else {
            return;
        };
        let empty = self
            .flows
            .get(&id)
            .is_some_and(|f| f.steps.iter().all(|(_, j)| !self.by_job.contains_key(j)));
        if empty {
            self.flows.remove(&id);
        }
    }

    /// Rebuilds the job index after a restore.
    pub(super) fn rebuild(&mut self) {
        self.by_job = self
            .flows
            .values()
            .flat_map(|f| f.steps.iter().map(move |(_, j)| (*j, f.id)))
            .collect();
    }

    /// Restores the book from a snapshot's (the index rebuilt).
    pub(super) fn restored(mut self) -> Self {
        self.rebuild();
        self
    }
}

/// The flow rule. Spans what a submission spans ([`SubmitRules`]: jobs, tasks, profiles,
/// batches, reading nodes and the priority configuration) and the flow book (the record).
pub(super) struct FlowRules<'a> {
    /// Submits each step's job.
    pub submit: SubmitRules<'a>,
    /// The flow's record.
    pub flows: &'a mut FlowBook,
}

impl FlowRules<'_> {
    /// Applies `SubmitFlow`: every step checked, then every step submitted, or nothing.
    pub(super) fn submit_flow(&mut self, flow: FlowSpec) -> Outcome {
        let specs = match self.check(&flow) {
            Ok(specs) => specs,
            Err(why) => return Outcome::Rejected(why),
        };
        let user = specs
            .first()
            .map(|(_, s)| s.user.clone())
            .unwrap_or_default();
        let mut steps = Vec::with_capacity(specs.len());
        for (i, spec) in specs {
            match self.submit.submit(spec) {
                Outcome::Submitted { job, .. } => steps.push((i, job)),
                // Checked above: cannot happen; what applied so far stays consistent.
                other => return other,
            }
        }
        steps.sort_unstable();
        let steps: Vec<(String, JobId)> = steps
            .into_iter()
            .map(|(i, job)| (flow.steps[i].name.clone(), job))
            .collect();
        let id = self.flows.add(Flow {
            id: 0,
            user,
            submitted_ms: self.submit.at_ms,
            steps: steps.clone(),
        });
        Outcome::FlowSubmitted {
            flow: id,
            jobs: steps,
        }
    }

    /// The steps in submission order, each with its job spec resolved to the ids they will
    /// get, every one checked as `submit` will check it; else why the flow is refused.
    fn check(&self, flow: &FlowSpec) -> Result<Vec<(usize, JobSpec)>, String> {
        let order = flow.order().map_err(|e| e.to_string())?;
        let next = self.submit.jobs.next_id();
        let id_of: BTreeMap<&str, JobId> = order
            .iter()
            .enumerate()
            .map(|(k, &i)| (flow.steps[i].name.as_str(), JobId(next + 1 + k as u64)))
            .collect();
        let users: BTreeSet<&str> = flow.steps.iter().map(|s| s.spec.user.as_str()).collect();
        if users.len() > 1 {
            return Err("every step of a flow is the same user's".into());
        }
        let mut specs = Vec::with_capacity(order.len());
        for i in order {
            let step = &flow.steps[i];
            let spec = flow.resolved(i, |n| id_of.get(n).copied());
            // The step's own keys name only jobs outside the flow, which must be there now.
            self.submit
                .precheck(&spec)
                .and_then(|_| {
                    check_dependencies(self.submit.jobs, &step.spec).map_err(|r| r.to_string())
                })
                .map_err(|why| format!("step {:?}: {why}", step.name))?;
            specs.push((i, spec));
        }
        Ok(specs)
    }
}

#[cfg(test)]
#[path = "flows_tests.rs"]
mod tests;
