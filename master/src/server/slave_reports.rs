//! The slave requests' decisions: a registration's address, how a heartbeat is answered
//! from the duties executor's role, what a task's end or a batch of reports proposes, the
//! answers to their outcomes, and S0.6 forwarding targets. [`SlaveReports`] decides over
//! the applied state; `slave_api` proposes and hands heartbeats to the duties.

use super::forward_query::EngineLoads;
use super::heartbeats::Gate;
use super::reply::unexpected;
use hetsched_common::protocol::{ErrorKind, ErrorReply, ForwardQuery, SlaveResponse, TaskReport};
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason};
use hetsched_master_core::state::{ClusterState, Command, Outcome};

/// A batch of task reports as it is proposed: S3.6 compressions one entry each, the rest
/// (and asks to start queued tasks, S0.3) as one entry once those applied.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ReportBatch {
    /// Tasks whose end this batch reports (not final before): counted once it committed.
    pub finishing: Vec<(TaskId, Attempt)>,
    /// `CompressTask` entries, proposed first, one by one.
    pub compressions: Vec<Command>,
    /// Every other report, in the slave's order.
    pub reports: Vec<TaskReport>,
    /// Asks to start queued tasks.
    pub asks: Vec<(TaskId, Attempt)>,
}

/// The decisions on slave requests, over the applied state.
pub(super) struct SlaveReports<'a> {
    state: &'a ClusterState,
}

impl<'a> SlaveReports<'a> {
    /// Decisions against `state`.
    pub fn new(state: &'a ClusterState) -> Self {
        Self { state }
    }

    /// A registration's address must be `HOST:PORT` (else invalid).
    pub fn check_register(cmd: &Command) -> Result<(), ErrorReply> {
        match cmd {
            Command::RegisterNode { addr, .. } => hetsched_common::parse_host_port(addr)
                .map(|_| ())
                .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string())),
            _ => Ok(()),
        }
    }

    /// The node a registration's outcome gave, or why it was refused.
    pub fn registered(o: Outcome) -> Result<NodeId, ErrorReply> {
        match o {
            Outcome::Registered { node } => Ok(node),
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            o => Err(unexpected(o)),
        }
    }

    /// Whether a heartbeat of `node` is taken, given the duties executor's last role
    /// (`gate`): a leader takes a registered node's; an unregistered node is told to
    /// register again, a leader catching up to retry shortly, a follower who leads.
    pub fn heartbeat(
        &self,
        node: NodeId,
        gate: Gate,
        not_leader: impl FnOnce() -> ErrorReply,
    ) -> Result<(), ErrorReply> {
        match gate {
            Gate::Leading if self.state.nodes().contains_key(&node) => Ok(()),
            Gate::Leading => Err(ErrorReply::new(
                ErrorKind::UnknownNode,
                format!("{node} is not registered"),
            )),
            Gate::CatchingUp => Err(ErrorReply::new(
                ErrorKind::Unavailable,
                "new leader is catching up with its log; retry shortly",
            )),
            Gate::NotLeader => Err(not_leader()),
        }
    }

    /// What an attempt's end proposes: a lost attempt (its supervisor vanished without a
    /// recorded exit) did not finish, it is re-queued with attempt + 1 like one found by
    /// reconciliation.
    pub fn task_finished(
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
    ) -> Command {
        if reason == Some(TaskReason::Lost) {
            Command::TaskLost {
                node,
                task,
                attempt,
            }
        } else {
            Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            }
        }
    }

    /// Whether `task` has ended for good (or is unknown): its outcome was counted already.
    pub fn task_is_final(&self, task: TaskId) -> bool {
        self.state
            .tasks()
            .get(&task)
            .is_none_or(|t| t.status.state.is_final())
    }

    /// The answer to a profile's outcome: an unknown node registers again.
    pub fn profile_recorded(o: Outcome) -> Result<SlaveResponse, ErrorReply> {
        match o {
            Outcome::Rejected(why) if why.starts_with("unknown node") => {
                Err(ErrorReply::new(ErrorKind::UnknownNode, why))
            }
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            _ => Ok(SlaveResponse::Ack),
        }
    }

    /// Splits a batch of `node`'s reports into what is proposed, in order.
    pub fn split(&self, node: NodeId, reports: Vec<TaskReport>) -> ReportBatch {
        let mut batch = ReportBatch::default();
        for r in reports {
            match r {
                TaskReport::Finished { task, attempt, .. } => {
                    if !self.task_is_final(task) {
                        batch.finishing.push((task, attempt));
                    }
                    batch.reports.push(r);
                }
                TaskReport::Compressed {
                    task,
                    attempt,
                    cpu_milli,
                    gpu_task,
                } => batch.compressions.push(Command::CompressTask {
                    node,
                    task,
                    attempt,
                    cpu_milli,
                    gpu_task,
                }),
                TaskReport::WantsStart { task, attempt } => batch.asks.push((task, attempt)),
                r => batch.reports.push(r),
            }
        }
        batch
    }

    /// The one entry for the rest of a batch, once its compressions applied (`self` reads
    /// the state then): S0.3 asks go last, after the ends that free their room; asks the
    /// leader cannot grant now (and asks already granted) add nothing to the log, the
    /// answer comes from the state. `None`: nothing to propose.
    pub fn entry(
        &self,
        node: NodeId,
        mut reports: Vec<TaskReport>,
        asks: &[(TaskId, Attempt)],
    ) -> Option<Command> {
        if !asks.is_empty() && (!reports.is_empty() || self.state.promotable(node, asks)) {
            reports.extend(
                asks.iter()
                    .map(|&(task, attempt)| TaskReport::WantsStart { task, attempt }),
            );
        }
        // Stale reports in it are ignored at apply.
        (!reports.is_empty()).then_some(Command::TaskReports { node, reports })
    }

    /// The answer to a batch once its entries applied: the queued tasks its asks promoted.
    pub fn answer(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> SlaveResponse {
        if asks.is_empty() {
            return SlaveResponse::Ack;
        }
        let tasks = self.state.promoted(node, asks);
        if !tasks.is_empty() {
            metrics::counter!("hetsched_master_promotions_total").increment(tasks.len() as u64);
        }
        SlaveResponse::Promoted { tasks }
    }

    /// S0.6: where a slave should forward an API call, from the engine loads kept in
    /// `loads`.
    pub fn forward(&self, loads: &EngineLoads, q: &ForwardQuery) -> SlaveResponse {
        let target = loads.answer(self.state, q);
        match &target {
            Some(t) => {
                tracing::debug!(asker = %q.node, api = %q.api, target = %t.node, engine = %t.engine, cost_us = t.cost_us, "forwarding target")
            }
            None => tracing::debug!(asker = %q.node, api = %q.api, "no forwarding target"),
        }
        SlaveResponse::ForwardTarget(target)
    }

    /// Counts a task's end once, on the leader that committed the report that ended it:
    /// by the state it ended in and its reason (docs/CONTRACT.md, "Tasks: states and
    /// reasons"). Ends the leader decides itself (cancel, timeout) are counted in the
    /// duties.
    pub fn count_end(&self, task: TaskId, attempt: Attempt) {
        let Some(t) = self.state.tasks().get(&task) else {
            return;
        };
        if t.status.attempt != attempt || !t.status.state.is_final() {
            return;
        }
        let reason = t
            .status
            .reason
            .map_or_else(|| "none".to_string(), |r| r.to_string());
        metrics::counter!(
            "hetsched_master_task_outcomes_total",
            "state" => t.status.state.as_str(),
            "reason" => reason
        )
        .increment(1);
    }
}

#[cfg(test)]
#[path = "slave_reports_tests.rs"]
mod tests;
