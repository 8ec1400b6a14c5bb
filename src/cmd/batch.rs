//! `submit-batch FILE [-- CMD...]` and `batch BATCH`: S2 data-local batches in the cluster
//! (docs/DESIGN.md §S2, docs/CONTRACT.md "Batch jobs").
//!
//! The file is checked here (so a bad one exits 2 with its path and line before anything
//! is sent) and sent as it is: the leader plans it against its live view of the slaves.

use super::client::{block_on, call, request_id, short, ReadFlags};
use super::exit;
use anyhow::anyhow;
use hetsched_common::protocol::{BatchInfo, BatchSubmit, ClientRequest, ClientResponse};
use hetsched_master_core::plan::batch_submit::parse_batch_file;

/// `submit-batch`.
#[derive(clap::Args, Debug)]
pub struct SubmitBatchArgs {
    /// The batch: the course's plain-text format, or the planner's JSON with replicas (plus
    /// `"hosts": [slave names]` and per job `"command"`, `"name"`).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// User (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Print one JSON line `{"batch_id", "jobs", "tasks", "planned_makespan_s"}`.
    #[arg(long)]
    pub json: bool,
    /// The command of every job whose entry in the file names none.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `batch`.
#[derive(clap::Args, Debug)]
pub struct BatchArgs {
    /// The batch (`3` or `batch-3`).
    #[arg(value_name = "BATCH")]
    pub batch: String,
    #[command(flatten)]
    pub read: ReadFlags,
}

/// A batch id as users write it: `N` or `batch-N`.
pub fn parse_batch_id(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    t.strip_prefix("batch-")
        .unwrap_or(t)
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| exit::bad_input(format!("{s:?} is not a batch (give N or batch-N)")))
}

/// `submit-batch`.
pub fn submit(masters: &[String], a: SubmitBatchArgs) -> anyhow::Result<()> {
    let path = &a.file;
    let file = std::fs::read_to_string(path)
        .map_err(|e| exit::bad_input(format!("cannot read batch file {path}: {e}")))?;
    parse_batch_file(&file).map_err(|e| exit::bad_input(format!("{path}: {e}")))?;
    let user = a
        .user
        .clone()
        .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "anonymous".into()));
    let req = ClientRequest::SubmitBatch {
        request: request_id(),
        batch: BatchSubmit {
            file,
            command: a.command.clone(),
            user,
        },
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::BatchSubmitted(b) => {
            if a.json {
                return super::print_json(&b);
            }
            println!(
                "submitted batch-{}: {} job(s), {} task(s), planned makespan {:.2}s",
                b.batch_id,
                b.jobs.len(),
                b.tasks,
                b.planned_makespan_s
            );
            Ok(())
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `batch`.
pub fn show(masters: &[String], a: BatchArgs) -> anyhow::Result<()> {
    let id = parse_batch_id(&a.batch)?;
    let req = ClientRequest::Batch {
        stale: a.read.stale(),
        batch: id,
    };
    match block_on(call(masters, req, a.read.local))?? {
        ClientResponse::Batch(b) => {
            if a.read.json {
                return super::print_json(&b);
            }
            print!("{}", render(&b));
            Ok(())
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| format!("{s:.2}"))
}

/// The table `batch` prints: planned against actual per job, then the totals.
pub fn render(b: &BatchInfo) -> String {
    let mut t = super::table::new(&[
        "JOB",
        "STATE",
        "TASKS",
        "PLANNED START",
        "PLANNED FINISH",
        "ACTUAL FINISH",
    ]);
    for j in &b.jobs {
        t.add_row(vec![
            format!("job-{}", j.job_id.0),
            j.state.clone(),
            j.tasks.len().to_string(),
            format!("{:.2}", j.planned_start_s),
            format!("{:.2}", j.planned_finish_s),
            secs(j.actual_finish_s),
        ]);
    }
    let replans = if b.replans > 0 {
        format!(" ({} re-plan(s) after lost slaves)", b.replans)
    } else {
        String::new()
    };
    let rows: Vec<String> = t
        .lines()
        .map(|l| {
            l.trim_end()
                .strip_prefix(' ')
                .unwrap_or(l.trim_end())
                .to_string()
        })
        .collect();
    format!(
        "{}\nbatch-{}: planned makespan {:.2}s, actual {}{replans}\n",
        rows.join("\n"),
        b.batch_id,
        b.planned_makespan_s,
        b.actual_makespan_s
            .map_or_else(|| "- (running)".into(), |s| format!("{s:.2}s")),
    )
}
