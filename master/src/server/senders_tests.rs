//! What the senders send and report, without a slave: each message's command, how an
//! answer reads, what an undeliverable message reports back to the duties.

use super::*;
use hetsched_common::protocol::{Assignment, ErrorReply};
use hetsched_common::wire::CallError;
use hetsched_common::JobId;

fn assignment(task: u64) -> Assignment {
    Assignment {
        task: TaskId(task),
        job: JobId(1),
        index: 0,
        attempt: 2,
        command: vec!["true".into()],
        env: Default::default(),
        resources: Default::default(),
        gpus: Default::default(),
        queued: false,
        engine: None,
        job_name: String::new(),
        workdir: None,
        image: None,
        run_as: None,
        network: None,
    }
}

fn reply(r: SlaveCommandReply) -> Result<Message, CallError> {
    Ok(Message::ToSlaveReply(r))
}

#[test]
fn each_message_is_its_slave_command() {
    let batch = vec![assignment(1), assignment(2)];
    assert_eq!(
        command(&Outgoing::DispatchBatch(batch.clone())),
        SlaveCommand::AssignBatch(batch)
    );
    assert_eq!(
        command(&Outgoing::Stop {
            task: TaskId(3),
            attempt: 1,
            grace_ms: Some(50)
        }),
        SlaveCommand::StopTask {
            task: TaskId(3),
            attempt: 1,
            grace_ms: Some(50)
        }
    );
    assert_eq!(
        command(&Outgoing::Release {
            task: TaskId(4),
            attempt: 2,
            to: NodeId(9)
        }),
        SlaveCommand::ReleaseQueued {
            task: TaskId(4),
            attempt: 2
        }
    );
}

#[test]
fn answers_read_as_accepted_released_or_an_older_slave() {
    assert!(accepted(&reply(SlaveCommandReply::Accepted)));
    assert!(!accepted(&Err(CallError::Closed("a".into()))));
    assert!(released(&reply(SlaveCommandReply::Released {
        released: true
    })));
    assert!(!released(&reply(SlaveCommandReply::Released {
        released: false
    })));
    let old = Ok(Message::Error(ErrorReply::new(ErrorKind::Malformed, "?")));
    assert!(batch_not_understood(&old));
    assert!(!batch_not_understood(&reply(SlaveCommandReply::Accepted)));
}

#[test]
fn an_undeliverable_message_reports_what_the_duties_wait_for() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let node = NodeId(5);
    fail(&tx, node, &Outgoing::DispatchBatch(vec![assignment(1)]));
    fail(
        &tx,
        node,
        &Outgoing::Stop {
            task: TaskId(1),
            attempt: 1,
            grace_ms: None,
        },
    );
    fail(
        &tx,
        node,
        &Outgoing::Release {
            task: TaskId(2),
            attempt: 1,
            to: NodeId(6),
        },
    );
    let Ok(SenderResult::Dispatch(d)) = rx.try_recv() else {
        panic!("a failed dispatch is reported");
    };
    assert_eq!((d.node, d.tasks, d.ok), (node, vec![(TaskId(1), 2)], false));
    let Ok(SenderResult::Released { released, to, .. }) = rx.try_recv() else {
        panic!("a failed release is reported, the stop is not");
    };
    assert_eq!((released, to), (false, NodeId(6)));
    assert!(rx.try_recv().is_err());
}

/// Issue 54: a link whose connection ended is reported once by `take_closed` (and
/// forgotten), whether the senders found it closed first or the scan did; open links stay.
#[tokio::test]
async fn closed_links_are_reported_once_and_open_ones_stay() {
    use hetsched_common::wire::Connection;
    use std::time::Duration;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let mut conns = Vec::new();
    let mut accepted = Vec::new();
    for _ in 0..3 {
        let c = Connection::connect(&addr, Duration::from_secs(5))
            .await
            .expect("connect");
        accepted.push(listener.accept().await.expect("accept").0);
        conns.push(std::sync::Arc::new(c));
    }
    let links = SlaveLinks::default();
    for (i, c) in conns.iter().enumerate() {
        links.attach(NodeId(i as u64 + 1), c.clone());
    }
    assert!(links.take_closed().is_empty(), "all open");
    // The far ends of nodes 1 and 2 go away.
    accepted.drain(..2);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(conns[0].is_closed() && conns[1].is_closed()) {
        assert!(
            std::time::Instant::now() < deadline,
            "connections never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The senders find node 1's closed first; the scan finds node 2's.
    assert!(links.get(NodeId(1)).is_none());
    let mut closed = links.take_closed();
    closed.sort();
    assert_eq!(closed, vec![NodeId(1), NodeId(2)]);
    assert!(links.take_closed().is_empty(), "reported once");
    assert!(links.get(NodeId(3)).is_some(), "the open link stays");
    assert_eq!(links.count(), 1);
}
