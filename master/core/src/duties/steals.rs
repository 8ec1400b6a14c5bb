//! Work stealing (S0.4) in the leader duties: an idle slave's request picks a victim
//! (`sched::steal`, pure) and asks it to release the queued attempt; a release becomes a
//! `StealTask` proposal. While a steal is under way its task is left out of reconciliation.

use super::{DutiesCore, Effect, ProposalTag, Role};
use crate::state::{ClusterState, Command};
use hetsched_common::{Attempt, NodeId, TaskId};
use std::collections::BTreeSet;

/// One steal under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StealInFlight {
    pub(super) from: NodeId,
    pub(super) to: NodeId,
    pub(super) attempt: Attempt,
    pub(super) released: bool,
}

impl DutiesCore {
    /// S0.4: an idle slave asks for work: pick the victim and ask it to release the task.
    pub(super) fn steal_request(
        &mut self,
        thief: NodeId,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
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
    pub(super) fn released(
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
