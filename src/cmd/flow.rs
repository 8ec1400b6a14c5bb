//! `submit-flow FILE` and `flow FLOW` (issue 51): a flow file's steps submitted in one log
//! entry, every step's job or none; a flow's steps with their jobs and states.
//!
//! The file is read and checked here ([`hetsched_common::flowfile`]: unknown or duplicate
//! step names and cycles exit 2 naming the file and line) before anything is sent; the
//! leader's state machine checks it again before it hands out an id.

use super::client::{block_on, call, default_user, keyed_request_id, short, ReadFlags};
use super::exit;
use anyhow::anyhow;
use hetsched_common::flowfile::{self, StepFile};
use hetsched_common::protocol::{ClientRequest, ClientResponse, FlowInfo};
use hetsched_common::{FlowSpec, JobSpec};
use std::path::Path;

/// `submit-flow`.
#[derive(clap::Args, Debug)]
pub struct SubmitFlowArgs {
    /// The flow: `[[step]]` tables, each a job spec file's keys plus `name`, `needs`,
    /// `needs_any`, `needs_fail` and `each` (docs/guide/cli.md).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Print one JSON line `{"flow_id", "jobs": {"STEP": JOB, ...}}`.
    #[arg(long)]
    pub json: bool,
    /// Make the submit idempotent: the same KEY (1 to 64 visible ASCII bytes) from the same
    /// user within 24 h answers the first flow instead of making another, through leader
    /// changes (docs/CONTRACT.md).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// `flow`.
#[derive(clap::Args, Debug)]
pub struct FlowArgs {
    /// The flow (`3` or `flow-3`).
    #[arg(value_name = "FLOW")]
    pub flow: String,
    #[command(flatten)]
    pub read: ReadFlags,
}

/// A flow id as users write it: `N` or `flow-N`.
pub fn parse_flow_id(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    t.strip_prefix("flow-")
        .unwrap_or(t)
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| exit::bad_input(format!("{s:?} is not a flow (give N or flow-N)")))
}

/// Reads and checks a flow file; every failure is bad input (exit 2) naming the file.
pub fn read_flow(path: &str) -> anyhow::Result<FlowSpec> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| exit::bad_input(format!("cannot read flow file {path}: {e}")))?;
    let file =
        flowfile::parse_flow_file(path, &text).map_err(|e| exit::bad_input(e.to_string()))?;
    let user = default_user();
    file.to_flow_with(|s| step_spec(path, s, &user))
        .map_err(|e| exit::bad_input(e.to_string()))
}

/// A step's job; a `program = "FILE"` is read relative to the flow file.
fn step_spec(path: &str, s: &StepFile, user: &str) -> Result<JobSpec, String> {
    let program = match &s.job.program {
        Some(p) => {
            if s.job.command.as_ref().is_some_and(|c| !c.is_empty()) {
                return Err("a step runs either a command or a program, not both".into());
            }
            let at = Path::new(path).parent().unwrap_or(Path::new("")).join(p);
            Some(hetsched_common::program::read_program(&at).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    flowfile::step_spec(s, user, program)
}

/// `submit-flow`.
pub fn submit(masters: &[String], a: SubmitFlowArgs) -> anyhow::Result<()> {
    let flow = read_flow(&a.file)?;
    let req = ClientRequest::SubmitFlow {
        request: keyed_request_id(a.idempotency_key.as_deref())?,
        flow,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::FlowSubmitted(f) => {
            if a.json {
                return super::print_json(&f);
            }
            let steps: Vec<String> = f
                .jobs
                .iter()
                .map(|(name, job)| format!("{name}={job}"))
                .collect();
            println!("submitted flow-{}: {}", f.flow_id, steps.join(" "));
            Ok(())
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `flow`.
pub fn show(masters: &[String], a: FlowArgs) -> anyhow::Result<()> {
    let id = parse_flow_id(&a.flow)?;
    let req = ClientRequest::Flow {
        stale: a.read.stale(),
        flow: id,
    };
    match block_on(call(masters, req, a.read.local))?? {
        ClientResponse::Flow(f) => {
            if a.read.json {
                return super::print_json(&f);
            }
            print!("{}", render(&f));
            Ok(())
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// The table `flow` prints: one row per step, in the file's order.
pub fn render(f: &FlowInfo) -> String {
    let mut t = super::table::new(&["STEP", "JOB", "STATE", "TASKS"]);
    for s in &f.steps {
        t.add_row(vec![
            s.name.clone(),
            s.job_id.to_string(),
            s.state.clone(),
            s.tasks.to_string(),
        ]);
    }
    format!("flow-{} of {}\n{t}\n", f.flow_id, f.user)
}
