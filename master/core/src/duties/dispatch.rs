//! Dispatch of committed assignments until each slave acknowledges: all of one slave's due
//! work in one batch, and per-assignment back-off after a failed send, so a dead slave's
//! messages wait (parked behind their back-off) while the others flow.

use super::{DutiesConfig, DutiesCore, Effect, Now, Role, MAX_ASSIGNMENTS_PER_MESSAGE};
use crate::state::ClusterState;
use hetsched_common::protocol::{Assignment, EngineGrant};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::{BTreeMap, BTreeSet};

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

/// The committed assignments not yet acknowledged, with the two orders `dispatch` reads:
/// those due by send time and those in flight by the time they were sent. A dispatch (run on
/// every answer and heartbeat) then looks only at what is due or overdue, not at every
/// assignment on its way: with tens of thousands in flight to thousands of slaves, a scan of
/// them all per heartbeat took most of the leader's CPU and the answers it waited for came
/// later than the retry timeout (`bench scale --slaves 5000` stalled).
#[derive(Clone, Debug, Default)]
pub(super) struct Undelivered {
    by_key: BTreeMap<(TaskId, Attempt), Dispatch>,
    /// `Due` entries: (at, task, attempt).
    due: BTreeSet<(u64, TaskId, Attempt)>,
    /// `InFlight` entries: (since, task, attempt).
    in_flight: BTreeSet<(u64, TaskId, Attempt)>,
}

impl Undelivered {
    fn index(&mut self, (task, attempt): (TaskId, Attempt), state: DispatchState) {
        match state {
            DispatchState::Due { at } => self.due.insert((at, task, attempt)),
            DispatchState::InFlight { since } => self.in_flight.insert((since, task, attempt)),
        };
    }

    fn unindex(&mut self, (task, attempt): (TaskId, Attempt), state: DispatchState) {
        match state {
            DispatchState::Due { at } => self.due.remove(&(at, task, attempt)),
            DispatchState::InFlight { since } => self.in_flight.remove(&(since, task, attempt)),
        };
    }

    fn set_state(&mut self, key: (TaskId, Attempt), state: DispatchState) {
        let Some(d) = self.by_key.get_mut(&key) else {
            return;
        };
        let old = std::mem::replace(&mut d.state, state);
        self.unindex(key, old);
        self.index(key, state);
    }

    /// Assignments on their way.
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Forgets one (acknowledged, or no longer the log's).
    pub(super) fn remove(&mut self, key: &(TaskId, Attempt)) {
        if let Some(d) = self.by_key.remove(key) {
            self.unindex(*key, d.state);
        }
    }

    /// Records `d`, replacing any earlier record of `key`.
    fn insert(&mut self, key: (TaskId, Attempt), d: Dispatch) {
        self.remove(&key);
        self.by_key.insert(key, d);
        self.index(key, d.state);
    }

    /// A freshly committed assignment: sent at the next dispatch, replacing any earlier
    /// record of it.
    pub(super) fn send_now(&mut self, key: (TaskId, Attempt), node: NodeId) {
        self.insert(key, Dispatch::due_now(node));
    }

    /// An assignment the log holds and the slave does not: sent at the next dispatch unless
    /// it is already on its way.
    pub(super) fn ensure(&mut self, key: (TaskId, Attempt), node: NodeId) {
        if !self.by_key.contains_key(&key) {
            self.send_now(key, node);
        }
    }

    /// A send failed: retried after the back-off.
    fn failed(&mut self, key: (TaskId, Attempt), cfg: &DutiesConfig, now: u64) {
        let Some(d) = self.by_key.get_mut(&key) else {
            return;
        };
        d.failures += 1;
        let at = now + backoff(cfg, d.failures);
        self.set_state(key, DispatchState::Due { at });
    }

    /// The assignments to send now, in (task, attempt) order: those due, and those whose
    /// answer never came (counted as a failure).
    fn take_sendable(&mut self, now: u64, timeout_ms: u64) -> Vec<(TaskId, Attempt)> {
        let mut out: Vec<(TaskId, Attempt)> = self
            .due
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .map(|(_, t, a)| (*t, *a))
            .collect();
        let overdue: Vec<(TaskId, Attempt)> = self
            .in_flight
            .iter()
            .take_while(|(since, _, _)| now.saturating_sub(*since) > 2 * timeout_ms)
            .map(|(_, t, a)| (*t, *a))
            .collect();
        for key in &overdue {
            if let Some(d) = self.by_key.get_mut(key) {
                d.failures += 1;
            }
        }
        out.extend(overdue);
        out.sort_unstable();
        out
    }
}

impl FromIterator<((TaskId, Attempt), Dispatch)> for Undelivered {
    fn from_iter<I: IntoIterator<Item = ((TaskId, Attempt), Dispatch)>>(iter: I) -> Self {
        let mut u = Self::default();
        for (key, d) in iter {
            u.insert(key, d);
        }
        u
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
            } else {
                l.undelivered.failed(*key, &self.cfg, now.mono_ms);
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
        for (task, attempt) in l
            .undelivered
            .take_sendable(now.mono_ms, cfg.dispatch_timeout_ms)
        {
            let Some(d) = l.undelivered.by_key.get(&(task, attempt)).copied() else {
                continue;
            };
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
            l.undelivered.set_state(
                (task, attempt),
                DispatchState::InFlight { since: now.mono_ms },
            );
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
                    job_name: job.spec.name.clone(),
                    workdir: job.spec.workdir.clone(),
                    image: job.spec.image.clone(),
                    run_as: job.spec.run_as.clone(),
                    network: job.spec.network.clone(),
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

#[cfg(test)]
mod undelivered_tests {
    use super::*;

    /// Whether the two orders hold exactly the entries' states.
    fn consistent(u: &Undelivered) -> bool {
        let mut due = BTreeSet::new();
        let mut in_flight = BTreeSet::new();
        for (&(t, a), d) in &u.by_key {
            match d.state {
                DispatchState::Due { at } => due.insert((at, t, a)),
                DispatchState::InFlight { since } => in_flight.insert((since, t, a)),
            };
        }
        due == u.due && in_flight == u.in_flight
    }

    /// Seeded random operations keep the orders in step with the entries, and
    /// `take_sendable` gives exactly what a scan of every entry would.
    #[test]
    fn orders_follow_every_change_and_match_a_full_scan() {
        let cfg = DutiesConfig::default();
        let seed = 0x05ee_dd15_u64;
        let mut x = seed;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut u = Undelivered::default();
        let mut now = 0u64;
        for step in 0..20_000 {
            let key = (TaskId(next(200)), next(3) as Attempt);
            let node = NodeId(next(5));
            match next(6) {
                0 => u.send_now(key, node),
                1 => u.ensure(key, node),
                2 => u.remove(&key),
                3 => u.failed(key, &cfg, now),
                4 => now += next(3 * cfg.dispatch_timeout_ms),
                _ => {
                    let overdue = |d: &Dispatch| match d.state {
                        DispatchState::Due { at } => at <= now,
                        DispatchState::InFlight { since } => {
                            now.saturating_sub(since) > 2 * cfg.dispatch_timeout_ms
                        }
                    };
                    let scan: Vec<_> = u
                        .by_key
                        .iter()
                        .filter(|(_, d)| overdue(d))
                        .map(|(k, _)| *k)
                        .collect();
                    let got = u.take_sendable(now, cfg.dispatch_timeout_ms);
                    assert_eq!(got, scan, "seed {seed:#x}, step {step}");
                    for k in got {
                        u.set_state(k, DispatchState::InFlight { since: now });
                    }
                }
            }
            assert!(consistent(&u), "seed {seed:#x}, step {step}");
        }
    }

    /// `ensure` leaves an assignment on its way alone; `send_now` starts it over.
    #[test]
    fn ensure_keeps_and_send_now_replaces() {
        let cfg = DutiesConfig::default();
        let key = (TaskId(7), 1);
        let mut u = Undelivered::default();
        u.send_now(key, NodeId(1));
        u.failed(key, &cfg, 1_000);
        u.ensure(key, NodeId(1));
        assert_eq!(u.by_key[&key].failures, 1, "ensure kept the back-off");
        assert!(u.take_sendable(1_000, cfg.dispatch_timeout_ms).is_empty());
        u.send_now(key, NodeId(2));
        assert_eq!(u.by_key[&key], Dispatch::due_now(NodeId(2)));
        assert_eq!(u.take_sendable(1_000, cfg.dispatch_timeout_ms), vec![key]);
        assert!(consistent(&u));
    }
}
