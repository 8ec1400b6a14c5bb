//! Operator-driven and policy-driven task life-cycle changes of the state machine: draining
//! nodes, cancelling one task, per-attempt timeouts, and re-runs of failed tasks with
//! backoff. Pure like the rest of `apply`: time comes only from commands' `at_ms`, and the
//! leader asks [`ClusterState::drains_due`] / [`ClusterState::timeouts_due`] with its clock
//! which commands are due.
//!
//! ```text
//! running ──fails (exit ≠ 0, timeout)──▶ failures + 1 ─┬─ retries left ─▶ pending, not before
//!                                                      │                  at_ms + backoff·2^(n−1)
//!                                                      └─ none left ────▶ failed (reason)
//! node draining: no new placements; at the deadline its attempts ─▶ pending (reason drained)
//! ```

use super::{ClusterState, Outcome, TaskRef};
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason, TaskState};
use serde::{Deserialize, Serialize};

/// A node's drain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// Leader time the drain began.
    pub since_ms: u64,
    /// Leader time after which what still runs is stopped and re-queued; `None`: never.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
}

impl ClusterState {
    /// The node a user means by `name`: a registered name, an id (`3`) or `node-3`. A name
    /// wins over an id when both match.
    pub fn resolve_node(&self, name: &str) -> Option<NodeId> {
        let name = name.trim();
        if let Some(n) = self.nodes.values().find(|n| n.name == name) {
            return Some(n.id);
        }
        name.parse::<NodeId>()
            .ok()
            .filter(|id| self.nodes.contains_key(id))
    }

    /// A job's locality names resolved to node ids (sorted, deduplicated).
    pub(super) fn resolve_candidates(&self, names: &[String]) -> Result<Vec<NodeId>, String> {
        let mut ids = Vec::with_capacity(names.len());
        for n in names {
            ids.push(
                self.resolve_node(n)
                    .ok_or_else(|| format!("no node named {n:?} is registered"))?,
            );
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    pub(super) fn drain_node(
        &mut self,
        node: NodeId,
        at_ms: u64,
        deadline_ms: Option<u64>,
    ) -> Outcome {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        // Draining again moves the deadline (or removes it) but keeps when it began.
        let since_ms = n.drain.as_ref().map_or(at_ms, |d| d.since_ms);
        n.drain = Some(Drain {
            since_ms,
            deadline_ms,
        });
        Outcome::DrainChanged { node }
    }

    pub(super) fn undrain_node(&mut self, node: NodeId) -> Outcome {
        match self.nodes.get_mut(&node) {
            Some(n) => {
                n.drain = None;
                Outcome::DrainChanged { node }
            }
            None => Outcome::Rejected(format!("unknown {node}")),
        }
    }

    /// Draining nodes whose deadline is at or before `now_ms` and that still hold tasks:
    /// the leader proposes [`Command::RequeueDrained`](super::Command::RequeueDrained) for each.
    pub fn drains_due(&self, now_ms: u64) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| !n.tasks.is_empty())
            .filter(|n| {
                n.drain
                    .as_ref()
                    .and_then(|d| d.deadline_ms)
                    .is_some_and(|d| d <= now_ms)
            })
            .map(|n| n.id)
            .collect()
    }

    pub(super) fn requeue_drained(&mut self, node: NodeId) -> Outcome {
        let Some(n) = self.nodes.get(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if n.drain.is_none() {
            return Outcome::Ignored(format!("{node} is not draining"));
        }
        let requeued = self.requeue_node(node, TaskReason::Drained);
        Outcome::Drained { node, requeued }
    }

    pub(super) fn cancel_task(&mut self, task: TaskId) -> Outcome {
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let was = t.status.clone();
        let job = t.job;
        if t.status.cancel().is_err() {
            return Outcome::Cancelled {
                job,
                tasks: 0,
                stop: Vec::new(),
            };
        }
        t.status.reason = Some(TaskReason::Cancelled);
        t.not_before_ms = None;
        let gpus = std::mem::take(&mut t.gpus);
        self.tasks.dequeue(&task);
        self.tasks.stop_awaiting(&task);
        self.tasks_became_final(job, &[task]);
        let mut stop = Vec::new();
        if let (TaskState::Assigned | TaskState::Running, Some(node)) = (was.state, was.node) {
            self.release(node, task, job, &gpus);
            stop.push(TaskRef {
                task,
                node,
                attempt: was.attempt,
            });
        }
        Outcome::Cancelled {
            job,
            tasks: 1,
            stop,
        }
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

    pub(super) fn timeout_task(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        at_ms: u64,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.attempt_failed(task, attempt, Some(TaskReason::Timeout), None, at_ms) {
            Outcome::TaskUpdated => {
                let retried = self
                    .tasks
                    .get(&task)
                    .is_some_and(|t| t.status.state == TaskState::Pending);
                Outcome::TimedOut {
                    stop: TaskRef {
                        task,
                        node,
                        attempt,
                    },
                    retried,
                }
            }
            other => other,
        }
    }

    /// The current attempt of `task` failed (the caller checked fencing): with retries left
    /// the task goes back to pending, not to be placed before `at_ms` + its backoff;
    /// otherwise it is failed for good. Either way its node's grant is released.
    pub(super) fn attempt_failed(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        reason: Option<TaskReason>,
        exit_code: Option<i32>,
        at_ms: u64,
    ) -> Outcome {
        let Some(t) = self.tasks.get(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        let job = t.job;
        let failures = t.failures.saturating_add(1);
        let (retries, delay) = match self.jobs.get(&job) {
            Some(j) => (j.spec.retries, j.spec.retry_delay_ms(failures)),
            None => (0, 0),
        };
        let Some(node) = t.status.node else {
            return Outcome::Ignored(format!("{task} is not on a node"));
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        if failures <= retries {
            if let Err(e) = t.status.requeue() {
                return Outcome::Ignored(e.to_string());
            }
            t.status.exit_code = exit_code;
            t.not_before_ms = (delay > 0).then(|| at_ms.saturating_add(delay));
        } else {
            // `finish` with a non-zero code marks the task failed.
            if let Err(e) = t.status.finish(attempt, exit_code.unwrap_or(-1)) {
                return Outcome::Ignored(e.to_string());
            }
            t.status.exit_code = exit_code;
        }
        t.failures = failures;
        t.status.reason = reason;
        t.started_ms = None;
        let gpus = std::mem::take(&mut t.gpus);
        let now_final = t.status.state.is_final();
        if failures <= retries {
            self.tasks.enqueue(task);
        }
        self.release(node, task, job, &gpus);
        if now_final {
            self.tasks_became_final(job, &[task]);
        }
        Outcome::TaskUpdated
    }
}
