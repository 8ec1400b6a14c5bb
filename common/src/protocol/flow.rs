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
    /// The steps it starts after once each succeeded (the flow file's `needs`), read from
    /// its job's dependencies on the flow's other jobs (none once the job was collected).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// The steps it starts after once each ended (`needs_any`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_any: Vec<String>,
    /// The steps it starts after once each failed or was cancelled (`needs_fail`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_fail: Vec<String>,
    /// The step whose task *i* its task *i* follows (`each`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<String>,
}
