//! Read-only views of the state in the shapes the protocol sends (`tasks`, `jobs`, `nodes`,
//! `status`).

use super::model::partition_of;
use super::model::Job;
use super::model::Node;
use super::model::NodeLiveness;
use super::model::Task;
use super::ClusterState;
use hetsched_common::protocol::{JobInfo, NodeCounts, NodeInfo, TaskInfo};
use hetsched_common::{JobId, TaskState};
use std::collections::BTreeMap;

impl ClusterState {
    /// Task counts by state name (every state present).
    pub fn task_counts(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = [
            TaskState::Pending,
            TaskState::Assigned,
            TaskState::Running,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Cancelled,
        ]
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
        for t in self.tasks.values() {
            *m.entry(t.status.state.as_str().to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Node counts.
    pub fn node_counts(&self) -> NodeCounts {
        let up = self.nodes.values().filter(|n| n.is_up()).count() as u64;
        NodeCounts {
            total: self.nodes.len() as u64,
            up,
            down: self.nodes.len() as u64 - up,
            draining: self.nodes.values().filter(|n| n.drain.is_some()).count() as u64,
        }
    }

    /// Task listing.
    pub fn task_info(&self, t: &Task) -> TaskInfo {
        TaskInfo {
            id: t.id,
            job_id: t.job,
            index: t.index,
            state: t.status.state,
            node: t.status.node,
            attempt: t.status.attempt,
            exit_code: t.status.exit_code,
            priority: t.priority,
            reason: t.status.reason,
            reason_detail: t.status.reason_detail.clone(),
            user: self
                .jobs
                .get(&t.job)
                .map(|j| j.spec.user.clone())
                .unwrap_or_default(),
            partition: self
                .jobs
                .get(&t.job)
                .map(|j| partition_of(&j.spec).to_string())
                .unwrap_or_default(),
            preemptions: t.preemptions,
            failures: t.failures,
            not_before_ms: t.not_before_ms,
            cpus: t
                .cpu_milli
                .or_else(|| self.jobs.get(&t.job).map(|j| j.spec.resources.cpu_milli))
                .unwrap_or(0) as f64
                / 1000.0,
            cpu_search: t.cpu_search.map(|p| p.as_str().to_string()),
            compressed: t.compressed,
            calls: t.calls,
            queue: self
                .job_resources(t.job)
                .map(|r| crate::policy::QueueKind::of(r).name().to_string())
                .unwrap_or_default(),
            borrowed: t.borrowed,
            waiting: None,
        }
    }

    /// S3: pending tasks per queue (every queue present).
    pub fn queue_counts(&self) -> BTreeMap<String, u64> {
        use crate::policy::QueueKind;
        let mut m: BTreeMap<String, u64> = QueueKind::ALL
            .iter()
            .map(|q| (q.name().to_string(), 0))
            .collect();
        for t in self.tasks.pending() {
            if let Some(r) = self.tasks.get(t).and_then(|t| self.job_resources(t.job)) {
                *m.entry(QueueKind::of(r).name().to_string()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Job listing.
    pub fn job_info(&self, j: &Job) -> JobInfo {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for t in &j.tasks {
            if let Some(t) = self.tasks.get(t) {
                *counts
                    .entry(t.status.state.as_str().to_string())
                    .or_insert(0) += 1;
            }
        }
        let total = j.tasks.len() as u32;
        let state = self.job_state(j);
        let mut info = JobInfo {
            id: j.id,
            name: j.spec.name.clone(),
            user: j.spec.user.clone(),
            partition: j.spec.partition.clone(),
            state: state.to_string(),
            tasks: total,
            task_states: counts,
            submitted_ms: j.submitted_ms,
            batch_id: None,
            planned_start_s: None,
            planned_finish_s: None,
            actual_finish_s: None,
            after: j.spec.after.clone(),
            after_any: j.spec.after_any.clone(),
            after_fail: j.spec.after_fail.clone(),
            after_each: j.spec.after_each,
            after_mode: j.spec.after_mode,
            singleton: j.spec.singleton,
            max_running: j.spec.max_running,
            dependents: self.deps.dependents(j.id).collect(),
        };
        self.fill_batch_fields(j, &mut info);
        info
    }

    /// Node listing.
    pub fn node_info(&self, n: &Node) -> NodeInfo {
        NodeInfo {
            id: n.id,
            name: n.name.clone(),
            addr: n.addr.clone(),
            state: match n.liveness {
                NodeLiveness::Up => "up",
                NodeLiveness::Down => "down",
            }
            .to_string(),
            capacity: n.capacity.clone(),
            free: n.free.clone(),
            tasks: n.tasks.len() as u32,
            gpus_emulated: n.gpus_emulated(),
            partitions: if n.partitions.is_empty() {
                vec!["default".to_string()]
            } else {
                n.partitions.clone()
            },
            draining: n.drain.is_some(),
            drain_deadline_ms: n.drain.as_ref().and_then(|d| d.deadline_ms),
            cgroup: n
                .labels
                .get(hetsched_common::protocol::CGROUP_LABEL)
                .cloned()
                .unwrap_or_else(|| "none".into()),
            engines: self.engine_info(n),
            probes: hetsched_common::protocol::ProbesInfo {
                gpu: n
                    .labels
                    .get(hetsched_common::protocol::PROBE_GPU_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "none".into()),
                membw: n
                    .labels
                    .get(hetsched_common::protocol::PROBE_MEMBW_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "none".into()),
            },
            queued: n.queued.len() as u32,
            steals_in: n.steals_in,
            steals_out: n.steals_out,
            // "auto": the scheduler splits the node's pool by demand.
            gpu_pool: n
                .gpu_pool()
                .map(|p| p.name().to_string())
                .or_else(|| (!n.capacity.gpus.is_empty()).then(|| "auto".to_string())),
            // Leader-local (heartbeats are not logged): the server fills them in.
            links: Vec::new(),
        }
    }

    /// The resources each task of `job` asks for.
    pub fn job_resources(&self, job: JobId) -> Option<&hetsched_common::ResourceRequest> {
        self.jobs.get(&job).map(|j| &j.spec.resources)
    }
}
