//! Operator commands: `logs`, `watch`, `drain`, `undrain`, `job validate`, `completions`.

use super::client::{block_on, call, read_job_file, request_id, short};
use super::exit;
use anyhow::anyhow;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ListFilter, NodeInfo, TaskInfo};
use hetsched_common::{Attempt, JobId, TaskId, TaskState};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Arguments of `hetsched logs`.
#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The task (`17`, `task-17`).
    #[arg(value_name = "TASK")]
    pub task: TaskId,
    /// Keep printing new output until the attempt ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Standard error instead of standard output.
    #[arg(long)]
    pub stderr: bool,
    /// Which attempt (default: the latest).
    #[arg(long, value_name = "N")]
    pub attempt: Option<Attempt>,
    /// Print {"task_id", "attempt", "node_id", "stream", "bytes", "data"} as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched watch`.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The job (`5`, `job-5`).
    #[arg(value_name = "JOB")]
    pub job: JobId,
    /// At most one refresh per DURATION, e.g. 500ms; between two, `watch` waits for the
    /// job's next change (a long poll, docs/guide/api.md), not polling.
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub interval: String,
    /// Print the final counts as one JSON line (no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched drain`.
#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The node (name, id or `node-N`).
    #[arg(value_name = "NODE")]
    pub node: String,
    /// After this long (e.g. 10m), stop what still runs there and re-queue it with reason
    /// "drained". Without it, running tasks may finish however long they take.
    #[arg(long, value_name = "DURATION")]
    pub deadline: Option<String>,
    /// Print the node as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched undrain`.
#[derive(clap::Args, Debug)]
pub struct UndrainArgs {
    /// The node (name, id or `node-N`).
    #[arg(value_name = "NODE")]
    pub node: String,
    /// Print the node as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// `hetsched job` actions.
#[derive(clap::Subcommand, Debug)]
pub enum JobAction {
    /// Check a job spec file (TOML or JSON) without submitting it; exit 2 if invalid.
    Validate {
        /// The file.
        #[arg(value_name = "FILE")]
        file: String,
        /// Print {"valid": ..., ...} as one JSON line.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `hetsched completions`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `completions`: prints the completion script of `cmd` for a shell on stdout.
pub fn completions(a: CompletionsArgs, cmd: &mut clap::Command) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(a.shell, cmd, "hetsched", &mut out);
    out.flush()?;
    Ok(())
}

/// `job validate`.
pub fn job(a: JobAction) -> anyhow::Result<()> {
    let JobAction::Validate { file, json } = a;
    let checked = read_job_file(&file).and_then(|f| {
        f.to_spec(&std::env::var("USER").unwrap_or_else(|_| "anonymous".into()))
            .map_err(|e| exit::bad_input(format!("{file}: {e}")))
    });
    match checked {
        Ok(spec) => {
            if json {
                super::print_json(&serde_json::json!({ "valid": true, "spec": spec }))
            } else {
                println!(
                    "{file}: valid: job {:?} of user {:?}, {} task(s) running {:?}",
                    spec.name, spec.user, spec.count, spec.command
                );
                Ok(())
            }
        }
        Err(e) => {
            if json {
                let parsed = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| hetsched_common::jobfile::parse_job_file(&file, &t).err());
                let v = match parsed {
                    Some(p) => serde_json::json!({
                        "valid": false, "file": p.file, "line": p.line, "column": p.column,
                        "field": p.field, "message": p.message,
                    }),
                    None => {
                        serde_json::json!({ "valid": false, "file": file, "message": e.to_string() })
                    }
                };
                super::print_json(&v)?;
            }
            Err(e)
        }
    }
}

/// `drain`.
pub fn drain(masters: &[String], a: DrainArgs) -> anyhow::Result<()> {
    let deadline_after_ms = a
        .deadline
        .as_deref()
        .map(|d| {
            hetsched_common::jobfile::parse_duration_ms(d)
                .map_err(|e| exit::bad_input(format!("--deadline: {e}")))
        })
        .transpose()?;
    let req = ClientRequest::Drain {
        request: request_id(),
        node: a.node.clone(),
        deadline_after_ms,
    };
    let n = node_answer(block_on(call(masters, req, false))??)?;
    if a.json {
        return super::print_json(&n);
    }
    match n.drain_deadline_ms {
        Some(ms) => println!(
            "{} ({}) is draining: no new tasks; what still runs there at {} is stopped and re-queued",
            n.id,
            n.name,
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_millis(ms)
            )
        ),
        None => println!(
            "{} ({}) is draining: no new tasks; its {} running task(s) may finish",
            n.id, n.name, n.tasks
        ),
    }
    Ok(())
}

/// `undrain`.
pub fn undrain(masters: &[String], a: UndrainArgs) -> anyhow::Result<()> {
    let req = ClientRequest::Undrain {
        request: request_id(),
        node: a.node.clone(),
    };
    let n = node_answer(block_on(call(masters, req, false))??)?;
    if a.json {
        return super::print_json(&n);
    }
    println!("{} ({}) takes new tasks again", n.id, n.name);
    Ok(())
}

fn node_answer(r: ClientResponse) -> anyhow::Result<NodeInfo> {
    match r {
        ClientResponse::Node(n) => Ok(n),
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `logs`: copies an attempt's output to stdout, chunk by chunk; with `--follow`, keeps
/// polling until the attempt has ended and everything it wrote was printed.
pub fn logs(masters: &[String], a: LogsArgs) -> anyhow::Result<()> {
    block_on(async {
        let mut offset = 0u64;
        let mut collected: Vec<u8> = Vec::new();
        let mut last: Option<(Attempt, Option<hetsched_common::NodeId>)> = None;
        loop {
            let req = ClientRequest::Logs {
                task: a.task,
                attempt: a.attempt,
                stderr: a.stderr,
                offset,
                max_bytes: 0,
            };
            let chunk = match call(masters, req, false).await? {
                ClientResponse::Logs(c) => c,
                other => return Err(anyhow!("unexpected answer: {}", short(&other))),
            };
            // The latest attempt changed under --follow (a retry, a re-queue): start over
            // at the beginning of the new attempt's file.
            if let Some((prev, _)) = last {
                if prev != chunk.attempt && a.attempt.is_none() {
                    if chunk.offset != 0 {
                        offset = 0;
                        last = Some((chunk.attempt, chunk.node));
                        continue;
                    }
                    if !a.json && prev != 0 {
                        eprintln!("--- {} attempt {} ---", a.task, chunk.attempt);
                    }
                }
            }
            let got = chunk.data.len() as u64;
            if a.json {
                collected.extend_from_slice(&chunk.data);
            } else if got > 0 {
                let mut out = std::io::stdout().lock();
                out.write_all(&chunk.data)?;
                out.flush()?;
            }
            offset = chunk.offset + got;
            let more_now = offset < chunk.size;
            let finished = chunk.task_final && !more_now;
            last = Some((chunk.attempt, chunk.node));
            if more_now {
                continue;
            }
            if !a.follow || finished {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if a.json {
            let (attempt, node) = last.unzip();
            let node = node.flatten();
            super::print_json(&serde_json::json!({
                "task_id": a.task,
                "attempt": attempt,
                "node_id": node,
                "stream": if a.stderr { "stderr" } else { "stdout" },
                "bytes": collected.len(),
                "data": String::from_utf8_lossy(&collected),
            }))?;
        }
        anyhow::Ok(())
    })?
}

/// Task counts of a job, by state.
#[derive(Debug, Default, serde::Serialize)]
struct Progress {
    job_id: JobId,
    tasks: usize,
    pending: usize,
    assigned: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
    cancelled: usize,
}

impl Progress {
    fn of(job: JobId, tasks: &[TaskInfo]) -> Self {
        let mut p = Progress {
            job_id: job,
            tasks: tasks.len(),
            ..Default::default()
        };
        for t in tasks {
            match t.state {
                TaskState::Pending => p.pending += 1,
                TaskState::Assigned => p.assigned += 1,
                TaskState::Running => p.running += 1,
                TaskState::Succeeded => p.succeeded += 1,
                TaskState::Failed => p.failed += 1,
                TaskState::Cancelled => p.cancelled += 1,
            }
        }
        p
    }

    fn done(&self) -> usize {
        self.succeeded + self.failed + self.cancelled
    }

    fn line(&self) -> String {
        format!(
            "{} pending, {} running, {} succeeded, {} failed, {} cancelled",
            self.pending + self.assigned,
            self.running,
            self.succeeded,
            self.failed,
            self.cancelled
        )
    }
}

/// `watch`: follows a job until every task has ended; exit 0 when all succeeded, 1 when
/// any failed or was cancelled.
/// Longest long poll of one `watch` round (under the client's 10 s call timeout).
const WATCH_WAIT_MS: u64 = 5_000;

pub fn watch(masters: &[String], a: WatchArgs) -> anyhow::Result<()> {
    let interval = hetsched_common::jobfile::parse_duration_ms(&a.interval)
        .map(Duration::from_millis)
        .map_err(|e| exit::bad_input(format!("--interval: {e}")))?
        .max(Duration::from_millis(50));
    let bar = (!a.json && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} done ({elapsed}) {msg}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b.set_prefix(a.job.to_string());
        b
    });
    let progress = block_on(async {
        let mut last_print = Instant::now() - Duration::from_secs(10);
        loop {
            let req = ClientRequest::Tasks {
                stale: false,
                job: None,
                filter: ListFilter {
                    job: Some(a.job),
                    ..Default::default()
                },
            };
            let tasks = match call(masters, req, false).await? {
                ClientResponse::Tasks(t) => t,
                other => return Err(anyhow!("unexpected answer: {}", short(&other))),
            };
            let p = Progress::of(a.job, &tasks);
            match &bar {
                Some(b) => {
                    b.set_length(p.tasks as u64);
                    b.set_position(p.done() as u64);
                    b.set_message(p.line());
                }
                // Not a terminal: a line now and then on stderr.
                None if !a.json && last_print.elapsed() >= Duration::from_secs(2) => {
                    eprintln!("{}: {}/{} done: {}", a.job, p.done(), p.tasks, p.line());
                    last_print = Instant::now();
                }
                None => {}
            }
            if p.done() == p.tasks {
                return anyhow::Ok(p);
            }
            // Issue 55: the job's next change (a long poll, no polling while nothing
            // happens), then at most one refresh per --interval.
            let asked = Instant::now();
            let wait = ClientRequest::WaitJob {
                job: a.job,
                timeout_ms: WATCH_WAIT_MS,
                change: true,
            };
            if call(masters, wait, false).await.is_err() {
                // A master without the long poll: as before, a refresh per interval.
                tokio::time::sleep(interval).await;
            }
            tokio::time::sleep(interval.saturating_sub(asked.elapsed())).await;
        }
    })??;
    if let Some(b) = &bar {
        b.finish();
    }
    let ok = progress.succeeded == progress.tasks;
    if a.json {
        let mut v = serde_json::to_value(&progress)?;
        v["state"] = serde_json::json!(if ok { "succeeded" } else { "failed" });
        super::print_json(&v)?;
    } else {
        println!("{}: {}", a.job, progress.line());
    }
    if ok {
        Ok(())
    } else {
        Err(exit::no(format!(
            "{} did not succeed: {} failed, {} cancelled of {} task(s)",
            a.job, progress.failed, progress.cancelled, progress.tasks
        )))
    }
}
