//! A copy of the state to plan on ahead of the log (`duties::place_new`: an idle submit
//! planned before it is proposed), without what only grows with history.
//!
//! A full clone costs time in the number of jobs and tasks ever retained (finished ones stay
//! until garbage collection), while the scheduler reads only what is live: nodes, pending
//! tasks, the tasks nodes hold, their jobs. So the copy keeps the jobs still open (and those
//! a stopping attempt still names) with all their tasks, and leaves out finished jobs,
//! client request outcomes, benchmark counters and tokens. It is never applied to the log's
//! state and never snapshotted: it exists for one plan.

use super::acl::AclBook;
use super::admin::BenchBook;
use super::request_book::RequestBook;
use super::ClusterState;
use hetsched_common::JobId;
use std::collections::BTreeSet;

impl ClusterState {
    /// The live part of the state, for planning (see the module's documentation).
    pub fn planning_copy(&self) -> Self {
        let stopping: BTreeSet<JobId> = self
            .nodes
            .values()
            .flat_map(|n| n.stopping.iter().map(|s| s.job))
            .collect();
        let jobs = self
            .jobs
            .planning_copy(|j| j.open > 0 || stopping.contains(&j.id));
        let tasks = self
            .tasks
            .planning_copy(jobs.values().flat_map(|j| j.tasks.iter()));
        Self {
            nodes: self.nodes.clone(),
            jobs,
            tasks,
            requests: RequestBook::default(),
            bench: BenchBook::default(),
            priority: self.priority.clone(),
            profiles: self.profiles.clone(),
            batch: self.batch.clone(),
            acl: AclBook::default(),
            deps: self.deps.clone(), // issue 51: the gate reads singletons
            last_index: self.last_index,
            last_ms: self.last_ms,
        }
    }
}
