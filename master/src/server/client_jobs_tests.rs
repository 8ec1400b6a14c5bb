//! The decisions on client jobs: refusals with the error each maps to (exit 2 invalid,
//! 4 not found, 5 busy), the commands built, the answers to outcomes.

use super::*;
use crate::backpressure::AdmissionConfig;
use crate::server::test_state::{spec, TestState, AT_MS};

#[test]
fn a_submit_is_checked_for_validity_locality_and_placeability() {
    let mut t = TestState::new();
    t.node(1, "n1", 2);
    let jobs = ClientJobs::new(&t.state);
    let r = ClientRequestId(1);
    assert_eq!(jobs.check_submit(r, &spec("u", 1, 2), false), Ok(()));
    let empty = JobSpec {
        command: Vec::new(),
        ..spec("u", 1, 1)
    };
    let e = jobs.check_submit(r, &empty, false).expect_err("no command");
    assert_eq!(e.kind, ErrorKind::Invalid, "exit 2");
    let elsewhere = JobSpec {
        nodes: vec!["n9".into()],
        ..spec("u", 1, 1)
    };
    let e = jobs
        .check_submit(r, &elsewhere, false)
        .expect_err("unknown node");
    assert_eq!(e.kind, ErrorKind::NotFound, "exit 4");
    assert!(e.message.contains("\"n9\""), "{}", e.message);
    let huge = spec("u", 1, 3);
    let e = jobs
        .check_submit(r, &huge, false)
        .expect_err("3 cores on a 2-core node");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("--allow-unplaceable"), "{}", e.message);
    assert_eq!(jobs.check_submit(r, &huge, true), Ok(()), "allowed to wait");
}

#[test]
fn admission_refuses_over_the_pending_cap_as_busy() {
    let mut t = TestState::new();
    t.job("u", 3);
    let jobs = ClientJobs::new(&t.state);
    let mut a = Admission::new(AdmissionConfig {
        max_pending: Some(4),
        submit_rate: None,
    });
    let r = ClientRequestId(1);
    assert_eq!(jobs.admit(r, &spec("u", 1, 1), &mut a, AT_MS), Ok(()));
    let e = jobs
        .admit(r, &spec("u", 2, 1), &mut a, AT_MS)
        .expect_err("3 pending + 2 > 4");
    assert_eq!(e.kind, ErrorKind::Busy, "exit 5, HTTP 429");
    assert!(e.message.starts_with("busy, retry"), "{}", e.message);
}

#[test]
fn both_kinds_of_submission_answer_with_the_ids() {
    let tasks = vec![TaskId(1), TaskId(2)];
    let want = Ok(ClientResponse::Submitted {
        job: JobId(1),
        tasks: tasks.clone(),
    });
    assert_eq!(
        ClientJobs::submitted(Outcome::Submitted {
            job: JobId(1),
            tasks: tasks.clone()
        }),
        want
    );
    assert_eq!(
        ClientJobs::submitted(Outcome::SubmittedPlaced {
            job: JobId(1),
            tasks,
            accepted: Vec::new(),
            rejected: 0
        }),
        want
    );
    let e = ClientJobs::submitted(Outcome::Rejected("too big".into())).expect_err("rejected");
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::Invalid, "too big")
    );
    let e = ClientJobs::submitted(Outcome::TaskUpdated).expect_err("unexpected");
    assert_eq!(e.kind, ErrorKind::Internal);
}

#[test]
fn cancels_and_drains_name_what_exists() {
    let mut t = TestState::new();
    let n = t.node(1, "n1", 2);
    let (job, tasks) = t.job("u", 1);
    let jobs = ClientJobs::new(&t.state);
    assert_eq!(jobs.cancel_job(job), Ok(Command::CancelJob { job }));
    assert_eq!(
        jobs.cancel_job(JobId(99)).map_err(|e| e.kind),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        jobs.cancel_task(tasks[0]),
        Ok(Command::CancelTask { task: tasks[0] })
    );
    assert_eq!(
        jobs.cancel_task(TaskId(99)).map_err(|e| e.kind),
        Err(ErrorKind::NotFound)
    );
    assert_eq!(
        jobs.drain("n1", Some(500), AT_MS),
        Ok(Command::DrainNode {
            node: n,
            deadline_ms: Some(AT_MS + 500)
        })
    );
    assert_eq!(jobs.undrain("n1"), Ok(Command::UndrainNode { node: n }));
    let e = jobs.undrain("n2").expect_err("unknown node");
    assert_eq!(e.message, "no such node: \"n2\"");
}

#[test]
fn a_drain_is_answered_with_the_node_after_it_applied() {
    let mut t = TestState::new();
    let n = t.node(1, "n1", 2);
    let o = t.apply(Command::DrainNode {
        node: n,
        deadline_ms: None,
    });
    let jobs = ClientJobs::new(&t.state);
    match jobs.drain_changed(o) {
        Ok(ClientResponse::Node(info)) => assert_eq!(info.name, "n1"),
        other => panic!("not the node: {other:?}"),
    }
    let e = jobs
        .priority_set(Outcome::Rejected("bad weight".into()))
        .expect_err("rejected");
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(
        jobs.priority_set(Outcome::Ignored(String::new())),
        Ok(ClientResponse::PriorityConfig(t.state.priority().clone()))
    );
}

#[test]
fn a_batch_is_cancelled_job_by_job_under_derived_request_ids() {
    let t = TestState::new();
    let jobs = ClientJobs::new(&t.state);
    let e = jobs
        .cancel_batch(ClientRequestId(10), 3)
        .expect_err("no batch");
    assert_eq!(e.kind, ErrorKind::NotFound);
    let bad = BatchSubmit {
        file: "not a batch file".into(),
        ..Default::default()
    };
    let e = jobs
        .batch_input(ClientRequestId(10), &bad)
        .expect_err("unparsable");
    assert_eq!(e.kind, ErrorKind::Invalid);
}
