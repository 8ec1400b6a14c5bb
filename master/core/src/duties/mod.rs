//! `DutiesCore` — what only the leader does, as a pure engine (openraft's shape): one ordered
//! stream of [`DutyEvent`]s in, a list of [`Effect`]s out. No sockets, no clock, no tasks:
//! the executor actor (`server::duties`) feeds it events with the time, reads the applied
//! state for it, and carries out the effects.
//!
//! ```text
//!   applied entries ─┐                        ┌─▶ Propose(command)       ─▶ Raft
//!   role changes    ─┤                        ├─▶ Dispatch(assignment)   ─▶ slave sender
//!   heartbeats      ─┼─▶ DutiesCore::on(ev) ──┼─▶ Stop(task, attempt)    ─▶ slave sender
//!   proposal results─┤      (pure)            ├─▶ Release(task, attempt) ─▶ victim's sender
//!   slave replies   ─┤                        └─▶ (nothing)
//!   steal requests  ─┤
//!   ticks           ─┘
//! ```
//!
//! Work stealing (S0.4): a `StealRequest` from an idle slave picks a victim
//! (`sched::steal`, pure) and emits `Release`; the victim's `Released` answer (true only if
//! the attempt had not started) becomes a `StealTask` proposal; its `Stolen` outcome is
//! dispatched to the thief like a placement. While a steal is under way the task is left
//! out of reconciliation, so the victim is never sent the attempt it just dropped; a steal
//! that does not commit leaves the task queued on the victim in the log, and
//! reconciliation then sends it back there.
//!
//! Duties: liveness from heartbeats (only up/down transitions are logged); the scheduling
//! loop with one plan in flight; dispatch of committed assignments until the slave
//! acknowledges, with per-assignment back-off so a dead slave delays only its own work;
//! reconciliation of each slave's report of what it holds against the log; garbage
//! collection of finished jobs and old client request outcomes (CONTRACT.md, Retention).
//!
//! A new leader proposes a barrier entry before acting (its applied state then holds every
//! entry committed before its term) and counts node silence from the moment it took over,
//! so a failover alone never declares healthy nodes lost.

use crate::sched::Scheduler;
use crate::state::{ClusterState, Command, Outcome, TaskRef};
use hetsched_common::protocol::{Assignment, HeldPhase, HeldTask};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::{BTreeMap, BTreeSet};

mod cpus;
#[cfg(test)]
mod tests;

/// Most assignments in one [`Effect::DispatchBatch`]: keeps a message well under the frame
/// cap even when a new leader re-sends a whole backlog.
pub const MAX_ASSIGNMENTS_PER_MESSAGE: usize = 1024;

/// The time as the executor reads it: a monotonic clock for timers (immune to wall-clock
/// jumps) and the wall clock for what is compared with the log's timestamps (retention).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds (any origin).
    pub mono_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub wall_ms: u64,
}

/// Timing and retention knobs of the leader duties.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DutiesConfig {
    /// Silence after which a node is declared down.
    pub node_timeout_ms: u64,
    /// How long a dispatch may stay unanswered before it counts as failed.
    pub dispatch_timeout_ms: u64,
    /// First retry delay of a failed dispatch; doubles per failure up to `retry_max_ms`.
    pub retry_min_ms: u64,
    /// Largest retry delay of a dispatch.
    pub retry_max_ms: u64,
    /// How long a started task may be missing from its slave's reports before it is lost.
    pub lost_after_ms: u64,
    /// Finished jobs are collected this long after they finished (`None`: never).
    pub job_gc_after_ms: Option<u64>,
    /// Client request outcomes are kept this long (at least the client retry window).
    pub request_retention_ms: u64,
    /// How often garbage collection looks for work.
    pub gc_period_ms: u64,
    /// Time a preempted task gets between SIGTERM and SIGKILL (`--preempt-grace`).
    pub preempt_grace_ms: u64,
    /// S3.2: how long each CPU count of a GPU task's search is measured (`--probe-period`).
    pub probe_period_ms: u64,
    /// S3.2: utilisation must improve by more than this many points for a step to count
    /// (`--util-epsilon`).
    pub util_epsilon: f64,
}

impl Default for DutiesConfig {
    fn default() -> Self {
        Self {
            node_timeout_ms: 5_000,
            dispatch_timeout_ms: 3_000,
            retry_min_ms: 200,
            retry_max_ms: 5_000,
            lost_after_ms: 3_000,
            job_gc_after_ms: Some(3_600_000),
            request_retention_ms: 600_000,
            gc_period_ms: 1_000,
            preempt_grace_ms: 10_000,
            probe_period_ms: 90_000,
            util_epsilon: 1.0,
        }
    }
}

/// Why a proposal was made: its result is routed back to the duty that asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProposalTag {
    /// The leadership barrier of leadership `epoch`.
    Barrier {
        /// Leadership it belongs to.
        epoch: u64,
    },
    /// The one plan in flight.
    Plan {
        /// Leadership it belongs to.
        epoch: u64,
    },
    /// A liveness transition.
    Liveness {
        /// Node.
        node: NodeId,
        /// Up (true) or down.
        up: bool,
    },
    /// A started task its slave no longer holds.
    Lost {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// Garbage collection.
    Gc,
    /// A deadline that passed: a drain's (re-queue what still runs) or an attempt's timeout.
    Deadline(DeadlineKey),
    /// A CPU-count search's change or record (S3.2).
    CpuSearch {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
    },
    /// S0.4: moving a released queued task to its thief.
    Steal {
        /// Task.
        task: TaskId,
    },
}

/// What a deadline proposal is about, so that each is proposed once while in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeadlineKey {
    /// A draining node's deadline.
    Drain(NodeId),
    /// An attempt's timeout.
    Timeout(TaskId, Attempt),
}

/// Everything the duties react to, in the one order the executor delivers them.
#[derive(Clone, Debug, PartialEq)]
pub enum DutyEvent {
    /// This master became leader (true) or stopped being leader (false).
    Leadership(bool),
    /// An entry was applied; `index` 0 means a snapshot was restored.
    Applied {
        /// Log index.
        index: u64,
        /// What applying it returned.
        outcome: Outcome,
        /// Nodes whose free resources or liveness may have changed.
        touched: Vec<NodeId>,
    },
    /// A proposal made through [`Effect::Propose`] finished.
    Proposed {
        /// Its tag.
        tag: ProposalTag,
        /// Whether it applied.
        ok: bool,
    },
    /// A slave's heartbeat with what it holds (accepted by [`DutiesCore::heartbeat_verdict`]).
    Heartbeat {
        /// Node.
        node: NodeId,
        /// What it holds.
        held: Vec<HeldTask>,
    },
    /// A slave answered a dispatch (ok) or the send failed or timed out (not ok).
    Delivered {
        /// Node it was sent to.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Whether the slave accepted it.
        ok: bool,
    },
    /// Time passed.
    Tick,
    /// A slave's probe samples (they come with its heartbeats; S3.2).
    Samples {
        /// Node.
        node: NodeId,
        /// The samples, oldest first.
        samples: Vec<hetsched_common::protocol::ProbeSample>,
    },
    /// A slave answered a batch dispatch (ok) or the send failed or timed out (not ok):
    /// as [`DutyEvent::Delivered`] for each of `tasks`.
    DeliveredBatch {
        /// Node it was sent to.
        node: NodeId,
        /// The attempts it carried.
        tasks: Vec<(TaskId, Attempt)>,
        /// Whether the slave accepted them.
        ok: bool,
    },
    /// S0.4: a slave with an empty queue and free resources asks for work.
    StealRequest {
        /// The thief.
        thief: NodeId,
    },
    /// S0.4: the victim answered [`Effect::Release`] (`released`: it dropped the queued
    /// attempt; false: it had started it, or the message failed).
    Released {
        /// The task.
        task: TaskId,
        /// The attempt asked for.
        attempt: Attempt,
        /// The victim.
        from: NodeId,
        /// The thief.
        to: NodeId,
        /// Whether the victim released it.
        released: bool,
    },
}

/// What the executor must do.
// Effects live for one event; boxing the proposed command would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Propose a command; report the result as [`DutyEvent::Proposed`] with `tag`.
    Propose {
        /// Routes the result back.
        tag: ProposalTag,
        /// The command.
        command: Command,
    },
    /// Tell a slave to stop an attempt (fire and forget: reconciliation repeats it).
    Stop {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Time between SIGTERM and SIGKILL (`None`: the slave's default).
        grace_ms: Option<u64>,
    },
    /// S0.4: ask the victim to release a queued attempt; report the answer as
    /// [`DutyEvent::Released`].
    Release {
        /// The victim.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The thief (carried back in the answer).
        to: NodeId,
    },
    /// Send all of one slave's due assignments in one message; report the answer as
    /// [`DutyEvent::DeliveredBatch`]. The core emits at most one per slave per event.
    DispatchBatch {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// The work, in task order.
        assignments: Vec<Assignment>,
    },
    /// Tell a slave to change a running attempt's CPUs live (fire and forget: sent again
    /// while its samples show another count).
    SetCpus {
        /// Node.
        node: NodeId,
        /// Its address.
        addr: String,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// New allocation, millicores.
        cpu_milli: u64,
    },
}

/// How a heartbeat is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatVerdict {
    /// Accepted: feed it as [`DutyEvent::Heartbeat`].
    Accept,
    /// This master does not lead.
    NotLeader,
    /// Leader, still applying its barrier: retry shortly.
    CatchingUp,
    /// The node is not registered: the slave should register again.
    UnknownNode,
}

/// Where one committed assignment is on its way to its slave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DispatchState {
    /// To be sent at or after `at`.
    Due { at: u64 },
    /// Sent at `since`, no answer yet.
    InFlight { since: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dispatch {
    node: NodeId,
    state: DispatchState,
    failures: u32,
}

/// The one plan in flight, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PlanSlot {
    Idle,
    /// Proposed; these nodes were used tentatively by the scheduler and are re-read from
    /// the state once the plan finishes either way.
    InFlight {
        nodes: Vec<NodeId>,
    },
}

/// What a leader keeps between events.
#[derive(Debug)]
struct Leading {
    epoch: u64,
    /// Silence is counted from here at the earliest.
    since: u64,
    last_seen: BTreeMap<NodeId, u64>,
    undelivered: BTreeMap<(TaskId, Attempt), Dispatch>,
    /// Started tasks missing from their slave's reports, since when.
    missing_since: BTreeMap<(TaskId, Attempt), u64>,
    plan: PlanSlot,
    /// Something changed since the scheduler last found nothing to place (an entry applied,
    /// a plan finished, leadership resumed): only then is the queue worth another look, so
    /// an idle or full cluster costs no scan per tick.
    sched_dirty: bool,
    /// Time alone can make a placement possible (a retry back-off ends): the queue is
    /// looked at again at least this often, changes or not.
    next_rescan: u64,
    /// Liveness transitions proposed and not finished, so each is proposed once.
    transitions: BTreeSet<(NodeId, bool)>,
    lost_proposed: BTreeSet<(TaskId, Attempt)>,
    gc_in_flight: bool,
    next_gc: u64,
    /// Deadline proposals in flight.
    deadlines: BTreeSet<DeadlineKey>,
    /// S3.2 CPU-count searches of running GPU tasks.
    searches: BTreeMap<(TaskId, Attempt), cpus::SearchRun>,
    /// S0.4 steals under way (release asked, or the move proposed): task → (victim, thief,
    /// attempt, whether the victim released it). A task here is not re-sent to its victim
    /// by reconciliation: the victim may just have dropped it on purpose.
    steals: BTreeMap<TaskId, StealInFlight>,
}

/// One steal under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StealInFlight {
    from: NodeId,
    to: NodeId,
    attempt: Attempt,
    released: bool,
}

/// The duties' role. One enum, so no combination of flags can be inconsistent.
#[derive(Debug)]
enum Role {
    /// Not the leader: does nothing but wait.
    Follower,
    /// Leader whose barrier (of `epoch`) has not applied yet; a dropped barrier is
    /// proposed again at `retry_at` (not at once: a deposed leader would spin).
    CatchingUp { epoch: u64, retry_at: Option<u64> },
    /// Leader with everything committed before its term applied.
    Leading(Box<Leading>),
}

/// The leader duties as a pure engine.
pub struct DutiesCore {
    cfg: DutiesConfig,
    scheduler: Box<dyn Scheduler>,
    role: Role,
    /// Bumped on every leadership gain, so late results of an older leadership are ignored.
    epoch: u64,
    /// The master's own id (stamped into its barrier).
    master: u64,
}

impl std::fmt::Debug for DutiesCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DutiesCore")
            .field("cfg", &self.cfg)
            .field("role", &self.role)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl DutiesCore {
    /// A core for master `master`, following until told it leads.
    pub fn new(master: u64, cfg: DutiesConfig, scheduler: Box<dyn Scheduler>) -> Self {
        Self {
            cfg,
            scheduler,
            role: Role::Follower,
            epoch: 0,
            master,
        }
    }

    /// Whether this core leads with its barrier applied.
    pub fn is_leading(&self) -> bool {
        matches!(self.role, Role::Leading(_))
    }

    /// Assignments committed and not yet acknowledged by their slaves.
    pub fn undelivered(&self) -> usize {
        match &self.role {
            Role::Leading(l) => l.undelivered.len(),
            _ => 0,
        }
    }

    /// How a heartbeat of `node` is answered, given the applied state.
    pub fn heartbeat_verdict(&self, node: NodeId, view: &ClusterState) -> HeartbeatVerdict {
        match &self.role {
            Role::Follower => HeartbeatVerdict::NotLeader,
            Role::CatchingUp { .. } => HeartbeatVerdict::CatchingUp,
            Role::Leading(_) if view.nodes().contains_key(&node) => HeartbeatVerdict::Accept,
            Role::Leading(_) => HeartbeatVerdict::UnknownNode,
        }
    }

    /// Handles one event at time `now` over the applied state `view`.
    pub fn on(&mut self, ev: DutyEvent, now: Now, view: &ClusterState) -> Vec<Effect> {
        let mut fx = Vec::new();
        match ev {
            DutyEvent::Leadership(true) => self.became_leader(&mut fx),
            DutyEvent::Leadership(false) => {
                if !matches!(self.role, Role::Follower) {
                    self.role = Role::Follower;
                }
            }
            DutyEvent::Proposed { tag, ok } => self.proposed(tag, ok, now, view, &mut fx),
            DutyEvent::Applied {
                index,
                outcome,
                touched,
            } => self.applied(index, outcome, &touched, now, view, &mut fx),
            DutyEvent::Heartbeat { node, held } => self.heartbeat(node, &held, now, view, &mut fx),
            DutyEvent::Delivered {
                node: _,
                task,
                attempt,
                ok,
            } => {
                self.delivered(&[(task, attempt)], ok, now);
                self.dispatch(now, view, &mut fx);
            }
            DutyEvent::Samples { node, samples } => {
                self.samples(node, &samples, now, view, &mut fx)
            }
            DutyEvent::DeliveredBatch { node: _, tasks, ok } => {
                self.delivered(&tasks, ok, now);
                self.dispatch(now, view, &mut fx);
            }
            DutyEvent::StealRequest { thief } => self.steal_request(thief, view, &mut fx),
            DutyEvent::Released {
                task,
                attempt,
                from,
                to,
                released,
            } => self.released(task, attempt, from, to, released, &mut fx),
            DutyEvent::Tick => {
                if let Role::CatchingUp {
                    epoch,
                    retry_at: Some(at),
                } = self.role
                {
                    if at <= now.mono_ms {
                        self.role = Role::CatchingUp {
                            epoch,
                            retry_at: None,
                        };
                        fx.push(Effect::Propose {
                            tag: ProposalTag::Barrier { epoch },
                            command: Command::LeaderBarrier {
                                master: self.master,
                            },
                        });
                    }
                }
                if let Role::Leading(l) = &mut self.role {
                    if now.mono_ms >= l.next_rescan {
                        l.next_rescan = now.mono_ms + RESCAN_MS;
                        l.sched_dirty = true;
                    }
                }
                self.check_liveness(now, view, &mut fx);
                self.check_deadlines(now, view, &mut fx);
                self.schedule(now, view, &mut fx);
                self.dispatch(now, view, &mut fx);
                self.collect_garbage(now, view, &mut fx);
            }
        }
        fx
    }

    /// Slaves answered dispatches: acknowledged ones are done, failed ones back off.
    fn delivered(&mut self, tasks: &[(TaskId, Attempt)], ok: bool, now: Now) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        for key in tasks {
            if ok {
                l.undelivered.remove(key);
            } else if let Some(d) = l.undelivered.get_mut(key) {
                d.failures += 1;
                d.state = DispatchState::Due {
                    at: now.mono_ms + backoff(&self.cfg, d.failures),
                };
            }
        }
    }

    fn became_leader(&mut self, fx: &mut Vec<Effect>) {
        if !matches!(self.role, Role::Follower) {
            return;
        }
        self.epoch += 1;
        self.role = Role::CatchingUp {
            epoch: self.epoch,
            retry_at: None,
        };
        fx.push(Effect::Propose {
            tag: ProposalTag::Barrier { epoch: self.epoch },
            command: Command::LeaderBarrier {
                master: self.master,
            },
        });
    }

    /// The barrier applied: the state holds everything committed before this term.
    fn resume(&mut self, now: Now, view: &ClusterState) {
        self.scheduler.reset(view);
        // Every assignment the log says is not yet started may not have reached its slave:
        // send it again (slaves acknowledge duplicates without running twice).
        let undelivered = view
            .tasks()
            .values()
            .filter(|t| t.status.state == TaskState::Assigned)
            .filter_map(|t| {
                t.status.node.map(|node| {
                    (
                        (t.id, t.status.attempt),
                        Dispatch {
                            node,
                            state: DispatchState::Due { at: 0 },
                            failures: 0,
                        },
                    )
                })
            })
            .collect();
        self.role = Role::Leading(Box::new(Leading {
            epoch: self.epoch,
            since: now.mono_ms,
            last_seen: BTreeMap::new(),
            undelivered,
            missing_since: BTreeMap::new(),
            plan: PlanSlot::Idle,
            sched_dirty: true,
            next_rescan: now.mono_ms + RESCAN_MS,
            transitions: BTreeSet::new(),
            lost_proposed: BTreeSet::new(),
            gc_in_flight: false,
            next_gc: now.mono_ms + self.cfg.gc_period_ms,
            deadlines: BTreeSet::new(),
            searches: BTreeMap::new(),
            steals: BTreeMap::new(),
        }));
    }

    fn proposed(
        &mut self,
        tag: ProposalTag,
        ok: bool,
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        match tag {
            ProposalTag::Barrier { epoch } => {
                if !matches!(self.role, Role::CatchingUp { epoch: e, .. } if e == epoch) {
                    return;
                }
                if ok {
                    self.resume(now, view);
                    self.schedule(now, view, fx);
                    self.dispatch(now, view, fx);
                } else {
                    // Dropped (an election in between, or a deposed leader not told yet):
                    // try again shortly, unless leadership is lost meanwhile.
                    self.role = Role::CatchingUp {
                        epoch,
                        retry_at: Some(now.mono_ms + self.cfg.retry_min_ms),
                    };
                }
            }
            ProposalTag::Plan { epoch } => {
                let Role::Leading(l) = &mut self.role else {
                    return;
                };
                if l.epoch != epoch {
                    return;
                }
                if let PlanSlot::InFlight { nodes } = std::mem::replace(&mut l.plan, PlanSlot::Idle)
                {
                    self.scheduler.nodes_changed(view, &nodes);
                }
                l.sched_dirty = true;
                self.schedule(now, view, fx);
            }
            ProposalTag::Liveness { node, up } => {
                if let Role::Leading(l) = &mut self.role {
                    l.transitions.remove(&(node, up));
                }
            }
            ProposalTag::Lost { task, attempt } => {
                if let Role::Leading(l) = &mut self.role {
                    if !ok {
                        l.lost_proposed.remove(&(task, attempt));
                    }
                }
            }
            ProposalTag::Gc => {
                if let Role::Leading(l) = &mut self.role {
                    l.gc_in_flight = false;
                }
            }
            ProposalTag::Deadline(key) => {
                if let Role::Leading(l) = &mut self.role {
                    l.deadlines.remove(&key);
                }
            }
            ProposalTag::CpuSearch { task, attempt } => {
                if let Role::Leading(l) = &mut self.role {
                    if let Some(run) = l.searches.get_mut(&(task, attempt)) {
                        run.proposing = false;
                    }
                }
            }
            ProposalTag::Steal { task } => {
                let Role::Leading(l) = &mut self.role else {
                    return;
                };
                // Applied or not, the steal is over. Not applied: the log still queues the
                // attempt on the victim, which dropped it, so reconciliation (no longer held
                // back by the steal) sends it there again and it runs there, once.
                let _ = ok;
                l.steals.remove(&task);
            }
        }
    }

    /// S0.4: an idle slave asks for work: pick the victim and ask it to release the task.
    fn steal_request(&mut self, thief: NodeId, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        // One steal per thief at a time: its free resources are what the pick relied on.
        if l.steals.values().any(|s| s.to == thief) {
            return;
        }
        let busy: BTreeSet<TaskId> = l.steals.keys().copied().collect();
        let Some(pick) = crate::sched::steal::pick_victim(view, thief, &busy) else {
            return;
        };
        let Some(victim) = view.nodes().get(&pick.from) else {
            return;
        };
        l.steals.insert(
            pick.task,
            StealInFlight {
                from: pick.from,
                to: thief,
                attempt: pick.attempt,
                released: false,
            },
        );
        fx.push(Effect::Release {
            node: pick.from,
            addr: victim.addr.clone(),
            task: pick.task,
            attempt: pick.attempt,
            to: thief,
        });
    }

    /// S0.4: the victim answered: released ⇒ commit the move; refused ⇒ forget the steal.
    fn released(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        from: NodeId,
        to: NodeId,
        released: bool,
        fx: &mut Vec<Effect>,
    ) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        let Some(s) = l.steals.get_mut(&task) else {
            return;
        };
        if s.attempt != attempt || s.from != from || s.to != to {
            return;
        }
        if !released {
            l.steals.remove(&task);
            return;
        }
        s.released = true;
        fx.push(steal_command(task, *s));
    }

    fn applied(
        &mut self,
        index: u64,
        outcome: Outcome,
        touched: &[NodeId],
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        if !self.is_leading() {
            return;
        }
        if index == 0 {
            self.scheduler.reset(view);
        } else if !touched.is_empty() {
            self.scheduler.nodes_changed(view, touched);
        }
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        l.sched_dirty = true;
        let mut wake = false;
        match outcome {
            Outcome::PlanApplied {
                accepted,
                preempted,
                ..
            } => {
                stop_effects(&preempted, Some(self.cfg.preempt_grace_ms), view, fx);
                for r in accepted {
                    l.undelivered.insert(
                        (r.task, r.attempt),
                        Dispatch {
                            node: r.node,
                            state: DispatchState::Due { at: 0 },
                            failures: 0,
                        },
                    );
                }
                self.dispatch(now, view, fx);
            }
            Outcome::Cancelled { stop, .. } => stop_effects(&stop, None, view, fx),
            Outcome::Drained { requeued, .. } => {
                stop_effects(&requeued, None, view, fx);
                wake = true;
            }
            Outcome::TimedOut { stop, .. } => {
                stop_effects(&[stop], None, view, fx);
                wake = true;
            }
            Outcome::CpusSet { attempt, cpu_milli } => {
                cpus::set_cpus_effect(l, attempt, cpu_milli, now, view, fx);
                wake = true;
            }
            Outcome::Stolen { from, assigned } => {
                l.steals.remove(&from.task);
                match assigned {
                    Some(r) => {
                        l.undelivered.insert(
                            (r.task, r.attempt),
                            Dispatch {
                                node: r.node,
                                state: DispatchState::Due { at: 0 },
                                failures: 0,
                            },
                        );
                        self.dispatch(now, view, fx);
                    }
                    None => wake = true,
                }
            }
            // New work or freed resources can make a placement possible.
            Outcome::Submitted { .. }
            | Outcome::Registered { .. }
            | Outcome::NodeUp { .. }
            | Outcome::NodeDown { .. }
            | Outcome::TaskUpdated => wake = true,
            _ => {}
        }
        if wake {
            self.schedule(now, view, fx);
        }
    }

    fn check_liveness(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        for n in view.nodes().values().filter(|n| n.is_up()) {
            let since = l.last_seen.get(&n.id).copied().unwrap_or(0).max(l.since);
            if now.mono_ms.saturating_sub(since) > self.cfg.node_timeout_ms
                && l.transitions.insert((n.id, false))
            {
                fx.push(Effect::Propose {
                    tag: ProposalTag::Liveness {
                        node: n.id,
                        up: false,
                    },
                    command: Command::NodeDown { node: n.id },
                });
            }
        }
    }

    fn schedule(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        if l.plan != PlanSlot::Idle || view.pending().is_empty() || !l.sched_dirty {
            return;
        }
        // The leader's clock goes in: tasks waiting out a retry back-off stay queued.
        let plan = self.scheduler.plan_at(view, now.wall_ms);
        if plan.is_empty() {
            l.sched_dirty = false;
            return;
        }
        l.plan = PlanSlot::InFlight {
            nodes: plan.assignments.iter().map(|a| a.node).collect(),
        };
        fx.push(Effect::Propose {
            tag: ProposalTag::Plan { epoch: l.epoch },
            command: Command::ApplyPlan(plan),
        });
    }

    /// Sends every due assignment the log still holds, all of one slave's in one
    /// [`Effect::DispatchBatch`]; forgets those the log no longer holds.
    fn dispatch(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        let cfg = self.cfg;
        let mut gone = Vec::new();
        let mut batches: BTreeMap<NodeId, (String, Vec<Assignment>)> = BTreeMap::new();
        for (&(task, attempt), d) in l.undelivered.iter_mut() {
            match d.state {
                DispatchState::Due { at } if at <= now.mono_ms => {}
                // An answer that never came (the executor lost it): count it as a failure.
                DispatchState::InFlight { since }
                    if now.mono_ms.saturating_sub(since) > 2 * cfg.dispatch_timeout_ms =>
                {
                    d.failures += 1;
                }
                _ => continue,
            }
            let Some(t) = view.tasks().get(&task) else {
                gone.push((task, attempt));
                continue;
            };
            // Only an assignment the log still holds is worth sending.
            if t.status.state != TaskState::Assigned || t.status.attempt != attempt {
                gone.push((task, attempt));
                continue;
            }
            let (Some(job), Some(node)) = (view.jobs().get(&t.job), view.nodes().get(&d.node))
            else {
                gone.push((task, attempt));
                continue;
            };
            d.state = DispatchState::InFlight { since: now.mono_ms };
            batches
                .entry(d.node)
                .or_insert_with(|| (node.addr.clone(), Vec::new()))
                .1
                .push(Assignment {
                    task,
                    job: t.job,
                    index: t.index,
                    attempt,
                    command: job.spec.command.clone(),
                    env: job.spec.env.clone(),
                    resources: job.spec.resources.clone(),
                    gpus: t.gpus.clone(),
                });
        }
        for k in gone {
            l.undelivered.remove(&k);
        }
        for (node, (addr, assignments)) in batches {
            for chunk in assignments.chunks(MAX_ASSIGNMENTS_PER_MESSAGE) {
                fx.push(Effect::DispatchBatch {
                    node,
                    addr: addr.clone(),
                    assignments: chunk.to_vec(),
                });
            }
        }
    }

    /// Compares a slave's report with the log: stops attempts the log no longer gives it,
    /// re-sends assignments it lacks, and declares started tasks lost once they have been
    /// missing for a while (a single report may predate a start).
    fn heartbeat(
        &mut self,
        node: NodeId,
        held: &[HeldTask],
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        let Some(n) = view.nodes().get(&node) else {
            return;
        };
        l.last_seen.insert(node, now.mono_ms);
        if !n.is_up() && l.transitions.insert((node, true)) {
            fx.push(Effect::Propose {
                tag: ProposalTag::Liveness { node, up: true },
                command: Command::NodeUp { node },
            });
        }
        let mut stops = Vec::new();
        let held_keys: BTreeSet<(TaskId, Attempt)> =
            held.iter().map(|h| (h.task, h.attempt)).collect();
        for h in held {
            let current = view.tasks().get(&h.task).is_some_and(|t| {
                t.status.node == Some(node)
                    && t.status.attempt == h.attempt
                    && !t.status.state.is_final()
            });
            if current {
                l.undelivered.remove(&(h.task, h.attempt));
            } else if !matches!(h.phase, HeldPhase::Finished { .. }) {
                stops.push(TaskRef {
                    task: h.task,
                    node,
                    attempt: h.attempt,
                });
            }
        }
        for tid in n.tasks.iter().chain(n.queued.iter()) {
            let Some(t) = view.tasks().get(tid) else {
                continue;
            };
            let key = (t.id, t.status.attempt);
            // A task being stolen may have been released by this node on purpose.
            if l.steals.contains_key(tid) {
                continue;
            }
            if held_keys.contains(&key) {
                l.missing_since.remove(&key);
                continue;
            }
            match t.status.state {
                TaskState::Assigned => {
                    l.undelivered.entry(key).or_insert(Dispatch {
                        node,
                        state: DispatchState::Due { at: 0 },
                        failures: 0,
                    });
                }
                TaskState::Running => {
                    missing(l, &self.cfg, node, key, now, fx);
                }
                _ => {}
            }
        }
        // A preempted attempt still stopping keeps its grace; anything else the log no longer
        // gives the node is stopped at the slave's default.
        let grace = self.cfg.preempt_grace_ms;
        for r in stops {
            let preempted = n
                .stopping
                .iter()
                .any(|s| s.task == r.task && s.attempt == r.attempt);
            stop_effects(&[r], preempted.then_some(grace), view, fx);
        }
        // A stopping attempt its slave no longer holds ended unreported: release it.
        for st in &n.stopping {
            let key = (st.task, st.attempt);
            if held_keys.contains(&key) {
                l.missing_since.remove(&key);
                continue;
            }
            missing(l, &self.cfg, node, key, now, fx);
        }
        self.dispatch(now, view, fx);
    }

    /// Drains whose deadline passed and attempts past their job's timeout, each proposed
    /// once while in flight (apply fences them: a lifted drain or an ended attempt changes
    /// nothing).
    fn check_deadlines(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        for node in view.drains_due(now.wall_ms) {
            if l.deadlines.insert(DeadlineKey::Drain(node)) {
                fx.push(Effect::Propose {
                    tag: ProposalTag::Deadline(DeadlineKey::Drain(node)),
                    command: Command::RequeueDrained { node },
                });
            }
        }
        for r in view.timeouts_due(now.wall_ms) {
            let key = DeadlineKey::Timeout(r.task, r.attempt);
            if l.deadlines.insert(key) {
                fx.push(Effect::Propose {
                    tag: ProposalTag::Deadline(key),
                    command: Command::TimeoutTask {
                        node: r.node,
                        task: r.task,
                        attempt: r.attempt,
                    },
                });
            }
        }
    }

    fn collect_garbage(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        if l.gc_in_flight || now.mono_ms < l.next_gc {
            return;
        }
        l.next_gc = now.mono_ms + self.cfg.gc_period_ms;
        let jobs_before = self
            .cfg
            .job_gc_after_ms
            .map(|after| now.wall_ms.saturating_sub(after));
        let requests_before = Some(now.wall_ms.saturating_sub(self.cfg.request_retention_ms));
        if view.gc_due(jobs_before, requests_before) {
            l.gc_in_flight = true;
            fx.push(Effect::Propose {
                tag: ProposalTag::Gc,
                command: Command::GcJobs {
                    jobs_finished_before_ms: jobs_before,
                    requests_before_ms: requests_before,
                },
            });
        }
    }
}

/// The proposal that commits a released steal.
fn steal_command(task: TaskId, s: StealInFlight) -> Effect {
    Effect::Propose {
        tag: ProposalTag::Steal { task },
        command: Command::StealTask {
            task,
            attempt: s.attempt,
            from: s.from,
            to: s.to,
        },
    }
}

/// An attempt the log places on `node` is missing from its slave's report: once missing for
/// longer than `lost_after_ms`, propose it lost (once).
fn missing(
    l: &mut Leading,
    cfg: &DutiesConfig,
    node: NodeId,
    key: (TaskId, Attempt),
    now: Now,
    fx: &mut Vec<Effect>,
) {
    let since = *l.missing_since.entry(key).or_insert(now.mono_ms);
    if now.mono_ms.saturating_sub(since) > cfg.lost_after_ms && l.lost_proposed.insert(key) {
        fx.push(Effect::Propose {
            tag: ProposalTag::Lost {
                task: key.0,
                attempt: key.1,
            },
            command: Command::TaskLost {
                node,
                task: key.0,
                attempt: key.1,
            },
        });
    }
}

fn stop_effects(
    stops: &[TaskRef],
    grace_ms: Option<u64>,
    view: &ClusterState,
    fx: &mut Vec<Effect>,
) {
    for r in stops {
        if let Some(n) = view.nodes().get(&r.node) {
            fx.push(Effect::Stop {
                node: r.node,
                addr: n.addr.clone(),
                task: r.task,
                attempt: r.attempt,
                grace_ms,
            });
        }
    }
}

/// How often the queue is rescanned with nothing changed (retry back-offs end by time).
const RESCAN_MS: u64 = 1_000;

/// Retry delay after `failures` failed sends: doubling from the minimum, capped.
fn backoff(cfg: &DutiesConfig, failures: u32) -> u64 {
    let shift = failures.saturating_sub(1).min(20);
    cfg.retry_min_ms
        .saturating_mul(1u64 << shift)
        .min(cfg.retry_max_ms)
}
