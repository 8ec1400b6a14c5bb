//! Flows on the client API (issue 51): what `submit-flow --json` and `flow N --json` print.
//! The request carries the flow already parsed and checked by the CLI
//! ([`crate::flowfile`]); the state machine checks it again before it hands out an id.

use crate::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `submit-flow --json`: `{"flow_id": 3, "jobs": {"prep": 12, "train": 13}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSubmitted {
    /// The flow's id (`flow-N`).
    pub flow_id: u64,
    /// Each step's job.
    pub jobs: BTreeMap<String, JobId>,
}

/// `flow N --json`: the flow's steps in the file's order, each with its job and state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowInfo {
    /// The flow's id.
    pub flow_id: u64,
    /// Its user.
    pub user: String,
    /// When it was submitted, ms since the Unix epoch.
    pub submitted_ms: u64,
    /// The steps.
    pub steps: Vec<FlowStepInfo>,
}

/// One step of [`FlowInfo`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStepInfo {
    /// The step's name.
    pub name: String,
    /// Its job.
    pub job_id: JobId,
    /// The job's state (as `jobs` shows it), `collected` once garbage-collected.
    pub state: String,
    /// Its tasks.
    pub tasks: u32,
}
