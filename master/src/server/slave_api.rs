//! The slave API's I/O: [`Master::slave`] routes each slave request and carries out what
//! [`SlaveReports`] decides. Registration and heartbeats go to the duties executor
//! (liveness, reconciliation); task reports, profiles and call records are proposed as
//! entries; steal requests and S0.6 forwarding queries are answered by the leader from
//! what it keeps in memory. The leader also counts each task's end once, when the report
//! that ended it commits.

use super::duties_executor::{Heartbeat, StealRequest};
use super::heartbeats::Pending;
use super::slave_reports::SlaveReports;
use super::Master;
use hetsched_common::protocol::{
    ErrorKind, ErrorReply, HeldTask, SlaveRequest, SlaveResponse, TaskReport,
};
use hetsched_common::wire::Peer;
use hetsched_common::NodeId;
use hetsched_master_core::state::{Command, Outcome};

impl Master {
    /// Answers one slave request.
    pub(super) async fn slave(
        &self,
        req: SlaveRequest,
        peer: &Peer,
    ) -> Result<SlaveResponse, ErrorReply> {
        use SlaveRequest as S;
        match req {
            S::Attach { node } => self.attach(node, peer),
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
                images,
            } => {
                self.engine_loads.record_images(node, images);
                // S0.6: the engine load and links are kept here; the heartbeat is answered
                // from the duties executor's last role and left for its next drain.
                self.engine_loads.record_links(node, links);
                self.engine_loads.record(node, engine_load);
                let not_leader = || self.shared.not_leader(self.raft.status().leader);
                self.slave_reports(|r| r.heartbeat(node, self.heartbeats.gate(), not_leader))?;
                self.heartbeats.push(Pending {
                    node,
                    held,
                    samples,
                });
                Ok(SlaveResponse::HeartbeatAck {
                    leader: self.shared.id,
                    heartbeat_ms: self.heartbeats.floor_ms(),
                })
            }
            other => {
                self.require_leader()?;
                self.slave_records(other).await
            }
        }
    }

    /// A slave's link takes this leader's commands for `node` from now on.
    fn attach(&self, node: NodeId, peer: &Peer) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        if self.shared.read_state().node(node).is_none() {
            return Err(ErrorReply::new(
                ErrorKind::UnknownNode,
                format!("unknown node {node}: register first"),
            ));
        }
        let Some(link) = peer.link.clone() else {
            return Err(ErrorReply::new(
                ErrorKind::Unsupported,
                "this connection cannot carry commands back",
            ));
        };
        tracing::debug!(%node, %peer, "slave link attached: commands go over it");
        self.heartbeats.links.attach(node, link);
        Ok(SlaveResponse::Ack)
    }

    /// A slave registers (`cmd` is its `RegisterNode`): the registration doubles as its
    /// first heartbeat.
    async fn register(
        &self,
        cmd: Command,
        held: Vec<HeldTask>,
    ) -> Result<SlaveResponse, ErrorReply> {
        self.require_leader()?;
        SlaveReports::check_register(&cmd)?;
        let node = SlaveReports::registered(self.propose(cmd, None).await?)?;
        let first = Heartbeat {
            node,
            held,
            samples: Vec::new(),
        };
        let _ = self.duties.send(first).await;
        Ok(SlaveResponse::Registered { node })
    }

    /// Task reports, profiles, call records, steal requests and forwarding queries (this
    /// master leads).
    async fn slave_records(&self, req: SlaveRequest) -> Result<SlaveResponse, ErrorReply> {
        use SlaveRequest as S;
        let ack = |_: Outcome| SlaveResponse::Ack;
        match req {
            S::TaskStarted {
                node,
                task,
                attempt,
            } => {
                let cmd = Command::TaskStarted {
                    node,
                    task,
                    attempt,
                };
                // Stale or not, the report is settled: the slave may forget it.
                self.propose(cmd, None).await.map(ack)
            }
            S::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            } => {
                let cmd = SlaveReports::task_finished(node, task, attempt, exit_code, reason);
                let was_final = self.slave_reports(|r| r.task_is_final(task));
                self.propose(cmd, None).await?;
                if !was_final {
                    self.slave_reports(|r| r.count_end(task, attempt));
                }
                Ok(SlaveResponse::Ack)
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
                SlaveReports::profile_recorded(self.propose(cmd, None).await?)
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
                self.propose(cmd, None).await.map(ack)
            }
            // S0.4: an idle slave asks for work; the duties executor picks a victim.
            S::StealRequest { node } => self
                .duties
                .send(StealRequest { thief: node })
                .await
                .map(|()| SlaveResponse::Ack)
                .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string())),
            S::ForwardQuery(q) => Ok(self.slave_reports(|r| r.forward(&self.engine_loads, &q))),
            S::TaskReports { node, reports } => self.task_reports(node, reports).await,
            other => Err(ErrorReply::new(
                ErrorKind::Internal,
                format!("no handler for {other:?}"),
            )),
        }
    }

    /// A decision on a slave request over the applied state.
    fn slave_reports<T>(&self, decide: impl FnOnce(&SlaveReports<'_>) -> T) -> T {
        decide(&SlaveReports::new(&self.shared.read_state()))
    }

    /// A batch of task reports: S3.6 compressions proposed one by one, the rest as one
    /// entry; ends counted once committed.
    async fn task_reports(
        &self,
        node: NodeId,
        reports: Vec<TaskReport>,
    ) -> Result<SlaveResponse, ErrorReply> {
        if reports.is_empty() {
            return Ok(SlaveResponse::Ack);
        }
        let batch = self.slave_reports(|r| r.split(node, reports));
        // S3.6 compressions are entries of their own, counted once here, by the leader
        // that proposed them.
        for c in batch.compressions {
            if let Command::CompressTask {
                task,
                gpu_task,
                cpu_milli,
                ..
            } = c
            {
                if self.propose(c, None).await? == Outcome::TaskUpdated {
                    metrics::counter!("hetsched_master_compressions_total").increment(1);
                    tracing::info!(%task, %gpu_task, cpu_milli, "CPU task compressed");
                }
            }
        }
        let entry = self.slave_reports(|r| r.entry(node, batch.reports, &batch.asks));
        // Issue 54: under load, one entry holds many slaves' batches.
        match entry {
            Some(Command::TaskReports { node, reports }) => {
                self.report_groups.propose(node, reports).await?;
            }
            Some(other) => {
                self.propose(other, None).await?;
            }
            None => {}
        }
        self.slave_reports(|r| {
            for &(task, attempt) in &batch.finishing {
                r.count_end(task, attempt);
            }
            Ok(r.answer(node, &batch.asks))
        })
    }
}
