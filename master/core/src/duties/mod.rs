//! `DutiesCore` — what only the leader does, as a pure engine (openraft's shape): one ordered
//! stream of [`DutyEvent`]s in, a list of [`Effect`]s out. No sockets, no clock, no tasks:
//! the executor actor (`server::duties_executor` in `hetsched-master`) feeds it events with
//! the time, reads the applied state for it, and carries out the effects.
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
//! collection of finished jobs and old client request outcomes (docs/CONTRACT.md, Retention).
//!
//! A new leader proposes a barrier entry before acting (its applied state then holds every
//! entry committed before its term) and counts node silence from the moment it took over,
//! so a failover alone never declares healthy nodes lost.
//!
//! The engine by concern: `events` (what goes in), `effects` (what comes out), `config`;
//! `leading` (the role, the barrier, what a leader keeps, proposal results); `scheduling`
//! (the one plan in flight, what applied entries set off); `dispatch` (batches, back-off);
//! `reconcile` (liveness, heartbeats against the log); `timers` (deadlines, timeouts, GC,
//! rescans); `place_new` (the one road of a submission: planned before it is proposed when
//! nothing else waits, else left to the queue); `steals` (S0.4);
//! `cpu_search_driver` (S3.2 searches driven by probe samples).
//! This file holds the engine itself and routes each event to its concern.

use crate::sched::Scheduler;
use crate::state::ClusterState;
use hetsched_common::NodeId;

mod batch;
mod config;
mod cpu_search_driver;
mod dispatch;
mod effects;
mod events;
mod leading;
mod place_new;
mod reconcile;
mod scheduling;
mod steals;
#[cfg(test)]
mod tests;
mod timers;

pub use config::DutiesConfig;
pub use effects::{Effect, MAX_ASSIGNMENTS_PER_MESSAGE};
pub use events::{DeadlineKey, DutyEvent, HeartbeatVerdict, Now, ProposalTag};
use leading::{Leading, PlanSlot, Role};
pub use place_new::{NewPlacement, Submission, MAX_COPIED};

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

    /// Why the tasks the scheduler's latest plan left waiting wait, and the generation of
    /// those reasons (`None`: the scheduler gives none). Read by the executor, which keeps a
    /// copy for queries outside the log.
    pub fn waiting(&self) -> Option<(std::sync::Arc<crate::sched::waiting::WaitBoard>, u64)> {
        self.scheduler.waiting()
    }

    /// Issue 51, a deliberate bug for chaos tests (`BugSpec::skip_dependency_gate`): plan
    /// with (`true`) or without the dependency gate.
    pub fn set_dependency_gate(&mut self, on: bool) {
        self.scheduler.set_dependency_gate(on);
    }

    /// Issue 53: the users' fair-share factors the scheduler orders by.
    pub fn set_fair_share(&mut self, factors: std::collections::BTreeMap<String, f64>) {
        self.scheduler.set_fair_share(factors);
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

    /// Issue 54: the heartbeat period this leader asks of slaves over `view` (0: their own).
    pub fn heartbeat_floor_ms(&self, view: &ClusterState) -> u64 {
        self.cfg.heartbeat_floor_ms(view.nodes().len())
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
            DutyEvent::Tick => self.tick(now, view, &mut fx),
            DutyEvent::LinksClosed { nodes } => self.links_closed(&nodes, now),
        }
        fx
    }
}
