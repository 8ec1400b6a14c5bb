//! The decisions on flows: a flow refused whole or at its step (with the error of a job's
//! refusal), the answer to the outcome, the record's view, and the cancellations.

use super::*;
use crate::server::test_state::{spec, TestState};
use hetsched_common::protocol::ErrorKind;
use hetsched_common::FlowStep;

fn two_steps() -> FlowSpec {
    let mut b = FlowStep::new("b", spec("u", 2, 1));
    b.needs = vec!["a".into()];
    FlowSpec {
        steps: vec![FlowStep::new("a", spec("u", 1, 1)), b],
    }
}

#[test]
fn a_flow_is_checked_whole_then_step_by_step() {
    let mut t = TestState::new();
    t.node(1, "n1", 2);
    let flows = ClientFlows::new(&t.state);
    let r = ClientRequestId(1);
    assert_eq!(flows.check(r, &two_steps()), Ok(("u".to_string(), 3)));
    let mut cycle = two_steps();
    cycle.steps[0].needs = vec!["b".into()];
    let e = flows.check(r, &cycle).expect_err("cycle");
    assert_eq!(e.kind, ErrorKind::Invalid, "exit 2");
    assert!(e.message.contains("cycle: a → b → a"), "{}", e.message);
    let mut elsewhere = two_steps();
    elsewhere.steps[1].spec.nodes = vec!["n9".into()];
    let e = flows.check(r, &elsewhere).expect_err("unknown node");
    assert_eq!(e.kind, ErrorKind::NotFound, "exit 4");
    assert!(
        e.message.starts_with("step \"b\": no such node"),
        "{}",
        e.message
    );
    let mut outside = two_steps();
    outside.steps[0].spec.after = vec![JobId(77)];
    let e = flows.check(r, &outside).expect_err("unknown job");
    assert_eq!(e.kind, ErrorKind::NotFound, "exit 4");
}

#[test]
fn the_record_answers_and_cancels_unfinished_steps_last_first() {
    let mut t = TestState::new();
    t.node(1, "n1", 4);
    let o = t.apply(Command::SubmitFlow { flow: two_steps() });
    let answer = ClientFlows::submitted(o).expect("submitted");
    let ClientResponse::FlowSubmitted(f) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(
        (f.flow_id, f.jobs["a"], f.jobs["b"]),
        (1, JobId(1), JobId(2))
    );
    let flows = ClientFlows::new(&t.state);
    let Ok(ClientResponse::Flow(info)) = flows.show(1) else {
        panic!("no flow-1")
    };
    assert_eq!(info.steps.len(), 2);
    assert_eq!(flows.show(2).expect_err("none").kind, ErrorKind::NotFound);
    let (first, cancels) = flows.cancel(ClientRequestId(10), 1).expect("cancels");
    assert_eq!(first, JobId(1));
    let jobs: Vec<_> = cancels.iter().map(|(r, c)| (r.0, c.clone())).collect();
    assert_eq!(
        jobs,
        [
            (11, Command::CancelJob { job: JobId(2) }),
            (10, Command::CancelJob { job: JobId(1) })
        ]
    );
    let refused = ClientFlows::submitted(Outcome::Rejected("no".into())).expect_err("refused");
    assert_eq!(refused.kind, ErrorKind::Invalid);
}
