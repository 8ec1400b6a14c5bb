//! Dispatch of committed assignments until each slave acknowledges: all of one slave's due
//! work in one batch, and per-assignment back-off after a failed send, so a dead slave's
//! messages wait (parked behind their back-off) while the others flow.

use super::{DutiesConfig, DutiesCore, Effect, Now, Role, MAX_ASSIGNMENTS_PER_MESSAGE};
use crate::state::ClusterState;
use hetsched_common::protocol::{Assignment, EngineGrant};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::BTreeMap;

/// Where one committed assignment is on its way to its slave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DispatchState {
    /// To be sent at or after `at`.
    Due { at: u64 },
    /// Sent at `since`, no answer yet.
    InFlight { since: u64 },
}

/// One committed assignment not yet acknowledged by its slave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Dispatch {
    pub(super) node: NodeId,
    pub(super) state: DispatchState,
    pub(super) failures: u32,
}

impl Dispatch {
    /// A committed assignment to `node`, to be sent at the next dispatch.
    pub(super) fn due_now(node: NodeId) -> Self {
        Self {
            node,
            state: DispatchState::Due { at: 0 },
            failures: 0,
        }
    }
}

impl DutiesCore {
    /// Slaves answered dispatches: acknowledged ones are done, failed ones back off.
    pub(super) fn delivered(&mut self, tasks: &[(TaskId, Attempt)], ok: bool, now: Now) {
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

    /// Sends every due assignment the log still holds, all of one slave's in one
    /// [`Effect::DispatchBatch`]; forgets those the log no longer holds.
    pub(super) fn dispatch(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
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
            // S0.3: still waiting in the node's queue (not promoted): the slave must ask
            // before it starts it.
            let queued = node.queued.contains(&task);
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
                    env: view.task_env(task, job),
                    resources: job.spec.resources.clone(),
                    gpus: t.gpus.clone(),
                    queued,
                    engine: t.booked.map(|b| EngineGrant {
                        kind: b.kind,
                        device: b.device,
                    }),
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
}

/// Retry delay after `failures` failed sends: doubling from the minimum, capped.
pub(super) fn backoff(cfg: &DutiesConfig, failures: u32) -> u64 {
    let shift = failures.saturating_sub(1).min(20);
    cfg.retry_min_ms
        .saturating_mul(1u64 << shift)
        .min(cfg.retry_max_ms)
}
