//! `LeaderDuties` — the thin executor around the pure [`DutiesCore`]: it turns Raft status
//! changes, applied entries, proposal results, slave answers, heartbeats and ticks into
//! [`DutyEvent`]s (one actor mailbox: one order), hands each to the core with the time and
//! the applied state, and carries out the [`Effect`]s it returns — proposals through Raft,
//! messages through one sender per slave. No decision is taken here.

use super::heartbeats::{Gate, HeartbeatDesk};
use super::replicated::Applied;
use super::senders::{DispatchResult, Outgoing, SenderResult, SenderTiming, SlaveSenders};
use super::waiting::{sample_of, WaitReasons, SAMPLE_EVERY};
use super::{now_ms, MasterShared, Replicated};
use actix::prelude::*;
use hetsched_common::protocol::{ErrorKind, ErrorReply, HeldTask};
use hetsched_common::{ClientRequestId, MasterId, NodeId};
use hetsched_consensus::{Consensus, ProposeError, RaftStatus, Role};
use hetsched_master_core::duties::{
    DutiesConfig, DutiesCore, DutyEvent, Effect, HeartbeatVerdict, Now, ProposalTag,
};
use hetsched_master_core::sched::Scheduler;
use hetsched_master_core::state::{CommandEnvelope, Outcome};
use std::time::{Duration, Instant};

/// How often the duties tick (liveness, retries, garbage collection).
const TICK: Duration = Duration::from_millis(100);

/// Heartbeats handed to the core per look at the state when draining the inbox.
const DRAIN_CHUNK: usize = 256;

/// The leader-duties executor actor.
pub struct LeaderDuties {
    shared: MasterShared,
    raft: Consensus<Replicated>,
    core: DutiesCore,
    senders: SlaveSenders,
    results: Option<tokio::sync::mpsc::UnboundedReceiver<SenderResult>>,
    started: Instant,
    /// Why tasks wait (copied from the scheduler) and the dashboard's history.
    reasons: std::sync::Arc<WaitReasons>,
    /// When the history took its last sample.
    sampled: Option<Instant>,
    /// Heartbeats answered on the network threads; drained before each tick.
    heartbeats: std::sync::Arc<HeartbeatDesk>,
}

impl LeaderDuties {
    /// A new executor (not yet started).
    pub fn new(
        shared: MasterShared,
        raft: Consensus<Replicated>,
        reasons: std::sync::Arc<WaitReasons>,
        heartbeats: std::sync::Arc<HeartbeatDesk>,
        scheduler: Box<dyn Scheduler>,
        cfg: DutiesConfig,
    ) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let timing = SenderTiming {
            call_timeout: Duration::from_millis(cfg.dispatch_timeout_ms.max(1)),
            ..SenderTiming::default()
        };
        Self {
            core: DutiesCore::new(shared.id.0, cfg, scheduler),
            shared,
            raft,
            senders: SlaveSenders::with_links(timing, tx, heartbeats.links.clone()),
            results: Some(rx),
            started: Instant::now(),
            reasons,
            sampled: None,
            heartbeats,
        }
    }

    fn now(&self) -> Now {
        Now {
            mono_ms: self.started.elapsed().as_millis() as u64 + 1,
            wall_ms: now_ms(),
        }
    }

    /// Hands one event to the core and carries out what it returns.
    fn feed(&mut self, ev: DutyEvent, ctx: &mut Context<Self>) {
        let now = self.now();
        let fx = {
            let view = self.shared.read_state();
            if self.core.is_leading() {
                // Issue 53: the users' fair-share factors as of now, for the next plan.
                if let Some(h) = view.half_life_ms() {
                    let shares = &view.priority().shares;
                    let factors = view.accounting().fair_share(now.wall_ms, h, shares);
                    self.core
                        .set_fair_share(factors.into_iter().map(|f| (f.user, f.factor)).collect());
                }
            }
            let fx = self.core.on(ev, now, &view);
            if let Some((board, generation)) = self.core.waiting() {
                self.reasons.store(board, generation);
            }
            if self.core.is_leading() && self.sampled.is_none_or(|t| t.elapsed() >= SAMPLE_EVERY) {
                self.sampled = Some(Instant::now());
                self.reasons.sample(sample_of(&view, now.wall_ms));
            }
            self.heartbeats.set_gate(self.gate(&view));
            self.heartbeats
                .set_floor_ms(self.core.heartbeat_floor_ms(&view));
            fx
        };
        self.execute(fx, ctx);
    }

    /// What a heartbeat answered on the network threads may get, from the core's role.
    fn gate(&self, view: &hetsched_master_core::state::ClusterState) -> Gate {
        if self.core.is_leading() {
            return Gate::Leading;
        }
        // Not leading: the verdict does not depend on the node.
        match self.core.heartbeat_verdict(NodeId(0), view) {
            HeartbeatVerdict::CatchingUp => Gate::CatchingUp,
            _ => Gate::NotLeader,
        }
    }

    /// Hands the core every heartbeat answered since the last drain, under one look at the
    /// state. Runs before each tick, so that its liveness check sees them.
    fn drain_heartbeats(&mut self, ctx: &mut Context<Self>) {
        let batch = self.heartbeats.drain();
        if batch.is_empty() {
            return;
        }
        let now = self.now();
        let mut fx = Vec::new();
        let mut batch = batch.into_iter().peekable();
        while batch.peek().is_some() {
            // The state's lock is let go between chunks: applying entries must not wait
            // for thousands of heartbeats.
            let view = self.shared.read_state();
            for hb in batch.by_ref().take(DRAIN_CHUNK) {
                fx.extend(self.core.on(
                    DutyEvent::Heartbeat {
                        node: hb.node,
                        held: hb.held,
                    },
                    now,
                    &view,
                ));
                if !hb.samples.is_empty() {
                    fx.extend(self.core.on(
                        DutyEvent::Samples {
                            node: hb.node,
                            samples: hb.samples,
                        },
                        now,
                        &view,
                    ));
                }
            }
        }
        self.execute(fx, ctx);
    }

    fn execute(&mut self, fx: Vec<Effect>, ctx: &mut Context<Self>) {
        for e in fx {
            match e {
                Effect::Propose { tag, command } => {
                    tracing::debug!(target: "hetsched::trace", ?tag, "duties: proposing");
                    let bytes = CommandEnvelope {
                        at_ms: now_ms(),
                        request: None,
                        command,
                    }
                    .encode();
                    let raft = self.raft.clone();
                    let me = ctx.address();
                    tokio::spawn(async move {
                        let r = raft.propose(bytes).await;
                        if let Err(e) = &r {
                            tracing::debug!(?tag, error = %e, "duty proposal did not apply");
                        }
                        me.do_send(DutiesMsg::Proposed { tag, ok: r.is_ok() });
                    });
                }
                Effect::Stop {
                    node,
                    addr,
                    task,
                    attempt,
                    grace_ms,
                } => self.senders.send(
                    node,
                    &addr,
                    Outgoing::Stop {
                        task,
                        attempt,
                        grace_ms,
                    },
                ),
                Effect::Release {
                    node,
                    addr,
                    task,
                    attempt,
                    to,
                } => self
                    .senders
                    .send(node, &addr, Outgoing::Release { task, attempt, to }),
                Effect::DispatchBatch {
                    node,
                    addr,
                    assignments,
                } => {
                    metrics::counter!("hetsched_master_dispatches_total")
                        .increment(assignments.len() as u64);
                    metrics::counter!("hetsched_master_dispatch_messages_total").increment(1);
                    self.senders
                        .send(node, &addr, Outgoing::DispatchBatch(assignments));
                }
                Effect::SetCpus {
                    node,
                    addr,
                    task,
                    attempt,
                    cpu_milli,
                } => self.senders.send(
                    node,
                    &addr,
                    Outgoing::SetCpus {
                        task,
                        attempt,
                        cpu_milli,
                    },
                ),
            }
        }
        metrics::gauge!("hetsched_master_undelivered_assignments")
            .set(self.core.undelivered() as f64);
        metrics::gauge!("hetsched_master_slave_senders").set(self.senders.count() as f64);
        metrics::gauge!("hetsched_master_slave_links").set(self.senders.links() as f64);
    }
}

impl Actor for LeaderDuties {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(mut rx) = self.results.take() {
            let me = ctx.address();
            tokio::spawn(async move {
                while let Some(r) = rx.recv().await {
                    match r {
                        SenderResult::Dispatch(d) => me.do_send(DutiesMsg::Delivered(d)),
                        SenderResult::Released {
                            node,
                            task,
                            attempt,
                            to,
                            released,
                        } => me.do_send(DutiesMsg::Released {
                            task,
                            attempt,
                            from: node,
                            to,
                            released,
                        }),
                    }
                }
            });
        }
        ctx.run_interval(TICK, |act, ctx| {
            // Closed links before the heartbeats: a heartbeat drained after the mark clears
            // it, so a slave that reconnected and beat is never taken for gone (a heartbeat
            // older than the close clearing it only leaves the node to the node timeout).
            let nodes = act.heartbeats.links.take_closed();
            if !nodes.is_empty() {
                act.feed(DutyEvent::LinksClosed { nodes }, ctx);
            }
            act.drain_heartbeats(ctx);
            act.feed(DutyEvent::Tick, ctx)
        });
    }
}

/// What reaches the executor from consensus, proposals and senders.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum DutiesMsg {
    /// Raft status changed.
    Raft(RaftStatus),
    /// An entry was applied (index 0: a snapshot was restored).
    Applied(Applied),
    /// A duty proposal finished.
    Proposed {
        /// Its tag.
        tag: ProposalTag,
        /// Whether it applied.
        ok: bool,
    },
    /// A slave answered a dispatch, or the send failed.
    Delivered(DispatchResult),
    /// S0.4: a victim answered a release (or the send failed: not released).
    Released {
        /// Task.
        task: hetsched_common::TaskId,
        /// Attempt.
        attempt: hetsched_common::Attempt,
        /// The victim.
        from: NodeId,
        /// The thief.
        to: NodeId,
        /// Whether it was released.
        released: bool,
    },
}

impl Handler<DutiesMsg> for LeaderDuties {
    type Result = ();

    fn handle(&mut self, msg: DutiesMsg, ctx: &mut Self::Context) {
        match &msg {
            // Whatever was queued for slaves belongs to a leadership that ended.
            DutiesMsg::Raft(st) if st.role != Role::Leader => self.senders.clear(),
            DutiesMsg::Applied(a) if self.core.is_leading() => self.applied_metrics(a),
            _ => {}
        }
        self.feed(event(msg), ctx);
    }
}

/// The core's event for a message.
fn event(msg: DutiesMsg) -> DutyEvent {
    match msg {
        DutiesMsg::Raft(st) => DutyEvent::Leadership(st.role == Role::Leader),
        DutiesMsg::Applied(a) => DutyEvent::Applied {
            index: a.index,
            outcome: a.outcome,
            touched: a.touched,
        },
        DutiesMsg::Proposed { tag, ok } => DutyEvent::Proposed { tag, ok },
        DutiesMsg::Delivered(r) => DutyEvent::DeliveredBatch {
            node: r.node,
            tasks: r.tasks,
            ok: r.ok,
        },
        DutiesMsg::Released {
            task,
            attempt,
            from,
            to,
            released,
        } => DutyEvent::Released {
            task,
            attempt,
            from,
            to,
            released,
        },
    }
}

impl LeaderDuties {
    /// What the leader counts of an entry it applied (once, by the leader that proposed
    /// it: docs/CONTRACT.md): preemptions, placement latency, tasks it ended, steals.
    fn applied_metrics(&self, a: &Applied) {
        match &a.outcome {
            Outcome::PlanApplied {
                preempted,
                accepted,
                ..
            } => {
                tracing::debug!(target: "hetsched::trace", index = a.index, accepted = accepted.len(), "plan: applied");
                metrics::counter!("hetsched_master_preemptions_total")
                    .increment(preempted.len() as u64);
                self.placement_latency(accepted);
            }
            Outcome::SubmittedPlaced { accepted, .. } => {
                tracing::debug!(target: "hetsched::trace", index = a.index, accepted = accepted.len(), "submit with placements: applied");
                self.placement_latency(accepted);
            }
            Outcome::Stolen {
                assigned: Some(_), ..
            } => metrics::counter!("hetsched_master_steals_total").increment(1),
            o => {
                if let Some((n, state, reason)) = ended_by_leader(o) {
                    metrics::counter!("hetsched_master_task_outcomes_total", "state" => state, "reason" => reason)
                        .increment(n);
                }
            }
        }
    }
}

/// A slave's heartbeat, answered with the leader's id or an error.
#[derive(Message)]
#[rtype(result = "Result<MasterId, ErrorReply>")]
pub struct Heartbeat {
    /// Node.
    pub node: NodeId,
    /// What it holds.
    pub held: Vec<HeldTask>,
    /// Probe samples since its last heartbeat.
    pub samples: Vec<hetsched_common::protocol::ProbeSample>,
}

impl Handler<Heartbeat> for LeaderDuties {
    type Result = Result<MasterId, ErrorReply>;

    fn handle(&mut self, hb: Heartbeat, ctx: &mut Self::Context) -> Self::Result {
        let verdict = {
            let view = self.shared.read_state();
            self.core.heartbeat_verdict(hb.node, &view)
        };
        match verdict {
            HeartbeatVerdict::Accept => {
                self.feed(
                    DutyEvent::Heartbeat {
                        node: hb.node,
                        held: hb.held,
                    },
                    ctx,
                );
                if !hb.samples.is_empty() {
                    self.feed(
                        DutyEvent::Samples {
                            node: hb.node,
                            samples: hb.samples,
                        },
                        ctx,
                    );
                }
                Ok(self.shared.id)
            }
            HeartbeatVerdict::NotLeader => Err(self.shared.not_leader(self.raft.status().leader)),
            HeartbeatVerdict::CatchingUp => Err(ErrorReply::new(
                ErrorKind::Unavailable,
                "new leader is catching up with its log; retry shortly",
            )),
            HeartbeatVerdict::UnknownNode => Err(ErrorReply::new(
                ErrorKind::UnknownNode,
                format!("{} is not registered", hb.node),
            )),
        }
    }
}

impl LeaderDuties {
    /// Records submission-to-first-placement latency of first attempts just placed.
    fn placement_latency(&self, accepted: &[hetsched_master_core::state::TaskRef]) {
        let now = super::now_ms();
        let s = self.shared.read_state();
        for r in accepted.iter().filter(|r| r.attempt == 1) {
            if let Some(job) = s.tasks().get(&r.task).and_then(|t| s.jobs().get(&t.job)) {
                let secs = now.saturating_sub(job.submitted_ms) as f64 / 1000.0;
                metrics::histogram!("hetsched_master_placement_seconds").record(secs);
            }
        }
    }
}

/// Tasks ended for good by a command the leader applied (cancellations, timeouts without a
/// re-run), as (how many, state, reason); ends reported by slaves are counted where the
/// report is committed.
fn ended_by_leader(o: &Outcome) -> Option<(u64, &'static str, &'static str)> {
    match o {
        Outcome::Cancelled { tasks, .. } => Some((u64::from(*tasks), "cancelled", "cancelled")),
        Outcome::TimedOut { retried: false, .. } => Some((1, "failed", "timeout")),
        _ => None,
    }
}

/// A submission the client API checked, handed to the duties: they plan it when nothing
/// else waits and always propose it as a `SubmitPlaced` (`DutiesCore::submission`), the one
/// road from a submit to its placement. The answer is the proposal's result, to await.
#[derive(Message)]
#[rtype(result = "tokio::sync::oneshot::Receiver<Result<Outcome, ProposeError>>")]
pub struct Submit {
    /// The client's request id (the entry carries it: a retry applies once).
    pub request: ClientRequestId,
    /// The job.
    pub spec: hetsched_common::JobSpec,
}

impl Handler<Submit> for LeaderDuties {
    type Result = MessageResult<Submit>;

    fn handle(&mut self, m: Submit, ctx: &mut Self::Context) -> Self::Result {
        let now = self.now();
        let s = {
            let view = self.shared.read_state();
            self.core.submission(m.spec, now, &view)
        };
        tracing::debug!(target: "hetsched::trace", request = m.request.0, planned = s.slot.is_some(), "submit: proposing");
        let bytes = CommandEnvelope {
            at_ms: now.wall_ms,
            request: Some(m.request),
            command: s.command,
        }
        .encode();
        let (answer, rx) = tokio::sync::oneshot::channel();
        let (raft, me) = (self.raft.clone(), ctx.address());
        // The proposal is the duties' own: it runs to its end whether or not the client
        // still waits, and its end frees the plan slot the placements hold.
        tokio::spawn(async move {
            let started = Instant::now();
            let r = raft.propose(bytes).await;
            if r.is_ok() {
                metrics::histogram!("hetsched_master_raft_commit_seconds")
                    .record(started.elapsed());
            }
            if let Some(tag) = s.slot {
                me.do_send(DutiesMsg::Proposed { tag, ok: r.is_ok() });
            }
            let _ = answer.send(r);
        });
        MessageResult(rx)
    }
}

/// S0.4: an idle slave asks the leader for work (answered at once; a stolen task arrives
/// as an ordinary assignment).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StealRequest {
    /// The thief.
    pub thief: NodeId,
}

/// A deliberate bug for chaos tests (issue 51): plan with (`true`) or without the dependency
/// gate (`BugSpec::skip_dependency_gate`, switched through the admin port's hooks).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetDependencyGate(pub bool);

impl Handler<SetDependencyGate> for LeaderDuties {
    type Result = ();

    fn handle(&mut self, m: SetDependencyGate, _ctx: &mut Self::Context) {
        self.core.set_dependency_gate(m.0);
    }
}

impl Handler<StealRequest> for LeaderDuties {
    type Result = ();

    fn handle(&mut self, m: StealRequest, ctx: &mut Self::Context) {
        self.feed(DutyEvent::StealRequest { thief: m.thief }, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::TaskId;
    use hetsched_master_core::state::TaskRef;

    #[test]
    fn messages_become_the_cores_events() {
        let st = |role| RaftStatus {
            id: 1,
            leader: Some(1),
            term: 2,
            role,
            commit_index: 0,
            applied_index: 0,
        };
        assert_eq!(
            event(DutiesMsg::Raft(st(Role::Leader))),
            DutyEvent::Leadership(true)
        );
        assert_eq!(
            event(DutiesMsg::Raft(st(Role::Candidate))),
            DutyEvent::Leadership(false)
        );
        let d = DispatchResult {
            node: NodeId(3),
            tasks: vec![(TaskId(4), 1)],
            ok: false,
        };
        assert_eq!(
            event(DutiesMsg::Delivered(d)),
            DutyEvent::DeliveredBatch {
                node: NodeId(3),
                tasks: vec![(TaskId(4), 1)],
                ok: false
            }
        );
        let applied = Applied {
            index: 7,
            outcome: Outcome::TaskUpdated,
            touched: vec![NodeId(3)],
        };
        assert_eq!(
            event(DutiesMsg::Applied(applied)),
            DutyEvent::Applied {
                index: 7,
                outcome: Outcome::TaskUpdated,
                touched: vec![NodeId(3)]
            }
        );
    }

    #[test]
    fn the_leader_counts_the_ends_it_decided() {
        let stop = TaskRef {
            task: TaskId(1),
            node: NodeId(1),
            attempt: 1,
        };
        let cancelled = Outcome::Cancelled {
            job: hetsched_common::JobId(1),
            tasks: 3,
            stop: Vec::new(),
        };
        assert_eq!(
            ended_by_leader(&cancelled),
            Some((3, "cancelled", "cancelled"))
        );
        let timed_out = |retried| Outcome::TimedOut { stop, retried };
        assert_eq!(
            ended_by_leader(&timed_out(false)),
            Some((1, "failed", "timeout"))
        );
        assert_eq!(
            ended_by_leader(&timed_out(true)),
            None,
            "re-run: not an end"
        );
        assert_eq!(ended_by_leader(&Outcome::TaskUpdated), None);
    }
}
