//! Starting work: the pump that starts every task the local queue lets start, each either
//! as a process under the slave's supervisor pool (then watched, [`super::watched`]) or, for an
//! API-program task (S0), in-process on a blocking thread.
//!
//! A started attempt is recorded as `Supervised` (made durable by the next batch's flush:
//! what marks it started is its directory, and after a machine restart every attempt that
//! may have started is reported lost, `restore`) and reported `Started` at once — a
//! best-effort report that needs no flush. One whose directory already exists is watched
//! instead of started again.

use super::stop::StopRequest;
use super::watched::Watched;
use super::{Agent, AgentMsg, ProgramHooks};
use crate::attempt::{self, SpawnError};
use crate::store::StoredPhase;
use hetsched_common::protocol::Assignment;
use hetsched_common::protocol::TaskReport;
use hetsched_common::TaskReason;
use tokio::sync::mpsc;

impl Agent {
    /// Starts every task the queue lets start.
    pub(super) fn pump(&mut self) {
        while let Some(a) = self.queue.start_next() {
            if let Some(hooks) = self.programs.clone() {
                if let Some(program) = crate::program::carried(&a) {
                    self.start_program(a, program, hooks);
                    continue;
                }
            }
            if a.image.is_some() {
                self.fetch_image(a);
                continue;
            }
            let launched = self.launcher.prepare(&a).and_then(|(dir, spec)| {
                self.launch
                    .launch(&dir, &spec)
                    .map_err(|source| SpawnError::Io {
                        path: self.launch.home(),
                        source,
                    })
            });
            self.started(a, launched);
        }
    }

    /// What a launch came to: watched (and reported started), watched again (it had
    /// started before), or ended as unable to start.
    pub(super) fn started(
        &mut self,
        a: Assignment,
        launched: Result<crate::attempt::Started, SpawnError>,
    ) {
        let (task, attempt) = (a.task, a.attempt);
        match launched {
            Ok(started) => {
                tracing::debug!(target: "hetsched::trace", task = %task, attempt, "pump: handed to the supervisor pool");
                let (pid, start_time) = started.supervisor;
                // Not flushed here: the next batch's flush carries it. A restart of the
                // agent finds the attempt by its directory and its supervisor's record
                // in it; a restart of the machine reports it lost (`restore`).
                let r = self
                    .store
                    .put_phase(a.clone(), StoredPhase::Supervised { pid, start_time });
                if let Err(e) = r {
                    // The attempt directory still marks it started, and the supervisor
                    // records itself there: a restart finds it all the same.
                    tracing::error!(task = %task, attempt, error = %e, "cannot persist running state");
                }
                self.hold_gpus(&a);
                metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
                tracing::info!(task = %task, attempt, supervisor = pid, command = ?a.command, "task started");
                let _ = self.reports.send(TaskReport::Started { task, attempt });
                let w = Watched::started(
                    &self.launcher,
                    task,
                    attempt,
                    Some((pid, start_time)),
                    Some(started.ended),
                );
                self.watch(w);
            }
            Err(SpawnError::AlreadyStarted(dir)) => {
                // Never start an attempt twice: watch what is there instead.
                tracing::warn!(task = %task, attempt, dir = %dir.display(), "attempt was started before; watching it instead of starting it again");
                let w = Watched::recovered(&self.launcher, task, attempt, None, None);
                self.watch(w);
            }
            Err(e) => {
                tracing::error!(task = %task, attempt, error = %e, exit_code = attempt::EXIT_CANNOT_START, "task cannot start");
                attempt::note_in_err_log(&self.launcher.log_dir, &a, &format!("hetsched: {e}"));
                self.finished(
                    task,
                    attempt,
                    attempt::EXIT_CANNOT_START,
                    Some(TaskReason::CannotStart),
                    None,
                );
            }
        }
    }

    /// A container task: its image is got from the store (unpacked once, off the agent's
    /// loop, [`crate::container::store`]); the start goes on in
    /// [`image_ready`](Self::image_ready). A slave with no runtime ends it with reason
    /// `image`, never running it bare.
    fn fetch_image(&mut self, a: Assignment) {
        let Some(containers) = self.launcher.containers.clone() else {
            let image = a.image.clone().unwrap_or_default();
            let e = crate::container::store::ImageError {
                image,
                step: "runtime",
                message: "this slave runs no containers (no OCI runtime passed its start probe)"
                    .into(),
            };
            self.image_failed(&a, &e);
            return;
        };
        self.fetching.insert((a.task, a.attempt), Vec::new());
        let mailbox = self.mailbox.clone();
        tokio::task::spawn_blocking(move || {
            let reference = a.image.clone().unwrap_or_default();
            tracing::debug!(task = %a.task, image = %reference, "getting the task's image");
            let image = containers.store.get(&reference);
            let _ = mailbox.send(super::AgentMsg::ImageReady {
                assignment: a,
                image,
            });
        });
    }

    /// A container task's image is there (or is not): started, or ended with reason
    /// `image`; stopped instead when a stop came while it was got.
    pub(super) fn image_ready(
        &mut self,
        a: Assignment,
        image: Result<crate::container::store::Image, crate::container::store::ImageError>,
    ) {
        let stops = self
            .fetching
            .remove(&(a.task, a.attempt))
            .unwrap_or_default();
        let image = match image {
            Ok(i) => i,
            Err(e) => return self.image_failed(&a, &e),
        };
        let name = attempt::attempt_name(a.task, a.attempt);
        if let Some(c) = &self.launcher.containers {
            // Held until the attempt's end (`Containers::finish`), also when it had started
            // before this agent and is watched again.
            c.hold(&name, &image.digest);
        }
        if !stops.is_empty() {
            if let Some(c) = &self.launcher.containers {
                c.finish(&name);
            }
            tracing::info!(task = %a.task, attempt = a.attempt, "stopped while its image was got");
            self.exited(a.task, a.attempt, -15, None, None, stops);
            return;
        }
        let launched = self
            .launcher
            .prepare_container(&a, &image)
            .and_then(|(dir, spec)| {
                self.launch
                    .launch(&dir, &spec)
                    .map_err(|source| SpawnError::Io {
                        path: self.launch.home(),
                        source,
                    })
            });
        let never_ran = matches!(&launched, Err(e) if !matches!(e, SpawnError::AlreadyStarted(_)));
        if never_ran {
            if let Some(c) = &self.launcher.containers {
                c.finish(&name);
            }
        }
        self.started(a, launched);
    }

    /// Ends a container task whose image could not be had: reason `image`, the detail
    /// naming the image and the step.
    fn image_failed(&mut self, a: &Assignment, e: &crate::container::store::ImageError) {
        let detail = e.to_string();
        tracing::error!(task = %a.task, attempt = a.attempt, %detail, "container task cannot start");
        attempt::note_in_err_log(&self.launcher.log_dir, a, &format!("hetsched: {detail}"));
        self.finished_detail(
            a.task,
            a.attempt,
            attempt::EXIT_CANNOT_START,
            Some(TaskReason::Image),
            None,
            Some(detail),
        );
    }

    /// Starts the watcher of an attempt.
    pub(super) fn watch(&mut self, w: Watched) {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        self.running.insert((w.task, w.attempt), stop_tx);
        tokio::spawn(w.run(self.grace, stop_rx, self.mailbox.clone()));
    }

    /// between calls. Its store record stays `Queued`, so a slave restart runs it again.
    fn start_program(
        &mut self,
        a: Assignment,
        program: Result<hetsched_common::program::Program, String>,
        hooks: ProgramHooks,
    ) {
        let (task, attempt) = (a.task, a.attempt);
        let program = match program {
            Ok(p) => p,
            Err(why) => {
                tracing::error!(task = %task, attempt, %why, "program task cannot start");
                attempt::note_in_err_log(&self.launcher.log_dir, &a, &format!("hetsched: {why}"));
                self.finished(
                    task,
                    attempt,
                    crate::program::EXIT_BAD_PROGRAM,
                    Some(TaskReason::CannotStart),
                    None,
                );
                return;
            }
        };
        metrics::counter!("hetsched_slave_tasks_started_total").increment(1);
        tracing::info!(task = %task, attempt, calls = program.calls.len(), "program task started");
        let _ = self.reports.send(TaskReport::Started { task, attempt });
        let (stop_tx, mut stop_rx) = mpsc::unbounded_channel::<StopRequest>();
        self.running.insert((task, attempt), stop_tx);
        let (log_dir, mailbox) = (self.launcher.log_dir.clone(), self.mailbox.clone());
        tokio::spawn(async move {
            // Runs inside the slave: its wall time is known, its CPU and memory are not.
            let started = std::time::Instant::now();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (flag, rt) = (stop.clone(), hooks.runtime.clone());
            let mut job =
                tokio::task::spawn_blocking(move || rt.run(&a, &program, &log_dir, &flag));
            let mut replies = Vec::new();
            let result = loop {
                tokio::select! {
                    r = &mut job => break r,
                    Some(r) = stop_rx.recv() => {
                        stop.store(true, std::sync::atomic::Ordering::SeqCst);
                        replies.extend(r.reply);
                    }
                }
            };
            let (records, exit_code) = result.unwrap_or_else(|e| {
                tracing::error!(task = %task, attempt, error = %e, "program runner failed");
                (Vec::new(), crate::program::EXIT_BAD_PROGRAM)
            });
            if !records.is_empty() {
                let summary = hetsched_common::program::CallSummary::of(&records);
                let _ = hooks.announce.send(crate::announce::Announcement::Calls {
                    task,
                    attempt,
                    summary,
                });
            }
            while let Ok(r) = stop_rx.try_recv() {
                replies.extend(r.reply);
            }
            let _ = mailbox.send(AgentMsg::Exited {
                task,
                attempt,
                exit_code,
                reason: TaskReason::of_exit_code(exit_code),
                usage: Some(hetsched_common::protocol::UsageRecord {
                    elapsed_ms: Some(started.elapsed().as_millis() as u64),
                    ..Default::default()
                }),
                replies,
            });
        });
    }
}
