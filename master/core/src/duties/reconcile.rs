//! Liveness and reconciliation from heartbeats: a node silent too long is proposed down, a
//! heartbeat from a down node proposes it up, and each slave's report of what it holds is
//! compared with the log (stop what the log no longer gives it, re-send what it lacks,
//! declare lost what stays missing).

use super::effects::stop_effects;
use super::{DutiesCore, Effect, Leading, Now, ProposalTag, Role};
use crate::state::{ClusterState, Command, TaskRef};
use hetsched_common::protocol::{HeldPhase, HeldTask};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::BTreeSet;

impl DutiesCore {
    /// Proposes down (once) every up node silent longer than the node timeout, silence
    /// counted from this leadership's start at the earliest.
    pub(super) fn check_liveness(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        // Issue 54: past the heartbeat limit slaves are asked to beat less often, and are
        // given as many periods of silence as before.
        let timeout = self.cfg.node_timeout_for(view.nodes().len());
        let closed_timeout = self.cfg.closed_link_timeout_for(view.nodes().len());
        // A look at every node's silence costs a lookup per node: on every 100 ms tick that
        // was a sixth of a 10,000-slave leader's heartbeat CPU. Looking every twentieth of
        // the shorter timeout declares a node down at most 5 % later.
        if now.mono_ms < l.liveness_checked + liveness_every(timeout.min(closed_timeout)) {
            return;
        }
        l.liveness_checked = now.mono_ms;
        for n in view.nodes().values().filter(|n| n.is_up()) {
            let since = l.last_seen.get(&n.id).copied().unwrap_or(0).max(l.since);
            let link_gone = l
                .links_closed
                .get(&n.id)
                .is_some_and(|&at| now.mono_ms.saturating_sub(at.max(l.since)) > closed_timeout);
            if (now.mono_ms.saturating_sub(since) > timeout || link_gone)
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

    /// Issue 54: these nodes' attached links closed; each is down once it stays silent
    /// past the closed-link timeout (a heartbeat clears it).
    pub(super) fn links_closed(&mut self, nodes: &[NodeId], now: Now) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        for n in nodes {
            l.links_closed.entry(*n).or_insert(now.mono_ms);
        }
    }

    /// Compares a slave's report with the log: stops attempts the log no longer gives it,
    /// re-sends assignments it lacks, and declares started tasks lost once they have been
    /// missing for a while (a single report may predate a start).
    pub(super) fn heartbeat(
        &mut self,
        node: NodeId,
        held: &[HeldTask],
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        let lost_after = self.cfg.lost_after_for(view.nodes().len());
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        let Some(n) = view.nodes().get(&node) else {
            return;
        };
        l.last_seen.insert(node, now.mono_ms);
        l.links_closed.remove(&node);
        if !n.is_up() && l.transitions.insert((node, true)) {
            fx.push(Effect::Propose {
                tag: ProposalTag::Liveness { node, up: true },
                command: Command::NodeUp { node },
            });
        }
        let stops = unwanted(l, node, held, view);
        let held_keys: BTreeSet<(TaskId, Attempt)> =
            held.iter().map(|h| (h.task, h.attempt)).collect();
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
                    l.undelivered.ensure(key, node);
                }
                TaskState::Running => {
                    missing(l, lost_after, node, key, now, fx);
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
            missing(l, lost_after, node, key, now, fx);
        }
        self.dispatch(now, view, fx);
    }
}

/// What `node`'s slave holds that the log no longer gives it (to stop, unless it ended
/// there); what the log does give it has been delivered.
fn unwanted(l: &mut Leading, node: NodeId, held: &[HeldTask], view: &ClusterState) -> Vec<TaskRef> {
    let mut stops = Vec::new();
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
    stops
}

/// How often silence is looked for under `timeout_ms`: a twentieth of it, at least a tick.
fn liveness_every(timeout_ms: u64) -> u64 {
    (timeout_ms / 20).max(100)
}

/// An attempt the log places on `node` is missing from its slave's report: once missing for
/// longer than `lost_after_ms` (the configured time, longer past the heartbeat limit),
/// propose it lost (once).
fn missing(
    l: &mut Leading,
    lost_after_ms: u64,
    node: NodeId,
    key: (TaskId, Attempt),
    now: Now,
    fx: &mut Vec<Effect>,
) {
    let since = *l.missing_since.entry(key).or_insert(now.mono_ms);
    if now.mono_ms.saturating_sub(since) > lost_after_ms && l.lost_proposed.insert(key) {
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
