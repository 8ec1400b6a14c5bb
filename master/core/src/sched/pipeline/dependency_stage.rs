//! DependencyGate — workflows (docs/CONTRACT.md, "Workflows: dependencies, singletons,
//! throttles"): holds a task whatever the resources until
//! - its dependencies are met (`after`, `after_any`, `after_fail`, `after_each`, combined
//!   by `after_mode`) — waiting reason `dependency`, naming the jobs and their states;
//! - no other singleton job of its (user, name) is under way — `dependency`,
//!   "singleton: job-N running";
//! - fewer than `max_running` of its job's tasks are assigned or running, counting those
//!   this plan let through already — `throttle`.
//!
//! Decided only on the applied state the plan is for, that is on what the log committed
//! (`ClusterState::dependency_state`), never on a leader's own view of the slaves: a new
//! leader cannot start a dependent early. Dependencies never come undone (a job's end is
//! final), so a plan made on an older state never starts a task the newer one would hold.
//!
//! First in the chain, before the gang stage: a held task must take nothing from the
//! index. A job with none of these keys passes at once (one check of its spec), so jobs
//! without dependencies are planned exactly as before. Costs: per considered task, one
//! look-up per dependency (each upstream job's state read once per plan); a job-wide hold
//! passes over the job's other tasks, so a waiting job costs one check per plan, and a plan
//! that only holds tasks is quiet (`quiet.rs`) until a job ends or resources free up. The
//! reasons users read are re-read from the state (`sched::waiting::held_reason`), so a
//! quiet plan's reason still names the jobs' current states.

use super::context::Decision;
use super::stage::{Stage, Step};
use crate::sched::waiting::{singleton_reason, throttle_reason};
use crate::state::{ClusterState, DepState, Job, JobStates};
use hetsched_common::protocol::WaitingInfo;
use hetsched_common::JobId;
use std::collections::BTreeMap;

/// The gate (no configuration).
#[derive(Debug, Default)]
pub(super) struct DependencyGate;

/// What the gate keeps for one plan (`PlanState`).
#[derive(Debug, Default)]
struct GatePlan {
    /// Upstream jobs' states, read once per plan.
    states: JobStates,
    /// Throttled jobs: tasks assigned or running, plus those let through this plan.
    under_way: BTreeMap<JobId, u32>,
    /// Singleton (user, name) → the job under way, or let through this plan.
    holders: BTreeMap<(String, String), Option<JobId>>,
}

/// A hold of the whole job (`job`) or of this task only.
fn hold(info: WaitingInfo, job: bool) -> Option<Decision> {
    Some(Decision::Hold { info, job })
}

impl GatePlan {
    /// Whether another singleton job of `job`'s user and name is under way; else `job`
    /// becomes the one for the rest of the plan.
    fn singleton_taken(&mut self, view: &ClusterState, job: &Job) -> Option<JobId> {
        let key = (job.spec.user.clone(), job.spec.name.clone());
        let holder = self
            .holders
            .entry(key)
            .or_insert_with(|| view.singleton_holder(job));
        match *holder {
            Some(other) if other != job.id => Some(other),
            _ => {
                *holder = Some(job.id);
                None
            }
        }
    }
}

impl Stage for DependencyGate {
    fn name(&self) -> &'static str {
        "dependency"
    }

    fn consider(&mut self, step: &mut Step<'_, '_>) -> Option<Decision> {
        let job = step.head.job;
        if !job.spec.is_gated() {
            return None;
        }
        let view = step.view;
        let plan = step.state.part::<GatePlan>();
        if job.spec.has_dependencies() {
            let whole = job.spec.after_each.is_none();
            match view.dependency_state(job, step.head.t.index, &mut plan.states) {
                DepState::Met => {}
                // Never: the cascade cancels it in the entry that made it so; until that
                // entry applies it waits like the others.
                DepState::Waiting(d) | DepState::Never(d) => {
                    return hold(WaitingInfo::new("dependency", d), whole)
                }
            }
        }
        if job.spec.singleton {
            if let Some(other) = plan.singleton_taken(view, job) {
                return hold(singleton_reason(other), true);
            }
        }
        if let Some(max) = job.spec.max_running {
            let n = plan
                .under_way
                .entry(job.id)
                .or_insert_with(|| view.tasks_under_way(job));
            if *n >= max {
                return hold(throttle_reason(max, *n), true);
            }
            // Let through: counted whether or not a later stage places it (a plan may
            // start fewer, never more).
            *n += 1;
        }
        None
    }
}

#[cfg(test)]
#[path = "dependency_stage_tests.rs"]
mod tests;
