//! The seeded workload: users of different priorities, the jobs they submit (command tasks
//! that record each attempt in the side-effect file, and API programs), and the submit that
//! records its invocation and outcome in the history.

use super::super::client::{call, short};
use super::observe::Recorder;
use hetsched_chaos::history::Event;
use hetsched_chaos::Scenario;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::rng::SplitMix64;
use hetsched_common::{ClientRequestId, FlowSpec, FlowStep, JobId, JobSpec, ResourceRequest};
use std::path::Path;

/// The workload's users and the S1 priorities a local run configures for them (carol has no
/// entry: the base priority 0), so that alice's jobs may preempt bob's and carol's.
const USERS: [(&str, Option<i64>); 3] = [("alice", Some(10)), ("bob", Some(5)), ("carol", None)];

/// The priority configuration of a local run's workload.
pub(super) fn workload_priorities() -> hetsched_common::priority::PriorityConfig {
    use hetsched_common::priority::{Principal, PriorityConfig, PriorityEntry, Quota};
    PriorityConfig {
        entries: USERS
            .iter()
            .filter_map(|(user, p)| {
                p.map(|priority| PriorityEntry {
                    who: Principal::User(user.to_string()),
                    partition: "default".into(),
                    priority,
                    quota: Quota::default(),
                })
            })
            .collect(),
        ..Default::default()
    }
}

/// One seeded job of the workload: a command job whose tasks append `TASK ATTEMPT` to the
/// side-effect file, or (a `program_share` of them) an API program of sha256 and sort calls.
/// Named `{tag}-{n}` so an attached run can tell its jobs from the cluster's others.
pub(super) fn workload_job(
    rng: &mut SplitMix64,
    sc: &Scenario,
    effects: &Path,
    tag: &str,
    n: u64,
) -> JobSpec {
    let count = 1 + rng.below(u64::from(sc.max_tasks_per_job)) as u32;
    let user = USERS[rng.below(USERS.len() as u64) as usize].0;
    let cpu_milli = 250 + 250 * rng.below(4);
    // Draws in a fixed order whatever the job kind, so the seed replays the same workload.
    let program_draw = rng.below(1000);
    let data_seed = rng.next_u64();
    let mut spec = JobSpec {
        name: format!("{tag}-{n}"),
        user: user.into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli,
            mem_mib: 32,
            ..Default::default()
        },
        count,
        ..Default::default()
    };
    if (program_draw as f64) < sc.program_share * 1000.0 {
        use hetsched_common::program::{Api, ApiCall, Program};
        spec.program = Some(Program {
            calls: vec![
                ApiCall::new(Api::Sha256, 1 << 16, data_seed),
                ApiCall::new(Api::Sort, 1 << 12, data_seed),
            ],
        });
    } else {
        let secs = sc.task_time.as_secs_f64();
        let script = format!(
            "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> '{}'; sleep {secs:.2}",
            effects.display()
        );
        spec.command = vec!["sh".into(), "-c".into(), script];
    }
    spec
}

/// Submits one job as operation `op`, recording the invocation and its ack or failure.
pub(super) async fn submit(
    masters: Vec<String>,
    rec: Recorder,
    op: u64,
    request: u64,
    spec: JobSpec,
) {
    submit_one(&masters, &rec, op, request, spec).await;
}

/// Issue 51: submits `specs` as a chain, each job `after` the one before, as operations
/// `first_op`, `first_op + 1`, ... (requests in the same order); a step whose submission
/// failed ends the chain (what follows it would name a job that may not exist).
pub(super) async fn submit_chain(
    masters: Vec<String>,
    rec: Recorder,
    first_op: u64,
    requests: Vec<u64>,
    specs: Vec<JobSpec>,
) {
    let mut before: Option<u64> = None;
    for (k, (request, mut spec)) in requests.into_iter().zip(specs).enumerate() {
        spec.after = before.map(hetsched_common::JobId).into_iter().collect();
        before = submit_one(&masters, &rec, first_op + k as u64, request, spec).await;
        if before.is_none() {
            return;
        }
    }
}

/// Issue 51: the flow the workload submits from `specs` (at least three): the first is step
/// `prep`, the last `join`, those between `step-1`, `step-2`, ... each needing `prep`, and
/// `join` needing all of them. A flow is one user's: every step takes the first one's user.
pub(super) fn workload_flow(specs: Vec<JobSpec>) -> FlowSpec {
    let last = specs.len().saturating_sub(1);
    let user = specs.first().map(|s| s.user.clone()).unwrap_or_default();
    let middle: Vec<String> = (1..last).map(|k| format!("step-{k}")).collect();
    let steps = specs
        .into_iter()
        .enumerate()
        .map(|(k, mut spec)| {
            spec.user = user.clone();
            if k == 0 {
                return FlowStep::new("prep", spec);
            }
            if k == last {
                let mut s = FlowStep::new("join", spec);
                s.needs = middle.clone();
                return s;
            }
            let mut s = FlowStep::new(&middle[k - 1], spec);
            s.needs = vec!["prep".into()];
            s
        })
        .collect();
    FlowSpec { steps }
}

/// Issue 51: submits `flow` in one request (as `submit-flow` does), its steps as operations
/// `first_op`, `first_op + 1`, ... in the flow's order: each step's invocation, then either
/// each step's ack (its job and, asked after the commit, its tasks) or each step's failure.
pub(super) async fn submit_flow(
    masters: Vec<String>,
    rec: Recorder,
    first_op: u64,
    request: u64,
    flow: FlowSpec,
) {
    let t_ms = rec.now_ms();
    for (k, step) in flow.steps.iter().enumerate() {
        let needs = match step.needs.is_empty() {
            true => String::new(),
            false => format!(" needs={}", step.needs.join(",")),
        };
        rec.push(Event::Invoke {
            t_ms,
            op: first_op + k as u64,
            what: format!(
                "submit {} user={} count={}{} flow-step={}{needs}",
                step.spec.name,
                step.spec.user,
                step.spec.count,
                if step.spec.program.is_some() {
                    " program"
                } else {
                    ""
                },
                step.name
            ),
        });
    }
    let steps: Vec<(String, bool)> = flow
        .steps
        .iter()
        .map(|s| (s.name.clone(), s.spec.program.is_some()))
        .collect();
    let req = ClientRequest::SubmitFlow {
        request: ClientRequestId(request),
        flow,
    };
    let error = match call(&masters, req, false).await {
        Ok(ClientResponse::FlowSubmitted(f)) => {
            for (k, (name, program)) in steps.into_iter().enumerate() {
                let Some(&job) = f.jobs.get(&name) else {
                    continue;
                };
                let tasks = job_tasks(&masters, &rec, job).await;
                rec.push(Event::Ack {
                    t_ms: rec.now_ms(),
                    op: first_op + k as u64,
                    job: job.0,
                    tasks,
                    program,
                });
            }
            return;
        }
        Ok(other) => short(&other),
        Err(e) => e.to_string(),
    };
    for k in 0..steps.len() {
        rec.push(Event::Fail {
            t_ms: rec.now_ms(),
            op: first_op + k as u64,
            error: error.clone(),
        });
    }
}

/// The tasks of an acknowledged job (a flow's answer names jobs only); none, with a note,
/// where the cluster does not answer (`acked-lost` then checks the job's tasks no further).
async fn job_tasks(masters: &[String], rec: &Recorder, job: JobId) -> Vec<u64> {
    let req = ClientRequest::Tasks {
        stale: false,
        job: Some(job),
        filter: Default::default(),
    };
    match call(masters, req, false).await {
        Ok(ClientResponse::Tasks(t)) => t.iter().map(|t| t.id.0).collect(),
        Ok(other) => {
            rec.note(format!("tasks of {job}: {}", short(&other)));
            Vec::new()
        }
        Err(e) => {
            rec.note(format!("tasks of {job}: {e}"));
            Vec::new()
        }
    }
}

/// Submits one job as operation `op`, recording the invocation and its ack or failure;
/// the job's id once acknowledged.
async fn submit_one(
    masters: &[String],
    rec: &Recorder,
    op: u64,
    request: u64,
    spec: JobSpec,
) -> Option<u64> {
    let program = spec.program.is_some();
    let after = match spec.after.first() {
        Some(j) => format!(" after={}", j.0),
        None => String::new(),
    };
    rec.push(Event::Invoke {
        t_ms: rec.now_ms(),
        op,
        what: format!(
            "submit {} user={} count={}{}{after}",
            spec.name,
            spec.user,
            spec.count,
            if program { " program" } else { "" }
        ),
    });
    let req = ClientRequest::Submit {
        request: ClientRequestId(request),
        spec,
        allow_unplaceable: false,
    };
    let error = match call(masters, req, false).await {
        Ok(ClientResponse::Submitted { job, tasks }) => {
            rec.push(Event::Ack {
                t_ms: rec.now_ms(),
                op,
                job: job.0,
                tasks: tasks.iter().map(|t| t.0).collect(),
                program,
            });
            return Some(job.0);
        }
        Ok(other) => short(&other),
        Err(e) => e.to_string(),
    };
    rec.push(Event::Fail {
        t_ms: rec.now_ms(),
        op,
        error,
    });
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, user: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            user: user.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_workload_flow_is_prep_then_parallel_steps_then_join_of_one_user() {
        let specs = ["a", "b", "c", "d"]
            .iter()
            .zip(["bob", "alice", "carol", "alice"])
            .map(|(n, u)| spec(n, u))
            .collect();
        let f = workload_flow(specs);
        let names: Vec<&str> = f.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["prep", "step-1", "step-2", "join"]);
        assert!(f.steps[0].needs.is_empty());
        assert_eq!(f.steps[1].needs, ["prep"]);
        assert_eq!(f.steps[2].needs, ["prep"]);
        assert_eq!(f.steps[3].needs, ["step-1", "step-2"]);
        assert!(f.steps.iter().all(|s| s.spec.user == "bob"));
        assert_eq!(f.steps[3].spec.name, "d");
        assert_eq!(f.order().map(|o| o.len()), Ok(4));
    }
}
