//! The duties' role (follower, catching up, leading) and what a leader keeps between
//! events; how leadership is taken (the barrier, then the resumed duties) and how each
//! proposal's result is routed back to the duty that asked.

use super::cpu_search_driver::SearchRun;
use super::dispatch::{Dispatch, Undelivered};
use super::steals::StealInFlight;
use super::timers::RESCAN_MS;
use super::{DeadlineKey, DutiesCore, Effect, Now, ProposalTag};
use crate::state::{ClusterState, Command};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::{BTreeMap, BTreeSet};

/// The duties' role. One enum, so no combination of flags can be inconsistent.
#[derive(Debug)]
pub(super) enum Role {
    /// Not the leader: does nothing but wait.
    Follower,
    /// Leader whose barrier (of `epoch`) has not applied yet; a dropped barrier is
    /// proposed again at `retry_at` (not at once: a deposed leader would spin).
    CatchingUp { epoch: u64, retry_at: Option<u64> },
    /// Leader with everything committed before its term applied.
    Leading(Box<Leading>),
}

/// What a leader keeps between events.
#[derive(Debug)]
pub(super) struct Leading {
    pub(super) epoch: u64,
    /// Silence is counted from here at the earliest.
    pub(super) since: u64,
    pub(super) last_seen: BTreeMap<NodeId, u64>,
    /// When silence was last looked for (issue 54: not on every tick; see `check_liveness`).
    pub(super) liveness_checked: u64,
    /// Nodes whose attached link closed with no heartbeat since, and when it closed.
    pub(super) links_closed: BTreeMap<NodeId, u64>,
    pub(super) undelivered: Undelivered,
    /// Started tasks missing from their slave's reports, since when.
    pub(super) missing_since: BTreeMap<(TaskId, Attempt), u64>,
    pub(super) plan: PlanSlot,
    /// Something changed since the scheduler last found nothing to place (an entry applied,
    /// a plan finished, leadership resumed): only then is the queue worth another look, so
    /// an idle or full cluster costs no scan per tick.
    pub(super) sched_dirty: bool,
    /// Time alone can make a placement possible (a retry back-off ends): the queue is
    /// looked at again at least this often, changes or not.
    pub(super) next_rescan: u64,
    /// Liveness transitions proposed and not finished, so each is proposed once.
    pub(super) transitions: BTreeSet<(NodeId, bool)>,
    pub(super) lost_proposed: BTreeSet<(TaskId, Attempt)>,
    pub(super) gc_in_flight: bool,
    pub(super) next_gc: u64,
    /// Deadline proposals in flight.
    pub(super) deadlines: BTreeSet<DeadlineKey>,
    /// S3.2 CPU-count searches of running GPU tasks.
    pub(super) searches: BTreeMap<(TaskId, Attempt), SearchRun>,
    /// S0.4 steals under way (release asked, or the move proposed): task → (victim, thief,
    /// attempt, whether the victim released it). A task here is not re-sent to its victim
    /// by reconciliation: the victim may just have dropped it on purpose.
    pub(super) steals: BTreeMap<TaskId, StealInFlight>,
}

/// The one plan in flight, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PlanSlot {
    Idle,
    /// Proposed; these nodes were used tentatively by the scheduler and are re-read from
    /// the state once the plan finishes either way.
    InFlight {
        nodes: Vec<NodeId>,
    },
}

impl DutiesCore {
    /// This master now leads: a new epoch, and its barrier proposed before anything else.
    pub(super) fn became_leader(&mut self, fx: &mut Vec<Effect>) {
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
                accounting: self.cfg.accounting,
            },
        });
    }

    /// A dropped barrier's retry time came: propose it again.
    pub(super) fn retry_barrier(&mut self, now: Now, fx: &mut Vec<Effect>) {
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
                        accounting: self.cfg.accounting,
                    },
                });
            }
        }
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
                t.status
                    .node
                    .map(|node| ((t.id, t.status.attempt), Dispatch::due_now(node)))
            })
            .collect();
        self.role = Role::Leading(Box::new(Leading {
            epoch: self.epoch,
            since: now.mono_ms,
            last_seen: BTreeMap::new(),
            liveness_checked: 0,
            links_closed: BTreeMap::new(),
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

    /// The barrier of leadership `epoch` finished: applied, the duties resume; dropped (an
    /// election in between, or a deposed leader not told yet), it is tried again shortly,
    /// unless leadership is lost meanwhile.
    fn barrier_proposed(
        &mut self,
        epoch: u64,
        ok: bool,
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        if !matches!(self.role, Role::CatchingUp { epoch: e, .. } if e == epoch) {
            return;
        }
        if ok {
            self.resume(now, view);
            self.schedule(now, view, fx);
            self.dispatch(now, view, fx);
        } else {
            self.role = Role::CatchingUp {
                epoch,
                retry_at: Some(now.mono_ms + self.cfg.retry_min_ms),
            };
        }
    }

    /// A proposal finished: its tag says which duty asked, and that duty's bookkeeping
    /// is updated (a dropped barrier retried later, the plan slot freed, and so on).
    pub(super) fn proposed(
        &mut self,
        tag: ProposalTag,
        ok: bool,
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        match tag {
            ProposalTag::Barrier { epoch } => self.barrier_proposed(epoch, ok, now, view, fx),
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
}
