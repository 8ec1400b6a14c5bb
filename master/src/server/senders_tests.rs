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
