//! The scheduling loop (one plan in flight, the queue looked at only when something
//! changed) and what each applied entry sets off: dispatches of new assignments, stops of
//! preempted, cancelled, drained or timed-out attempts, live CPU changes, and a new look at
//! the queue.

use super::cpu_search_driver::set_cpus_effect;
use super::effects::stop_effects;
use super::{DutiesCore, Effect, Now, PlanSlot, ProposalTag, Role};
use crate::state::{ClusterState, Command, Outcome};
use hetsched_common::NodeId;

impl DutiesCore {
    /// An entry applied: tell the scheduler what changed and act on the outcome.
    pub(super) fn applied(
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
        if self.act_on(outcome, now, view, fx) {
            self.schedule(now, view, fx);
        }
    }

    /// What an applied outcome sets off: dispatches, stops, CPU changes; whether it may
    /// have made a placement possible (then the queue is looked at now).
    fn act_on(
        &mut self,
        outcome: Outcome,
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let Role::Leading(l) = &mut self.role else {
            return false;
        };
        let mut wake = false;
        match outcome {
            Outcome::PlanApplied {
                accepted,
                preempted,
                ..
            } => {
                stop_effects(&preempted, Some(self.cfg.preempt_grace_ms), view, fx);
                for r in &accepted {
                    l.undelivered.send_now((r.task, r.attempt), r.node);
                }
                self.dispatch(now, view, fx);
            }
            Outcome::SubmittedPlaced {
                tasks,
                accepted,
                rejected,
                ..
            } => {
                for r in &accepted {
                    l.undelivered.send_now((r.task, r.attempt), r.node);
                }
                self.dispatch(now, view, fx);
                // Tasks left pending (not planned at submit, or their placement went
                // stale) are planned like every pending task, once the slot is free.
                wake = rejected > 0 || accepted.len() < tasks.len();
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
                set_cpus_effect(l, attempt, cpu_milli, now, view, fx);
                wake = true;
            }
            Outcome::Stolen { from, assigned } => {
                l.steals.remove(&from.task);
                match assigned {
                    Some(r) => {
                        l.undelivered.send_now((r.task, r.attempt), r.node);
                        self.dispatch(now, view, fx);
                    }
                    None => wake = true,
                }
            }
            // New work or freed resources can make a placement possible.
            Outcome::Submitted { .. }
            | Outcome::BatchSubmitted { .. }
            | Outcome::FlowSubmitted { .. }
            | Outcome::BatchReplanned { .. }
            | Outcome::Registered { .. }
            | Outcome::NodeUp { .. }
            | Outcome::NodeDown { .. }
            | Outcome::TaskUpdated => wake = true,
            _ => {}
        }
        wake
    }

    /// Proposes a plan when none is in flight, tasks wait and something changed.
    pub(super) fn schedule(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
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
}
