//! The commands that change the cluster: submit, cancel, and the member changes (with the
//! member listing that shares their command).

use super::args::{CancelArgs, MembersAction, MembersArgs, SubmitArgs};
use super::call::{block_on, call, keyed_request_id, request_id, short};
use super::spec::submission_from;
use crate::cmd::{exit, table};
use anyhow::anyhow;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::{JobId, TaskId};

/// `submit`.
pub fn submit(masters: &[String], a: SubmitArgs) -> anyhow::Result<()> {
    let submission = submission_from(&a)?;
    if a.dry_run {
        return crate::cmd::config::dry_run(masters, submission.spec, a.json);
    }
    let req = ClientRequest::Submit {
        request: keyed_request_id(a.idempotency_key.as_deref())?,
        spec: submission.spec,
        allow_unplaceable: submission.allow_unplaceable,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Submitted { job, tasks } => {
            if a.json {
                crate::cmd::print_json(&serde_json::json!({ "job_id": job, "tasks": tasks.len() }))
            } else {
                println!("submitted {job} with {} task(s)", tasks.len());
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// What `cancel` was asked to cancel.
enum CancelTarget {
    Job(JobId),
    Task(TaskId),
    /// S2: every job of a batch (`batch-N`).
    Batch(u64),
    /// Issue 51: every unfinished step of a flow (`flow-N`).
    Flow(u64),
}

fn cancel_target(a: &CancelArgs) -> anyhow::Result<CancelTarget> {
    match (&a.job, a.task) {
        (_, Some(t)) => Ok(CancelTarget::Task(t)),
        (Some(s), None) if s.trim().starts_with("batch-") => {
            crate::cmd::batch::parse_batch_id(s).map(CancelTarget::Batch)
        }
        (Some(s), None) if s.trim().starts_with("flow-") => {
            crate::cmd::flow::parse_flow_id(s).map(CancelTarget::Flow)
        }
        (Some(s), None) if s.trim().starts_with("task-") => s
            .parse::<TaskId>()
            .map(CancelTarget::Task)
            .map_err(|e| exit::bad_input(e.to_string())),
        (Some(s), None) => s
            .parse::<JobId>()
            .map(CancelTarget::Job)
            .map_err(|e| exit::bad_input(e.to_string())),
        (None, None) => Err(exit::bad_input("give a JOB or --task ID")),
    }
}

/// `cancel`.
pub fn cancel(masters: &[String], a: CancelArgs) -> anyhow::Result<()> {
    let req = match cancel_target(&a)? {
        CancelTarget::Job(job) => ClientRequest::Cancel {
            request: request_id(),
            job,
        },
        CancelTarget::Task(task) => ClientRequest::CancelTask {
            request: request_id(),
            task,
        },
        CancelTarget::Batch(batch) => ClientRequest::CancelBatch {
            request: request_id(),
            batch,
        },
        CancelTarget::Flow(flow) => ClientRequest::CancelFlow {
            request: request_id(),
            flow,
        },
    };
    let (batch, flow) = match &req {
        ClientRequest::CancelBatch { batch, .. } => (Some(*batch), None),
        ClientRequest::CancelFlow { flow, .. } => (None, Some(*flow)),
        _ => (None, None),
    };
    let task = match &req {
        ClientRequest::CancelTask { task, .. } => Some(*task),
        _ => None,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Cancelled { job, tasks } => {
            if a.json {
                let mut v = serde_json::json!({ "job_id": job, "cancelled": tasks });
                if let Some(t) = task {
                    v["task_id"] = serde_json::json!(t);
                }
                if let Some(b) = batch {
                    v["batch_id"] = serde_json::json!(b);
                }
                if let Some(f) = flow {
                    v["flow_id"] = serde_json::json!(f);
                }
                crate::cmd::print_json(&v)
            } else {
                match task {
                    Some(t) if tasks == 0 => println!("{t} had already ended; nothing cancelled"),
                    Some(t) => println!("cancelled {t} of {job}"),
                    None if batch.is_some() => {
                        println!("cancelled {tasks} task(s) of batch-{}", batch.unwrap_or(0))
                    }
                    None if flow.is_some() => {
                        println!("cancelled {tasks} task(s) of flow-{}", flow.unwrap_or(0))
                    }
                    None => println!("cancelled {tasks} task(s) of {job}"),
                }
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `members`.
pub fn members(masters: &[String], a: MembersArgs) -> anyhow::Result<()> {
    use hetsched_common::MasterId;
    let (req, what) = match &a.action {
        None => {
            let stale = a.stale || a.local;
            match block_on(call(masters, ClientRequest::Members { stale }, a.local))?? {
                ClientResponse::Members(ms) => {
                    if a.json {
                        return crate::cmd::print_json(&ms);
                    }
                    let mut t = table::new(&["ID", "ADDR", "ROLE", "LEADER", "MATCH"]);
                    for m in ms {
                        t.add_row(vec![
                            m.id.0.to_string(),
                            m.addr.unwrap_or_else(|| "?".into()),
                            if m.voter { "voter" } else { "learner" }.to_string(),
                            if m.leader { "yes" } else { "" }.to_string(),
                            m.match_index.map_or("-".into(), |i| i.to_string()),
                        ]);
                    }
                    return table::print(&t);
                }
                other => return Err(anyhow!("unexpected answer: {}", short(&other))),
            }
        }
        Some(MembersAction::Add { id, addr }) => {
            hetsched_common::parse_host_port(addr).map_err(|e| exit::bad_input(e.to_string()))?;
            (
                ClientRequest::AddMember {
                    id: MasterId(*id),
                    addr: addr.clone(),
                },
                format!("added master {id} at {addr}"),
            )
        }
        Some(MembersAction::Remove { id }) => (
            ClientRequest::RemoveMember { id: MasterId(*id) },
            format!("removed master {id}"),
        ),
        Some(MembersAction::TransferLeader { id }) => (
            ClientRequest::TransferLeader { id: MasterId(*id) },
            format!("master {id} now leads"),
        ),
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Done => {
            if a.json {
                crate::cmd::print_json(&serde_json::json!({ "ok": true, "message": what }))
            } else {
                println!("{what}");
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}
