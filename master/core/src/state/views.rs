//! Read-only queries of the state: the views in the shapes the protocol sends (`tasks`,
//! `jobs`, `nodes`, `status`, `batch`), filtered listings (newest first, by job, state and
//! user, limited), and what the leader asks before proposing (`drains_due`,
//! `timeouts_due`, `promotable`, `gc_due`). None changes anything; where a query reads one
//! book it is that book's, and this file only forwards it.

use super::acl::AclBook;
use super::batch::{BatchBook, BatchTask};
use super::command::TaskRef;
use super::dependencies::{DepState, DependencyRefusal, DependencyView, JobStates};
use super::dependency_book::DependencyBook;
use super::flows::FlowBook;
use super::listing::{check_state, ListError, JOB_STATES, TASK_STATES};
use super::model::{partition_of, Job, Node, NodeLiveness, Task};
use super::slave_queue::QueueView;
use super::ClusterState;
use hetsched_common::protocol::{
    BatchInfo, BatchJobInfo, BatchTaskInfo, EngineInfo, FlowInfo, FlowStepInfo, JobInfo,
    ListFilter, NodeCounts, NodeInfo, TaskInfo,
};
use hetsched_common::{Attempt, ClientRequestId, JobId, NodeId, TaskId, TaskState};
use std::collections::BTreeMap;

fn secs_after(ms: u64, from_ms: u64) -> f64 {
    ms.saturating_sub(from_ms) as f64 / 1000.0
}

impl ClusterState {
    /// What dependencies say (issue 51), read over the job, task and dependency books.
    pub fn dependency_view(&self) -> DependencyView<'_> {
        DependencyView {
            jobs: &self.jobs,
            tasks: &self.tasks,
            deps: &self.deps,
        }
    }

    /// Whether a submission's dependencies could be recorded now (see
    /// [`DependencyRefusal`]); `apply` checks the same again.
    pub fn check_dependencies(
        &self,
        spec: &hetsched_common::JobSpec,
    ) -> Result<(), DependencyRefusal> {
        super::dependencies::check_dependencies(&self.jobs, spec)
    }

    /// The dependency book: dependents by job, singleton jobs by user and name.
    pub fn dependency_book(&self) -> &DependencyBook {
        &self.deps
    }

    /// See [`DependencyView::job_state`].
    pub fn job_state(&self, j: &Job) -> &'static str {
        self.dependency_view().job_state(j)
    }

    /// See [`DependencyView::dependency_item`].
    pub fn dependency_item(
        &self,
        kind: hetsched_common::DependencyKind,
        up: JobId,
        index: u32,
        states: &mut JobStates,
    ) -> DepState {
        self.dependency_view()
            .dependency_item(kind, up, index, states)
    }

    /// See [`DependencyView::dependency_state`].
    pub fn dependency_state(&self, job: &Job, index: u32, states: &mut JobStates) -> DepState {
        self.dependency_view().dependency_state(job, index, states)
    }

    /// See [`DependencyView::tasks_under_way`].
    pub fn tasks_under_way(&self, job: &Job) -> u32 {
        self.dependency_view().tasks_under_way(job)
    }

    /// See [`DependencyView::singleton_holder`].
    pub fn singleton_holder(&self, job: &Job) -> Option<JobId> {
        self.dependency_view().singleton_holder(job)
    }

    /// Task counts by state name (every state present).
    pub fn task_counts(&self) -> BTreeMap<String, u64> {
        self.tasks.counts()
    }

    /// Node counts.
    pub fn node_counts(&self) -> NodeCounts {
        self.nodes.counts()
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
            flow_id: self.flows.flow_of(j.id),
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
            engines: self.profiles.engine_info(n),
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
            membw_total_mbps: n
                .labels
                .get(hetsched_common::protocol::MEMBW_TOTAL_LABEL)
                .and_then(|v| v.parse().ok()),
            membw_total_source: n
                .labels
                .get(hetsched_common::protocol::MEMBW_SOURCE_LABEL)
                .cloned(),
            containers: n.containers_info(),
        }
    }

    /// The resources each task of `job` asks for.
    pub fn job_resources(&self, job: JobId) -> Option<&hetsched_common::ResourceRequest> {
        self.jobs.resources(job)
    }

    /// The CPU allocation `task`'s current attempt holds, millicores.
    pub fn task_cpu_milli(&self, task: TaskId) -> Option<u64> {
        let t = self.tasks.get(&task)?;
        t.cpu_milli
            .or_else(|| self.jobs.resources(t.job).map(|r| r.cpu_milli))
    }

    /// The engines of a node as listed (see [`ProfileBook::engine_info`](super::ProfileBook::engine_info)).
    pub fn engine_info(&self, n: &Node) -> Vec<EngineInfo> {
        self.profiles.engine_info(n)
    }

    /// The tokens and whether the ACL was bootstrapped.
    pub fn acl(&self) -> &AclBook {
        &self.acl
    }

    /// Jobs matching `f`, newest first.
    pub fn list_jobs(&self, f: &ListFilter) -> Result<Vec<JobInfo>, ListError> {
        check_state(f.state.as_deref(), &JOB_STATES)?;
        if let Some(j) = f.job {
            if !self.jobs.contains_key(&j) {
                return Err(ListError::NotFound(self.job_missing_message(j)));
            }
        }
        let limit = f.limit.map_or(usize::MAX, |l| l as usize);
        Ok(self
            .jobs
            .values()
            .rev()
            .filter(|j| f.job.is_none_or(|id| id == j.id))
            .filter(|j| f.user.as_ref().is_none_or(|u| *u == j.spec.user))
            .map(|j| self.job_info(j))
            .filter(|j| f.state.as_ref().is_none_or(|s| *s == j.state))
            .take(limit)
            .collect())
    }

    /// Tasks matching `f`, newest first.
    pub fn list_tasks(&self, f: &ListFilter) -> Result<Vec<TaskInfo>, ListError> {
        let names: Vec<&str> = TASK_STATES.iter().map(|s| s.as_str()).collect();
        check_state(f.state.as_deref(), &names)?;
        let limit = f.limit.map_or(usize::MAX, |l| l as usize);
        let keep = |t: &&Task| {
            f.state
                .as_ref()
                .is_none_or(|s| s == t.status.state.as_str())
                && f.user
                    .as_ref()
                    .is_none_or(|u| self.jobs.get(&t.job).is_some_and(|j| j.spec.user == *u))
        };
        let tasks: Vec<TaskInfo> = match f.job {
            Some(j) => {
                let job = self
                    .jobs
                    .get(&j)
                    .ok_or_else(|| ListError::NotFound(self.job_missing_message(j)))?;
                job.tasks
                    .iter()
                    .rev()
                    .filter_map(|t| self.tasks.get(t))
                    .filter(keep)
                    .take(limit)
                    .map(|t| self.task_info(t))
                    .collect()
            }
            None => self
                .tasks
                .values()
                .rev()
                .filter(keep)
                .take(limit)
                .map(|t| self.task_info(t))
                .collect(),
        };
        Ok(tasks)
    }

    /// Fills a job listing's batch fields (left `None` for a plain job).
    pub(super) fn fill_batch_fields(&self, j: &Job, info: &mut JobInfo) {
        let Some(bj) = self.batch.jobs.get(&j.id) else {
            return;
        };
        let Some(b) = self.batch.batches.get(&bj.batch) else {
            return;
        };
        info.batch_id = Some(b.id);
        info.planned_start_s = Some(bj.planned_start_s.0);
        info.planned_finish_s = Some(bj.planned_finish_s.0);
        info.actual_finish_s = j.finished_ms.map(|f| secs_after(f, b.submitted_ms));
    }

    /// `batch N --json` (`None`: no such batch, or collected).
    pub fn batch_info(&self, id: u64) -> Option<BatchInfo> {
        let b = self.batch.batches.get(&id)?;
        let mut jobs = Vec::with_capacity(b.jobs.len());
        let mut all_done = true;
        let mut last = b.submitted_ms;
        for jid in &b.jobs {
            let (Some(j), Some(bj)) = (self.jobs.get(jid), self.batch.jobs.get(jid)) else {
                continue;
            };
            match j.finished_ms {
                Some(f) => last = last.max(f),
                None => all_done = false,
            }
            let tasks = j
                .tasks
                .iter()
                .filter_map(|t| {
                    Some(BatchTaskInfo {
                        task_id: *t,
                        node: self.batch.tasks.get(t)?.node,
                        blocks: self.task_blocks(*t)?,
                    })
                })
                .collect();
            jobs.push(BatchJobInfo {
                job_id: *jid,
                index: bj.index,
                state: self.job_info(j).state,
                planned_start_s: bj.planned_start_s.0,
                planned_finish_s: bj.planned_finish_s.0,
                actual_finish_s: j.finished_ms.map(|f| secs_after(f, b.submitted_ms)),
                tasks,
            });
        }
        Some(BatchInfo {
            batch_id: b.id,
            planned_makespan_s: b.planned_makespan_s.0,
            actual_makespan_s: all_done.then(|| secs_after(last, b.submitted_ms)),
            submitted_ms: b.submitted_ms,
            replans: b.replans,
            jobs,
        })
    }

    /// `flow N --json` (`None`: no such flow, or collected).
    pub fn flow_info(&self, id: u64) -> Option<FlowInfo> {
        let f = self.flows.get(id)?;
        let step_of: BTreeMap<JobId, &str> =
            f.steps.iter().map(|(n, j)| (*j, n.as_str())).collect();
        let names = |jobs: &[JobId]| -> Vec<String> {
            jobs.iter()
                .filter_map(|j| step_of.get(j).map(|n| n.to_string()))
                .collect()
        };
        let steps = f
            .steps
            .iter()
            .map(|(name, job)| {
                let j = self.jobs.get(job);
                let spec = j.map(|j| &j.spec);
                FlowStepInfo {
                    name: name.clone(),
                    job_id: *job,
                    state: j.map_or_else(|| "collected".into(), |j| self.job_state(j).into()),
                    tasks: j.map_or(0, |j| j.tasks.len() as u32),
                    needs: spec.map_or_else(Vec::new, |s| names(&s.after)),
                    needs_any: spec.map_or_else(Vec::new, |s| names(&s.after_any)),
                    needs_fail: spec.map_or_else(Vec::new, |s| names(&s.after_fail)),
                    each: spec
                        .and_then(|s| s.after_each)
                        .and_then(|e| step_of.get(&e).map(|n| n.to_string())),
                }
            })
            .collect();
        Some(FlowInfo {
            flow_id: f.id,
            user: f.user.clone(),
            submitted_ms: f.submitted_ms,
            steps,
        })
    }

    /// Everything kept of flows.
    pub fn flow_book(&self) -> &FlowBook {
        &self.flows
    }

    /// Everything kept of batches.
    pub fn batch_book(&self) -> &BatchBook {
        &self.batch
    }

    /// A batch task's pin and blocks (`None`: not a batch task).
    pub fn batch_task(&self, task: TaskId) -> Option<&BatchTask> {
        self.batch.tasks.get(&task)
    }

    /// Whether `job` is a batch job (its tasks are a gang).
    pub fn is_gang(&self, job: JobId) -> bool {
        self.batch.is_gang(job)
    }

    /// The node a user means by `name`: a registered name, an id (`3`) or `node-3`. A name
    /// wins over an id when both match.
    pub fn resolve_node(&self, name: &str) -> Option<NodeId> {
        self.nodes.resolve(name)
    }

    /// Draining nodes whose deadline is at or before `now_ms` and that still hold tasks:
    /// the leader proposes [`Command::RequeueDrained`](super::Command::RequeueDrained) for each.
    pub fn drains_due(&self, now_ms: u64) -> Vec<NodeId> {
        self.nodes.drains_due(now_ms)
    }

    /// Running attempts whose job has a timeout and that started at least that long before
    /// `now_ms`: the leader proposes [`Command::TimeoutTask`](super::Command::TimeoutTask)
    /// for each.
    pub fn timeouts_due(&self, now_ms: u64) -> Vec<TaskRef> {
        // By job: the leader asks on every tick, and most jobs have no timeout, so only the
        // tasks of jobs with one are looked up (not every running task of every node).
        let mut due = Vec::new();
        for j in self.jobs.values() {
            let Some(limit) = j.spec.timeout_ms else {
                continue;
            };
            for tid in &j.tasks {
                let Some(t) = self.tasks.get(tid) else {
                    continue;
                };
                if t.status.state != TaskState::Running {
                    continue;
                }
                let (Some(started), Some(node)) = (t.started_ms, t.status.node) else {
                    continue;
                };
                if started.saturating_add(limit) <= now_ms {
                    due.push(TaskRef {
                        task: t.id,
                        node,
                        attempt: t.status.attempt,
                    });
                }
            }
        }
        due
    }

    /// S0.3: of the attempts `node`'s slave asked to start, those it may start: the current
    /// attempt there, holding its resources (promoted, or never queued), not ended.
    pub fn promoted(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> Vec<(TaskId, Attempt)> {
        self.queue_view().promoted(node, asks)
    }

    /// Whether committing these asks would promote at least one attempt now (the leader
    /// proposes asks that come without reports only then, so a slave asking again each
    /// heartbeat adds nothing to the log while nothing frees).
    pub fn promotable(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> bool {
        self.queue_view().promotable(node, asks)
    }

    /// The slave-queue reads over the books they span.
    fn queue_view(&self) -> QueueView<'_> {
        QueueView {
            nodes: &self.nodes,
            tasks: &self.tasks,
            jobs: &self.jobs,
        }
    }

    /// Whether a `GcJobs` with these cut-offs would remove anything (the leader asks before
    /// proposing one; `keyed_before`: the cut-off of idempotency-key outcomes, issue 55).
    pub fn gc_due(
        &self,
        jobs_before: Option<u64>,
        requests_before: Option<u64>,
        keyed_before: Option<u64>,
    ) -> bool {
        jobs_before.is_some_and(|cut| self.jobs.any_finished_before(cut))
            || requests_before.is_some_and(|cut| self.requests.any_before(cut, keyed_before))
    }

    /// Whether a client request id has applied (and its outcome is still remembered).
    pub fn request_applied(&self, request: ClientRequestId) -> bool {
        self.requests.applied(request)
    }

    /// Whether `job` existed once and was garbage-collected (ids are never reused).
    pub fn job_was_collected(&self, job: JobId) -> bool {
        self.jobs.was_collected(job)
    }

    /// What to tell a client asking for a job that is not in the state.
    pub fn job_missing_message(&self, job: JobId) -> String {
        self.jobs.missing_message(job)
    }

    /// Whether `task` existed once and was garbage-collected with its job.
    pub fn task_was_collected(&self, task: TaskId) -> bool {
        self.tasks.was_collected(task)
    }

    /// The environment of a task's attempt: its job's, plus `HETSCHED_BLOCKS` for a batch
    /// task (docs/CONTRACT.md: `[{"job_block", "size_mb", "read_from"}]`).
    pub fn task_env(&self, task: TaskId, job: &Job) -> BTreeMap<String, String> {
        let mut env = job.spec.env.clone();
        if let Some(blocks) = self.task_blocks(task) {
            let json = serde_json::to_string(&blocks).unwrap_or_else(|_| "[]".into());
            env.insert(hetsched_common::protocol::BLOCKS_ENV.to_string(), json);
        }
        env
    }

    /// A batch task's blocks as `HETSCHED_BLOCKS` lists them.
    pub fn task_blocks(&self, task: TaskId) -> Option<Vec<hetsched_common::protocol::BlockRef>> {
        let bt = self.batch.tasks.get(&task)?;
        let job = self.tasks.get(&task)?.job;
        let bj = self.batch.jobs.get(&job)?;
        Some(
            bt.blocks
                .iter()
                .map(|b| hetsched_common::protocol::BlockRef {
                    job_block: b.block,
                    size_mb: bj.blocks.get(b.block as usize).map_or(0.0, |x| x.size_mb.0),
                    read_from: self
                        .nodes
                        .get(&b.read_from)
                        .map_or_else(|| b.read_from.to_string(), |n| n.name.clone()),
                })
                .collect(),
        )
    }
}
