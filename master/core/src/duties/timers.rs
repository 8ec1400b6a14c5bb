//! What time alone sets off, on each tick: a dropped barrier's retry, the periodic rescan
//! of the queue, node silence, drain deadlines and attempt timeouts, and garbage
//! collection of finished jobs and old client request outcomes (docs/CONTRACT.md,
//! Retention).

use super::{DeadlineKey, DutiesCore, Effect, Now, ProposalTag, Role};
use crate::state::{ClusterState, Command};

/// How often the queue is rescanned with nothing changed (retry back-offs end by time).
pub(super) const RESCAN_MS: u64 = 1_000;

impl DutiesCore {
    /// Time passed: everything that waits on the clock.
    pub(super) fn tick(&mut self, now: Now, view: &ClusterState, fx: &mut Vec<Effect>) {
        self.retry_barrier(now, fx);
        if let Role::Leading(l) = &mut self.role {
            if now.mono_ms >= l.next_rescan {
                l.next_rescan = now.mono_ms + RESCAN_MS;
                l.sched_dirty = true;
            }
        }
        self.check_liveness(now, view, fx);
        self.check_deadlines(now, view, fx);
        self.replan_batches(view, fx);
        self.schedule(now, view, fx);
        self.dispatch(now, view, fx);
        self.collect_garbage(now, view, fx);
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

    /// At most every `gc_period_ms`, one GC proposal when something is due.
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
        let keyed_before = Some(
            now.wall_ms
                .saturating_sub(self.cfg.idempotency_retention_ms),
        );
        if view.gc_due(jobs_before, requests_before, keyed_before) {
            l.gc_in_flight = true;
            fx.push(Effect::Propose {
                tag: ProposalTag::Gc,
                command: Command::GcJobs {
                    jobs_finished_before_ms: jobs_before,
                    requests_before_ms: requests_before,
                    keyed_requests_before_ms: keyed_before,
                },
            });
        }
    }
}
