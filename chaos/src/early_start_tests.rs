use crate::checker::Rule;
use crate::replay::{replay, LogItem, MasterLog};
use hetsched_common::{JobId, JobSpec, NodeId, ResourceRequest, TaskId};
use hetsched_master_core::state::{Assign, Command, CommandEnvelope, PlaceNew, Plan};

fn log(commands: Vec<Command>) -> MasterLog {
    MasterLog {
        master: 1,
        items: commands
            .into_iter()
            .enumerate()
            .map(|(i, c)| LogItem::Command {
                index: i as u64 + 1,
                bytes: CommandEnvelope {
                    at_ms: 1_000,
                    request: None,
                    command: c,
                }
                .encode(),
            })
            .collect(),
    }
}

fn node() -> Command {
    crate::replay::tests::register(8000)
}

fn spec(count: u32, f: impl FnOnce(&mut JobSpec)) -> JobSpec {
    let mut s = JobSpec {
        name: "j".into(),
        user: "alice".into(),
        resources: ResourceRequest {
            cpu_milli: 1000,
            mem_mib: 32,
            ..Default::default()
        },
        count,
        command: vec!["true".into()],
        ..Default::default()
    };
    f(&mut s);
    s
}

fn submit(count: u32, f: impl FnOnce(&mut JobSpec)) -> Command {
    Command::SubmitJob {
        spec: spec(count, f),
    }
}

fn assign(tasks: &[u64]) -> Command {
    Command::ApplyPlan(Plan {
        assignments: tasks
            .iter()
            .map(|t| Assign::to(TaskId(*t), NodeId(1)))
            .collect(),
        ..Default::default()
    })
}

fn finish(task: u64) -> [Command; 2] {
    [
        Command::TaskStarted {
            node: NodeId(1),
            task: TaskId(task),
            attempt: 1,
        },
        Command::TaskFinished {
            node: NodeId(1),
            task: TaskId(task),
            attempt: 1,
            exit_code: 0,
            reason: None,
        },
    ]
}

fn early(commands: Vec<Command>) -> Vec<String> {
    replay(&log(commands), None)
        .violations
        .into_iter()
        .filter(|v| v.rule == Rule::EarlyStart)
        .map(|v| v.detail)
        .collect()
}

#[test]
fn a_dependent_assigned_after_its_job_ended_is_clean() {
    let mut c = vec![
        node(),
        submit(1, |_| {}),
        submit(1, |s| s.after = vec![JobId(1)]),
        assign(&[1]),
    ];
    c.extend(finish(1));
    c.push(assign(&[2]));
    assert_eq!(early(c), Vec::<String>::new());
}

#[test]
fn a_dependent_assigned_before_its_job_ended_is_an_early_start() {
    let c = vec![
        node(),
        submit(1, |_| {}),
        submit(1, |s| s.after = vec![JobId(1)]),
        assign(&[1, 2]),
    ];
    let v = early(c);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains("index 4") && v[0].contains("job-1 pending (after)"),
        "{v:?}"
    );
}

#[test]
fn a_submission_placed_before_its_dependency_ended_is_an_early_start() {
    let c = vec![
        node(),
        submit(1, |_| {}),
        Command::SubmitPlaced {
            spec: spec(1, |s| s.after_any = vec![JobId(1)]),
            place: vec![PlaceNew {
                index: 0,
                node: NodeId(1),
                queued: false,
                engine: None,
                borrowed: false,
            }],
            queue_depth: 0,
        },
    ];
    let v = early(c);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("job-1 pending (after_any)"), "{v:?}");
}

#[test]
fn a_throttle_or_a_singleton_overrun_is_an_early_start() {
    let single = |s: &mut JobSpec| s.singleton = true;
    let c = vec![
        node(),
        submit(3, |s| s.max_running = Some(2)),
        assign(&[1, 2, 3]),
        submit(1, single),
        submit(1, single),
        assign(&[4]),
        assign(&[5]),
    ];
    let v = early(c);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].contains("job-1 has 3 tasks assigned or running, max_running 2"),
        "{v:?}"
    );
    assert!(
        v[1].contains("singleton job-3") && v[1].contains("beside job-2"),
        "{v:?}"
    );
}
