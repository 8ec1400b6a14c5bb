//! The slave API: [`Master::slave`] routes each slave request to its handler. Registration
//! and heartbeats go to the duties executor (liveness, reconciliation); task reports,
//! profiles and call records are proposed as entries; steal requests and S0.6 forwarding
//! queries are answered by the leader from what it keeps in memory. The leader also counts
//! each task's end once, when the report that ended it commits.

use super::duties_executor::{Heartbeat, StealRequest};
use super::heartbeats::{Gate, Pending};
use super::reply::unexpected;
use super::Master;
use hetsched_common::protocol::{
    EngineLoad, ErrorKind, ErrorReply, ForwardQuery, HeldTask, ProbeSample, SlaveRequest,
    SlaveResponse, TaskReport,
};
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason};
use hetsched_master_core::state::{ClusterState, Command, Outcome};

impl Master {
    /// Answers one slave request.
    pub(super) async fn slave(&self, req: SlaveRequest) -> Result<SlaveResponse, ErrorReply> {
        use SlaveRequest as S;
        match req {
            S::Register {
                key,
                node,
                name,
                addr,
                capacity,
                labels,
                held,
                partitions,
            } => {
                let cmd = Command::RegisterNode {
                    key,
                    node,
                    name,
                    addr,
                    capacity,
                    labels,
                    partitions,
                };
                self.register(cmd, held).await
            }
            S::Heartbeat {
                node,
                held,
                samples,
                engine_load,
                links,
            } => {
                self.engine_loads.record_links(node, links);
                self.heartbeat(node, held, samples, engine_load).await
            }
            S::TaskStarted {
                node,
                task,
                attempt,
            } => self.task_started(node, task, attempt).await,
            S::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            } => {
                self.task_finished(node, task, attempt, exit_code, reason)
                    .await
            }
            S::RecordProfile {
                node,
                engines,
                table,
            } => {
                let cmd = Command::RecordProfile {
                    node,
                    engines,
                    table,
                };
                self.record_profile(cmd).await
            }
            S::RecordCalls {
                node,
                task,
                attempt,
                summary,
            } => {
                let cmd = Command::RecordCalls {
                    node,
                    task,
                    attempt,
                    summary,
                };
                self.record_calls(cmd).await
            }
            S::StealRequest { node } => self.steal_request(node).await,
            S::ForwardQuery(q) => self.forward_query(&q),
            S::TaskReports { node, reports } => self.task_reports(node, reports).await,
        }
    }

    /// A slave registers (`cmd` is its `RegisterNode`): the registration doubles as its
    /// first heartbeat.
    async fn register(
        &self,
        cmd: Command,
        held: Vec<HeldTask>,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        if let Command::RegisterNode { addr, .. } = &cmd {
            hetsched_common::parse_host_port(addr)
                .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
        }
        match self.propose(cmd, None).await? {
            Outcome::Registered { node } => {
                // Registration doubles as the first heartbeat.
                let _ = self
                    .duties
                    .send(Heartbeat {
                        node,
                        held,
                        samples: Vec::new(),
                    })
                    .await;
                Ok(SlaveResponse::Registered { node })
            }
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            o => Err(unexpected(o)),
        }
    }

    /// A heartbeat: its engine load kept here (S0.6); answered at once from the duties
    /// executor's last role and the applied state, and left for its next drain (see
    /// `heartbeats`).
    async fn heartbeat(
        &self,
        node: NodeId,
        held: Vec<HeldTask>,
        samples: Vec<ProbeSample>,
        engine_load: Vec<EngineLoad>,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.engine_loads.record(node, engine_load);
        match self.heartbeats.gate() {
            Gate::Leading if self.shared.read_state().nodes().contains_key(&node) => {
                self.heartbeats.push(Pending {
                    node,
                    held,
                    samples,
                });
                Ok(SlaveResponse::HeartbeatAck {
                    leader: self.shared.id,
                })
            }
            Gate::Leading => Err(ErrorReply::new(
                ErrorKind::UnknownNode,
                format!("{node} is not registered"),
            )),
            Gate::CatchingUp => Err(ErrorReply::new(
                ErrorKind::Unavailable,
                "new leader is catching up with its log; retry shortly",
            )),
            Gate::NotLeader => Err(self.shared.not_leader(self.raft.status().leader)),
        }
    }

    /// An attempt started on its slave.
    async fn task_started(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        self.propose(
            Command::TaskStarted {
                node,
                task,
                attempt,
            },
            None,
        )
        .await?;
        // Stale or not, the report is settled: the slave may forget it.
        Ok(SlaveResponse::Ack)
    }

    /// An attempt ended on its slave (or was lost there).
    async fn task_finished(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        exit_code: i32,
        reason: Option<TaskReason>,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        // A lost attempt (its supervisor vanished without a recorded exit) did not
        // finish: it is re-queued with attempt + 1, like one found by reconciliation.
        let cmd = if reason == Some(TaskReason::Lost) {
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
        };
        let was_final = self.task_is_final(task);
        self.propose(cmd, None).await?;
        if !was_final {
            task_outcome_metric(&self.shared.read_state(), task, attempt);
        }
        Ok(SlaveResponse::Ack)
    }

    /// A node's API-program profile (`cmd` is its `RecordProfile`).
    async fn record_profile(&self, cmd: Command) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        match self.propose(cmd, None).await? {
            Outcome::Rejected(why) if why.starts_with("unknown node") => {
                Err(ErrorReply::new(ErrorKind::UnknownNode, why))
            }
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            _ => Ok(SlaveResponse::Ack),
        }
    }

    /// A task's call records (`cmd` is its `RecordCalls`).
    async fn record_calls(&self, cmd: Command) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        self.propose(cmd, None).await?;
        Ok(SlaveResponse::Ack)
    }

    /// S0.4: an idle slave asks for work; the duties executor picks a victim.
    async fn steal_request(&self, node: NodeId) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        self.duties
            .send(StealRequest { thief: node })
            .await
            .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?;
        Ok(SlaveResponse::Ack)
    }

    /// S0.6: where a slave should forward an API call, from the engine loads kept here.
    fn forward_query(&self, q: &ForwardQuery) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        let target = self.engine_loads.answer(&self.shared.read_state(), q);
        match &target {
            Some(t) => {
                tracing::debug!(asker = %q.node, api = %q.api, target = %t.node, engine = %t.engine, cost_us = t.cost_us, "forwarding target")
            }
            None => tracing::debug!(asker = %q.node, api = %q.api, "no forwarding target"),
        }
        Ok(SlaveResponse::ForwardTarget(target))
    }

    /// A batch of task reports: S3.6 compressions proposed one by one, the rest as one
    /// entry; ends counted once committed.
    async fn task_reports(
        &self,
        node: NodeId,
        reports: Vec<TaskReport>,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        if reports.is_empty() {
            return Ok(SlaveResponse::Ack);
        }
        let finishing: Vec<(TaskId, u32)> = reports
            .iter()
            .filter_map(|r| match r {
                TaskReport::Finished { task, attempt, .. } if !self.task_is_final(*task) => {
                    Some((*task, *attempt))
                }
                _ => None,
            })
            .collect();
        // S3.6 compressions are entries of their own (`CompressTask`), counted
        // once here, by the leader that proposed them.
        let (compressions, reports): (Vec<_>, Vec<_>) = reports
            .into_iter()
            .partition(|r| matches!(r, TaskReport::Compressed { .. }));
        for c in compressions {
            if let TaskReport::Compressed {
                task,
                attempt,
                cpu_milli,
                gpu_task,
            } = c
            {
                let cmd = Command::CompressTask {
                    node,
                    task,
                    attempt,
                    cpu_milli,
                    gpu_task,
                };
                if self.propose(cmd, None).await? == Outcome::TaskUpdated {
                    metrics::counter!("hetsched_master_compressions_total").increment(1);
                    tracing::info!(%task, %gpu_task, cpu_milli, "CPU task compressed");
                }
            }
        }
        // S0.3: asks to start queued tasks go last, after the ends that free their room.
        let (asks, mut reports): (Vec<_>, Vec<_>) = reports
            .into_iter()
            .partition(|r| matches!(r, TaskReport::WantsStart { .. }));
        let asks: Vec<(TaskId, Attempt)> = asks
            .into_iter()
            .filter_map(|r| match r {
                TaskReport::WantsStart { task, attempt } => Some((task, attempt)),
                _ => None,
            })
            .collect();
        // Asks the leader cannot grant now (and asks already granted) add nothing to the
        // log: the answer comes from the state.
        if !asks.is_empty() && (!reports.is_empty() || self.promotable(node, &asks)) {
            reports.extend(
                asks.iter()
                    .map(|&(task, attempt)| TaskReport::WantsStart { task, attempt }),
            );
        }
        // One entry for the whole batch; stale reports in it are ignored at apply.
        if !reports.is_empty() {
            self.propose(Command::TaskReports { node, reports }, None)
                .await?;
        }
        let s = self.shared.read_state();
        for (task, attempt) in finishing {
            task_outcome_metric(&s, task, attempt);
        }
        if asks.is_empty() {
            return Ok(SlaveResponse::Ack);
        }
        let tasks = s.promoted(node, &asks);
        if !tasks.is_empty() {
            metrics::counter!("hetsched_master_promotions_total").increment(tasks.len() as u64);
        }
        Ok(SlaveResponse::Promoted { tasks })
    }

    /// S0.3: whether committing these asks of `node` would promote a queued task now.
    fn promotable(&self, node: NodeId, asks: &[(TaskId, Attempt)]) -> bool {
        self.shared.read_state().promotable(node, asks)
    }

    /// Whether `task` has ended for good (or is unknown): its outcome was counted already.
    fn task_is_final(&self, task: TaskId) -> bool {
        self.shared
            .read_state()
            .tasks()
            .get(&task)
            .is_none_or(|t| t.status.state.is_final())
    }
}

/// Counts a task's end once, on the leader that committed the report that ended it: by the
/// state it ended in and its reason (docs/CONTRACT.md, "Tasks: states and reasons"). Ends the
/// leader decides itself (cancel, timeout) are counted in the duties.
fn task_outcome_metric(s: &ClusterState, task: TaskId, attempt: u32) {
    let Some(t) = s.tasks().get(&task) else {
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
