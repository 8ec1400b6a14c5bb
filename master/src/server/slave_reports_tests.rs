//! The decisions on slave requests over an applied state: heartbeats by role, what a
//! task's end and a batch of reports propose, the answers to their outcomes.

use super::*;
use crate::server::test_state::TestState;
use hetsched_common::NodeResources;

fn finished(task: TaskId) -> TaskReport {
    TaskReport::Finished {
        task,
        attempt: 1,
        exit_code: 0,
        reason: None,
        reason_detail: None,
        usage: None,
    }
}

#[test]
fn a_registration_needs_an_address_and_its_refusal_is_invalid() {
    let register = |addr: &str| Command::RegisterNode {
        key: 1,
        node: None,
        name: "n1".into(),
        addr: addr.into(),
        capacity: NodeResources::default(),
        labels: Default::default(),
        partitions: Vec::new(),
    };
    assert_eq!(
        SlaveReports::check_register(&register("127.0.0.1:9")),
        Ok(())
    );
    assert_eq!(
        SlaveReports::check_register(&register("nowhere")).map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
    assert_eq!(
        SlaveReports::registered(Outcome::Registered { node: NodeId(3) }),
        Ok(NodeId(3))
    );
    assert_eq!(
        SlaveReports::registered(Outcome::Rejected("key".into())).map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
}

#[test]
fn a_heartbeat_is_answered_by_the_duties_role() {
    let mut t = TestState::new();
    let n = t.node(1, "n1", 2);
    let r = SlaveReports::new(&t.state);
    let follower = || ErrorReply::new(ErrorKind::Unavailable, "follower");
    assert_eq!(r.heartbeat(n, Gate::Leading, follower), Ok(()));
    let kind = |gate, node| r.heartbeat(node, gate, follower).map_err(|e| e.kind);
    assert_eq!(kind(Gate::Leading, NodeId(9)), Err(ErrorKind::UnknownNode));
    assert_eq!(kind(Gate::CatchingUp, n), Err(ErrorKind::Unavailable));
    assert_eq!(
        r.heartbeat(n, Gate::NotLeader, follower)
            .map_err(|e| e.message),
        Err("follower".to_string())
    );
}

#[test]
fn a_lost_attempt_is_requeued_and_other_ends_finish() {
    let (n, t) = (NodeId(1), TaskId(2));
    assert_eq!(
        SlaveReports::task_finished(n, t, 3, -1, Some(TaskReason::Lost)),
        Command::TaskLost {
            node: n,
            task: t,
            attempt: 3
        }
    );
    assert_eq!(
        SlaveReports::task_finished(n, t, 3, 137, Some(TaskReason::Oom)),
        Command::TaskFinished {
            node: n,
            task: t,
            attempt: 3,
            exit_code: 137,
            reason: Some(TaskReason::Oom)
        }
    );
    assert_eq!(
        SlaveReports::profile_recorded(Outcome::Rejected("unknown node-4".into()))
            .map_err(|e| e.kind),
        Err(ErrorKind::UnknownNode)
    );
    assert_eq!(
        SlaveReports::profile_recorded(Outcome::Rejected("bad table".into())).map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
    assert_eq!(
        SlaveReports::profile_recorded(Outcome::TaskUpdated),
        Ok(SlaveResponse::Ack)
    );
}

#[test]
fn a_batch_proposes_compressions_first_and_asks_after_the_ends() {
    let mut t = TestState::new();
    let n = t.node(1, "n1", 2);
    let (_, tasks) = t.job("u", 3);
    let r = SlaveReports::new(&t.state);
    let compressed = TaskReport::Compressed {
        task: tasks[1],
        attempt: 1,
        cpu_milli: 500,
        gpu_task: tasks[2],
    };
    let ask = TaskReport::WantsStart {
        task: tasks[2],
        attempt: 1,
    };
    let started = TaskReport::Started {
        task: tasks[1],
        attempt: 1,
    };
    let b = r.split(
        n,
        vec![ask.clone(), finished(tasks[0]), compressed, started.clone()],
    );
    assert_eq!(b.finishing, vec![(tasks[0], 1)]);
    assert_eq!(
        b.compressions,
        vec![Command::CompressTask {
            node: n,
            task: tasks[1],
            attempt: 1,
            cpu_milli: 500,
            gpu_task: tasks[2]
        }]
    );
    assert_eq!(b.reports, vec![finished(tasks[0]), started.clone()]);
    assert_eq!(b.asks, vec![(tasks[2], 1)]);
    assert_eq!(
        r.entry(n, b.reports, &b.asks),
        Some(Command::TaskReports {
            node: n,
            reports: vec![finished(tasks[0]), started, ask]
        }),
        "asks go last, after the ends that free their room"
    );
    // Asks alone that nothing queued could answer add nothing to the log.
    assert_eq!(r.entry(n, Vec::new(), &b.asks), None);
    assert_eq!(r.entry(n, Vec::new(), &[]), None);
    assert_eq!(r.answer(n, &[]), SlaveResponse::Ack);
    assert_eq!(
        r.answer(n, &b.asks),
        SlaveResponse::Promoted { tasks: Vec::new() }
    );
}

#[test]
fn an_end_already_final_is_not_counted_again() {
    let mut t = TestState::new();
    let (job, tasks) = t.job("u", 1);
    t.apply(Command::CancelJob { job });
    let r = SlaveReports::new(&t.state);
    assert!(r.task_is_final(tasks[0]));
    assert!(r.task_is_final(TaskId(99)), "unknown counts as final");
    let b = r.split(NodeId(1), vec![finished(tasks[0])]);
    assert!(b.finishing.is_empty());
}
