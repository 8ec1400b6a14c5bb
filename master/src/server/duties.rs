//! `LeaderDuties` — the actor that does what only the leader does: track slave liveness from
//! heartbeats (not logged; only up/down transitions are), run the scheduling loop (one plan
//! in flight at a time), dispatch committed assignments to slaves until they acknowledge, and
//! reconcile every slave's report of what it holds.
//!
//! A new leader counts a node's silence from max(its last heartbeat, the moment this master
//! became leader), so a failover alone never declares healthy nodes lost.

use super::pool::SlavePool;
use super::replicated::{Applied, Replicated};
use super::{now_ms, MasterShared};
use crate::sched::Scheduler;
use crate::state::{Command, CommandEnvelope, Outcome, TaskRef};
use actix::prelude::*;
use hetsched_common::protocol::{
    Assignment, ErrorKind, ErrorReply, HeldPhase, HeldTask, Message, SlaveCommand,
    SlaveCommandReply,
};
use hetsched_common::{Attempt, MasterId, NodeId, TaskId, TaskState};
use hetsched_consensus::{Consensus, RaftStatus, Role};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Timing knobs of the leader duties.
#[derive(Clone, Copy, Debug)]
pub struct DutyTiming {
    /// How often the loop runs.
    pub tick: Duration,
    /// Silence after which a node is declared down.
    pub node_timeout: Duration,
    /// How long to wait for a slave's answer to a dispatch before trying again.
    pub dispatch_timeout: Duration,
    /// How long a started task may be missing from its slave's reports before it is lost.
    pub lost_after: Duration,
}

impl Default for DutyTiming {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            node_timeout: Duration::from_secs(5),
            dispatch_timeout: Duration::from_secs(3),
            lost_after: Duration::from_secs(3),
        }
    }
}

/// Dispatch bookkeeping of one (task, attempt).
#[derive(Debug)]
struct Dispatch {
    node: NodeId,
    in_flight: bool,
    last_sent: Option<Instant>,
}

/// The leader-only actor.
pub struct LeaderDuties {
    shared: MasterShared,
    raft: Consensus<Replicated>,
    scheduler: Box<dyn Scheduler>,
    timing: DutyTiming,
    pool: SlavePool,
    leader: bool,
    /// The leader's barrier has applied: its state holds every earlier committed entry.
    caught_up: bool,
    /// Bumped on every leadership change, so a late barrier of an old term is ignored.
    epoch: u64,
    leader_since: Instant,
    last_seen: HashMap<NodeId, Instant>,
    undelivered: BTreeMap<(TaskId, Attempt), Dispatch>,
    /// Started tasks missing from their slave's reports, since when.
    missing_since: HashMap<(TaskId, Attempt), Instant>,
    plan_in_flight: bool,
    /// Nodes the plan in flight used tentatively (re-read once it finishes).
    plan_nodes: Vec<NodeId>,
    /// Transitions proposed and not yet applied, so each is proposed once.
    proposing: BTreeSet<(NodeId, bool)>,
    lost_proposed: BTreeSet<(TaskId, Attempt)>,
}

impl LeaderDuties {
    /// A new duties actor (not yet started).
    pub fn new(
        shared: MasterShared,
        raft: Consensus<Replicated>,
        scheduler: Box<dyn Scheduler>,
        timing: DutyTiming,
    ) -> Self {
        Self {
            shared,
            raft,
            scheduler,
            timing,
            pool: SlavePool::default(),
            leader: false,
            caught_up: false,
            epoch: 0,
            leader_since: Instant::now(),
            last_seen: HashMap::new(),
            undelivered: BTreeMap::new(),
            missing_since: HashMap::new(),
            plan_in_flight: false,
            plan_nodes: Vec::new(),
            proposing: BTreeSet::new(),
            lost_proposed: BTreeSet::new(),
        }
    }

    fn propose_bg<F>(&self, ctx: &mut Context<Self>, command: Command, done: F)
    where
        F: FnOnce(Result<Outcome, String>) -> Option<DutyEvent> + Send + 'static,
    {
        let raft = self.raft.clone();
        let addr = ctx.address();
        let bytes = CommandEnvelope {
            at_ms: now_ms(),
            request: None,
            command,
        }
        .encode();
        tokio::spawn(async move {
            let r = raft.propose(bytes).await.map_err(|e| e.to_string());
            if let Some(ev) = done(r) {
                addr.do_send(ev);
            }
        });
    }

    /// Leadership gained: before acting, make sure the applied state holds everything
    /// committed before this term (a new leader may still be replaying its log).
    fn became_leader(&mut self, ctx: &mut Context<Self>) {
        self.leader = true;
        self.caught_up = false;
        self.epoch += 1;
        self.leader_since = Instant::now();
        let epoch = self.epoch;
        let master = self.shared.id.0;
        self.propose_bg(ctx, Command::LeaderBarrier { master }, move |r| {
            Some(DutyEvent::BarrierDone {
                epoch,
                ok: r.is_ok(),
            })
        });
    }

    fn resume_duties(&mut self) {
        self.caught_up = true;
        self.scheduler.reset(&self.shared.read_state());
        // Silence is counted from here: heartbeats were turned away while catching up.
        self.leader_since = Instant::now();
        self.last_seen.clear();
        self.missing_since.clear();
        self.proposing.clear();
        self.lost_proposed.clear();
        self.plan_in_flight = false;
        // Every assignment the log says is not yet started may not have reached its slave:
        // send it again (slaves acknowledge duplicates without running twice).
        self.undelivered.clear();
        let s = self.shared.read_state();
        for t in s.tasks.values() {
            if t.status.state == TaskState::Assigned {
                if let Some(node) = t.status.node {
                    self.undelivered.insert(
                        (t.id, t.status.attempt),
                        Dispatch {
                            node,
                            in_flight: false,
                            last_sent: None,
                        },
                    );
                }
            }
        }
        tracing::info!(
            undelivered = self.undelivered.len(),
            "became leader; resuming duties"
        );
    }

    fn check_liveness(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let down: Vec<NodeId> = {
            let s = self.shared.read_state();
            s.nodes
                .values()
                .filter(|n| n.is_up())
                .filter(|n| {
                    let since = self
                        .last_seen
                        .get(&n.id)
                        .copied()
                        .map_or(self.leader_since, |t| t.max(self.leader_since));
                    now.duration_since(since) > self.timing.node_timeout
                })
                .map(|n| n.id)
                .collect()
        };
        for node in down {
            if !self.proposing.insert((node, false)) {
                continue;
            }
            tracing::warn!(%node, "no heartbeat within the timeout; declaring the node down");
            self.propose_bg(ctx, Command::NodeDown { node }, move |_| {
                Some(DutyEvent::TransitionDone { node, up: false })
            });
        }
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if self.plan_in_flight {
            return;
        }
        let plan = {
            let s = self.shared.read_state();
            if s.pending.is_empty() {
                return;
            }
            self.scheduler.plan(&s)
        };
        if plan.is_empty() {
            return;
        }
        self.plan_in_flight = true;
        self.plan_nodes = plan.assignments.iter().map(|a| a.node).collect();
        let n = plan.assignments.len();
        self.propose_bg(ctx, Command::ApplyPlan(plan), move |r| {
            if let Err(e) = &r {
                tracing::debug!(error = %e, assignments = n, "plan not applied");
            }
            Some(DutyEvent::PlanDone)
        });
    }

    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let s = self.shared.read_state();
        let mut gone = Vec::new();
        for ((task, attempt), d) in self.undelivered.iter_mut() {
            if d.in_flight
                || d.last_sent
                    .is_some_and(|t| now.duration_since(t) < Duration::from_millis(500))
            {
                continue;
            }
            let Some(t) = s.tasks.get(task) else {
                gone.push((*task, *attempt));
                continue;
            };
            // Only an assignment the log still holds is worth sending.
            if t.status.state != TaskState::Assigned || t.status.attempt != *attempt {
                gone.push((*task, *attempt));
                continue;
            }
            let (Some(job), Some(node)) = (s.jobs.get(&t.job), s.nodes.get(&d.node)) else {
                gone.push((*task, *attempt));
                continue;
            };
            let a = Assignment {
                task: *task,
                job: t.job,
                index: t.index,
                attempt: *attempt,
                command: job.spec.command.clone(),
                env: job.spec.env.clone(),
                resources: job.spec.resources.clone(),
                gpus: t.gpus.clone(),
            };
            d.in_flight = true;
            d.last_sent = Some(now);
            let pool = self.pool.clone();
            let addr = node.addr.clone();
            let me = ctx.address();
            let (task, attempt, timeout) = (*task, *attempt, self.timing.dispatch_timeout);
            tokio::spawn(async move {
                let r = pool
                    .call(&addr, Message::ToSlave(SlaveCommand::Assign(a)), timeout)
                    .await;
                let ok = matches!(r, Ok(Message::ToSlaveReply(SlaveCommandReply::Accepted)));
                if !ok {
                    tracing::debug!(%task, attempt, %addr, reply = ?r, "dispatch not acknowledged; will retry");
                }
                me.do_send(DutyEvent::Delivered { task, attempt, ok });
            });
        }
        drop(s);
        for k in gone {
            self.undelivered.remove(&k);
        }
    }

    fn stop_tasks(&self, stops: Vec<TaskRef>) {
        let s = self.shared.read_state();
        for r in stops {
            let Some(addr) = s.nodes.get(&r.node).map(|n| n.addr.clone()) else {
                continue;
            };
            let pool = self.pool.clone();
            let timeout = self.timing.dispatch_timeout;
            tokio::spawn(async move {
                let msg = Message::ToSlave(SlaveCommand::StopTask {
                    task: r.task,
                    attempt: r.attempt,
                });
                if let Err(e) = pool.call(&addr, msg, timeout).await {
                    tracing::debug!(task = %r.task, error = %e, "stop not delivered; reconciliation will retry");
                }
            });
        }
    }

    /// Compares a slave's report with the log: stops attempts the log no longer gives it,
    /// re-sends assignments it lacks, and declares started tasks lost once they have been
    /// missing for a while (a single report may predate a start).
    fn reconcile(&mut self, ctx: &mut Context<Self>, node: NodeId, held: &[HeldTask]) {
        let now = Instant::now();
        let mut stops = Vec::new();
        let mut lost = Vec::new();
        {
            let s = self.shared.read_state();
            let held_keys: BTreeSet<(TaskId, Attempt)> =
                held.iter().map(|h| (h.task, h.attempt)).collect();
            for h in held {
                let current = s.tasks.get(&h.task).is_some_and(|t| {
                    t.status.node == Some(node)
                        && t.status.attempt == h.attempt
                        && !t.status.state.is_final()
                });
                if current {
                    self.undelivered.remove(&(h.task, h.attempt));
                } else if !matches!(h.phase, HeldPhase::Finished { .. }) {
                    stops.push(TaskRef {
                        task: h.task,
                        node,
                        attempt: h.attempt,
                    });
                }
            }
            if let Some(n) = s.nodes.get(&node) {
                for tid in &n.tasks {
                    let Some(t) = s.tasks.get(tid) else { continue };
                    let key = (t.id, t.status.attempt);
                    if held_keys.contains(&key) {
                        self.missing_since.remove(&key);
                        continue;
                    }
                    match t.status.state {
                        TaskState::Assigned => {
                            self.undelivered.entry(key).or_insert(Dispatch {
                                node,
                                in_flight: false,
                                last_sent: None,
                            });
                        }
                        TaskState::Running => {
                            let since = *self.missing_since.entry(key).or_insert(now);
                            if now.duration_since(since) > self.timing.lost_after
                                && self.lost_proposed.insert(key)
                            {
                                lost.push(key);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        self.stop_tasks(stops);
        for (task, attempt) in lost {
            tracing::warn!(%task, attempt, %node, "slave no longer holds a started task; re-queueing it");
            self.propose_bg(
                ctx,
                Command::TaskLost {
                    node,
                    task,
                    attempt,
                },
                |_| None,
            );
        }
    }
}

impl Actor for LeaderDuties {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.timing.tick, |act, ctx| {
            if !act.leader || !act.caught_up {
                return;
            }
            act.check_liveness(ctx);
            act.schedule(ctx);
            act.dispatch(ctx);
        });
    }
}

/// Events the duties actor reacts to.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum DutyEvent {
    /// Raft status changed.
    Raft(RaftStatus),
    /// An entry was applied.
    Applied(Applied),
    /// A plan proposal finished (applied or failed).
    PlanDone,
    /// The leader barrier of leadership `epoch` finished.
    BarrierDone {
        /// Leadership epoch it belongs to.
        epoch: u64,
        /// Whether it applied.
        ok: bool,
    },
    /// A liveness transition proposal finished.
    TransitionDone {
        /// Node.
        node: NodeId,
        /// Up (true) or down.
        up: bool,
    },
    /// A dispatch attempt finished.
    Delivered {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Whether the slave accepted it.
        ok: bool,
    },
}

impl Handler<DutyEvent> for LeaderDuties {
    type Result = ();

    fn handle(&mut self, ev: DutyEvent, ctx: &mut Self::Context) {
        match ev {
            DutyEvent::Raft(st) => {
                let is_leader = st.role == Role::Leader;
                if is_leader && !self.leader {
                    self.became_leader(ctx);
                } else if !is_leader && self.leader {
                    tracing::info!(leader = ?st.leader, "no longer leader");
                    self.leader = false;
                    self.caught_up = false;
                    self.epoch += 1;
                    self.undelivered.clear();
                }
            }
            DutyEvent::BarrierDone { epoch, ok } => {
                if epoch != self.epoch || !self.leader {
                    return;
                }
                if ok {
                    self.resume_duties();
                } else {
                    // Still leader but the barrier did not apply (dropped): try again.
                    self.leader = false;
                    let st = self.raft.status();
                    if st.role == Role::Leader {
                        self.became_leader(ctx);
                    }
                }
            }
            DutyEvent::Applied(a) => {
                if !self.leader || !self.caught_up {
                    return;
                }
                if a.index == 0 {
                    self.scheduler.reset(&self.shared.read_state());
                } else if !a.touched.is_empty() {
                    self.scheduler
                        .nodes_changed(&self.shared.read_state(), &a.touched);
                }
                match a.outcome {
                    Outcome::PlanApplied { accepted, .. } => {
                        for r in accepted {
                            self.undelivered.insert(
                                (r.task, r.attempt),
                                Dispatch {
                                    node: r.node,
                                    in_flight: false,
                                    last_sent: None,
                                },
                            );
                        }
                        self.dispatch(ctx);
                    }
                    Outcome::Cancelled { stop, .. } => self.stop_tasks(stop),
                    _ => {}
                }
            }
            DutyEvent::PlanDone => {
                self.plan_in_flight = false;
                let nodes = std::mem::take(&mut self.plan_nodes);
                if self.leader && self.caught_up {
                    self.scheduler
                        .nodes_changed(&self.shared.read_state(), &nodes);
                }
                if self.leader {
                    self.schedule(ctx);
                }
            }
            DutyEvent::TransitionDone { node, up } => {
                self.proposing.remove(&(node, up));
            }
            DutyEvent::Delivered { task, attempt, ok } => {
                if ok {
                    self.undelivered.remove(&(task, attempt));
                } else if let Some(d) = self.undelivered.get_mut(&(task, attempt)) {
                    d.in_flight = false;
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
}

impl Handler<Heartbeat> for LeaderDuties {
    type Result = Result<MasterId, ErrorReply>;

    fn handle(&mut self, hb: Heartbeat, ctx: &mut Self::Context) -> Self::Result {
        if !self.leader {
            return Err(self.shared.not_leader(self.raft.status().leader));
        }
        if !self.caught_up {
            return Err(ErrorReply::new(
                ErrorKind::Unavailable,
                "new leader is catching up with its log; retry shortly",
            ));
        }
        let up = {
            let s = self.shared.read_state();
            match s.nodes.get(&hb.node) {
                Some(n) => n.is_up(),
                None => {
                    return Err(ErrorReply::new(
                        ErrorKind::UnknownNode,
                        format!("{} is not registered", hb.node),
                    ))
                }
            }
        };
        self.last_seen.insert(hb.node, Instant::now());
        if !up && self.proposing.insert((hb.node, true)) {
            let node = hb.node;
            tracing::info!(%node, "heard from a down node; marking it up");
            self.propose_bg(ctx, Command::NodeUp { node }, move |_| {
                Some(DutyEvent::TransitionDone { node, up: true })
            });
        }
        self.reconcile(ctx, hb.node, &hb.held);
        Ok(self.shared.id)
    }
}
