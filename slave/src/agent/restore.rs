//! Restoring the agent after a (re)start: what the store holds is queued, re-adopted or
//! reported again, and the attempt directories and cgroups no held task names are swept.
//!
//! Kept apart from the run loop because it is the one place the "never run an attempt twice"
//! rule meets the disk: an attempt counts as started once its directory exists, so every such
//! attempt is watched again ([`super::watched`]) instead of being queued, and leftovers of
//! attempts no longer held are killed and removed before anything new starts.

use super::watched::Watched;
use super::{Agent, AgentMsg};
use crate::attempt::files::{self, SupervisorRecord, SUPERVISOR_FILE};
use crate::attempt::{self, Launcher};
use crate::queue::{LocalQueue, Phase};
use crate::store::{Store, StoreError, StoredPhase};
use hetsched_common::protocol::TaskReport;
use hetsched_common::{Attempt, TaskId};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tokio::sync::mpsc;

impl Agent {
    /// Builds the agent from what the store holds: queued tasks are queued again; started
    /// attempts (their supervisor recorded, or their directory present) are watched again —
    /// re-adopted, collected or reported lost, never started a second time; unacknowledged
    /// results are reported again. Stale cgroups of attempts no longer held are removed.
    ///
    /// `runtime_lost`: the attempt directories of the last run are gone (the machine
    /// restarted, `crate::runtime_dir`): a queued record can no longer tell whether its
    /// attempt started, so every held attempt not finished is reported lost (the master
    /// runs it again under a new attempt) — never started a second time.
    pub fn restore(
        store: Store,
        runtime_lost: bool,
        cpu_capacity_milli: u64,
        launcher: Launcher,
        grace: Duration,
        mailbox: mpsc::UnboundedSender<AgentMsg>,
        reports: mpsc::UnboundedSender<TaskReport>,
    ) -> Result<Self, StoreError> {
        let loaded = store.load()?;
        let mut queue = LocalQueue::new(cpu_capacity_milli);
        let mut adopt = Vec::new();
        for t in loaded.tasks {
            let task = t.assignment.task;
            let attempt = t.assignment.attempt;
            let dir = launcher.attempt_dir(task, attempt);
            let phase = match t.phase {
                StoredPhase::Queued if !dir.exists() && !runtime_lost => Phase::Queued,
                // Its directory exists: the agent stopped while starting it. Or the
                // directories are gone with the machine's memory: it may have started (its
                // `Supervised` record rides on the next flush, `start`).
                StoredPhase::Queued => {
                    adopt.push(Watched::recovered(&launcher, task, attempt, None, None));
                    Phase::Running
                }
                StoredPhase::Supervised { pid, start_time } => {
                    adopt.push(Watched::recovered(
                        &launcher,
                        task,
                        attempt,
                        Some((pid, start_time)),
                        None,
                    ));
                    Phase::Running
                }
                StoredPhase::Running { pgid } => {
                    // Started by an agent without supervisors: nothing recorded its exit.
                    tracing::warn!(task = %task, attempt, pgid, "task of an older slave version was running; reporting it lost");
                    adopt.push(Watched::recovered(
                        &launcher,
                        task,
                        attempt,
                        None,
                        Some(pgid),
                    ));
                    Phase::Running
                }
                StoredPhase::Finished {
                    exit_code,
                    reason,
                    usage,
                    detail,
                } => {
                    let _ = reports.send(TaskReport::Finished {
                        task,
                        attempt,
                        exit_code,
                        reason,
                        reason_detail: detail,
                        usage,
                    });
                    Phase::Finished { exit_code }
                }
            };
            queue.restore(t.assignment, phase);
        }
        for (task, attempt) in loaded.done {
            queue.restore_done(task, attempt);
        }
        let keep: BTreeSet<String> = adopt
            .iter()
            .map(|w| attempt::attempt_name(w.task, w.attempt))
            .collect();
        let held: BTreeSet<String> = queue
            .held()
            .iter()
            .map(|h| attempt::attempt_name(h.task, h.attempt))
            .collect();
        sweep_unheld_attempts(&launcher, &held);
        if let Some(c) = &launcher.containers {
            // Containers of attempts that are over (before the cgroups they are in go).
            c.launcher.sweep(&keep);
        }
        let removed = launcher.cgroups.clean_stale(&keep);
        if !removed.is_empty() {
            tracing::info!(
                count = removed.len(),
                "removed stale cgroups of a previous run"
            );
        }
        let (launcher_supervisor, pool_dir) = (launcher.supervisor.clone(), launcher.pool_dir());
        Ok(Self {
            queue,
            store,
            launcher,
            grace,
            running: HashMap::new(),
            adopt,
            mailbox,
            reports,
            programs: None,
            asked: Default::default(),
            gpu_holds: HashMap::new(),
            deferred: Default::default(),
            launch: std::sync::Arc::new(crate::attempt::pool::client::PoolClient::new(
                launcher_supervisor,
                pool_dir,
            )),
            fetching: HashMap::new(),
        })
    }
}

/// Ends and removes the attempt directories no held task names: attempts superseded by a
/// newer one while the agent was down (whatever still runs of them is killed), and leftovers
/// of acknowledged ones.
fn sweep_unheld_attempts(launcher: &Launcher, held: &BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(&launcher.attempts_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if held.contains(&name) {
            continue;
        }
        let parsed = name
            .strip_prefix("task-")
            .and_then(|r| r.split_once('-'))
            .and_then(|(t, a)| Some((TaskId(t.parse().ok()?), a.parse::<Attempt>().ok()?)));
        if let Some((task, attempt)) = parsed {
            let pgid = files::read_json::<SupervisorRecord>(&e.path().join(SUPERVISOR_FILE))
                .map(|r| r.task_pid);
            let cg = launcher.cgroups.attempt(&name);
            let found = attempt::kill_attempt_leftovers(task, attempt, &e.path(), &cg, pgid);
            if found > 0 {
                tracing::warn!(task = %task, attempt, processes = found, "killed a superseded attempt left from before the restart");
            }
            crate::logs::keep_attempt(&launcher.log_dir, &e.path(), task, attempt);
        }
        if let Err(err) = std::fs::remove_dir_all(e.path()) {
            tracing::debug!(dir = %e.path().display(), error = %err, "cannot remove a stale attempt directory");
        }
    }
}
