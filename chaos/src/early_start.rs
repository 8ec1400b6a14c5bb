//! `early-start` (issue 51) by log replay: no attempt of a dependent job may be assigned before
//! its dependencies' ends were committed as the kind it needs, no singleton job may be under
//! way beside another of its user and name, and no job may have more than `max_running` tasks
//! assigned or running.
//!
//! Checked at every entry that assigns tasks (`ApplyPlan`, `SubmitPlaced`) of a master's
//! replayed log: the dependencies against the state *before* the entry (what the log had
//! committed when the leader planned it), the singleton and the throttle against the state
//! after it. Read from the tasks and specs themselves with the same committed-state reading
//! the scheduler's gate uses (`ClusterState::dependency_state`), so a gate that lets a task
//! through early is caught whatever leader did it.

use hetsched_common::{JobId, TaskId, TaskState};
use hetsched_master_core::state::{ClusterState, Command, DepState, Job, JobStates};

/// What an entry is about to assign, with each task's dependencies as committed before it.
#[derive(Debug, Default)]
pub struct Before {
    /// Tasks it assigns (by id; for a `SubmitPlaced`, by index of the new job).
    tasks: Vec<Target>,
}

#[derive(Debug)]
struct Target {
    /// The task (`None`: task `index` of the job the entry submits).
    task: Option<TaskId>,
    /// Its index in its job.
    index: u32,
    /// Its attempt before the entry (0 for a new job's).
    attempt: u32,
    /// Its dependencies before the entry, when not met: what they waited for.
    unmet: Option<String>,
}

/// What `command` would assign, read from `s` before it applies.
pub fn before(s: &ClusterState, command: &Command) -> Before {
    let mut states = JobStates::default();
    let mut out = Before::default();
    match command {
        Command::ApplyPlan(plan) => {
            for a in &plan.assignments {
                let Some(t) = s.task(a.task) else { continue };
                let unmet = s.job(t.job).and_then(|j| unmet(s, j, t.index, &mut states));
                out.tasks.push(Target {
                    task: Some(a.task),
                    index: t.index,
                    attempt: t.status.attempt,
                    unmet,
                });
            }
        }
        Command::SubmitPlaced { spec, place, .. } if spec.has_dependencies() => {
            // The job is not there yet: its spec is read against what the log had.
            let job = Job {
                id: JobId(0),
                spec: spec.clone(),
                tasks: Vec::new(),
                submitted_ms: 0,
                submitted_index: 0,
                finished_ms: None,
                open: 0,
                candidates: Vec::new(),
            };
            for p in place {
                out.tasks.push(Target {
                    task: None,
                    index: p.index,
                    attempt: 0,
                    unmet: unmet(s, &job, p.index, &mut states),
                });
            }
        }
        _ => {}
    }
    out
}

/// Why task `index` of `job` may not start in `s` (`None`: it may).
fn unmet(s: &ClusterState, job: &Job, index: u32, states: &mut JobStates) -> Option<String> {
    if !job.spec.has_dependencies() {
        return None;
    }
    match s.dependency_state(job, index, states) {
        DepState::Met => None,
        DepState::Waiting(d) | DepState::Never(d) => Some(d),
    }
}

/// The tasks `before` named that the entry did assign (their attempt moved), checked in `s`
/// after it; `submitted`: the job a `SubmitPlaced` created. One line per early start.
pub fn after(s: &ClusterState, before: &Before, submitted: Option<JobId>) -> Vec<String> {
    let mut out = Vec::new();
    for target in &before.tasks {
        let id = match target.task {
            Some(t) => Some(t),
            None => submitted
                .and_then(|j| s.job(j))
                .and_then(|j| j.tasks.get(target.index as usize).copied()),
        };
        let Some(t) = id.and_then(|t| s.task(t)) else {
            continue;
        };
        let assigned = matches!(t.status.state, TaskState::Assigned | TaskState::Running);
        if !assigned || t.status.attempt <= target.attempt {
            continue; // refused by apply, or not this entry's doing
        }
        let Some(job) = s.job(t.job) else { continue };
        let mut say = |line: String| {
            if !out.contains(&line) {
                out.push(line);
            }
        };
        if let Some(why) = &target.unmet {
            say(format!(
                "{} (task {} of {}) was assigned while its dependencies were not met as \
                 committed: {why}",
                t.id, t.index, job.id
            ));
        }
        if let Some(max) = job.spec.max_running {
            let n = s.tasks_under_way(job);
            if n > max {
                say(format!(
                    "{} has {n} tasks assigned or running, max_running {max}",
                    job.id
                ));
            }
        }
        if job.spec.singleton {
            let book = s.dependency_book();
            let beside = book
                .singletons(&job.spec.user, &job.spec.name)
                .filter(|o| *o != job.id)
                .find(|o| s.job(*o).is_some_and(|o| s.tasks_under_way(o) > 0));
            if let Some(other) = beside {
                say(format!(
                    "singleton {} of {:?}/{:?} is under way beside {other}",
                    job.id, job.spec.user, job.spec.name
                ));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "early_start_tests.rs"]
mod tests;
