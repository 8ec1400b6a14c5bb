//! The messages of the operator's CLI survive the wire, and messages of an older
//! peer without the fields added for it still decode.

use hetsched_common::protocol::*;
use hetsched_common::wire::{decode_payload, encode_frame, Envelope, DEFAULT_MAX_FRAME};
use hetsched_common::*;
use serde::Serialize;

fn round_trip(m: Message) {
    let env = Envelope::new(7, m.clone());
    let frame = encode_frame(&env, DEFAULT_MAX_FRAME).expect("encode");
    let back = decode_payload(&frame[4..]).expect("decode");
    assert_eq!(back.body, m);
}

#[test]
fn cli_requests_and_answers_round_trip() {
    round_trip(Message::Client(ClientRequest::Tasks {
        stale: true,
        job: None,
        filter: ListFilter {
            job: Some(JobId(3)),
            state: Some("failed".into()),
            user: Some("alice".into()),
            limit: Some(10),
            reason: Some("quota".into()),
        },
    }));
    round_trip(Message::Client(ClientRequest::CancelTask {
        request: ClientRequestId(9),
        task: TaskId(17),
    }));
    round_trip(Message::Client(ClientRequest::Drain {
        request: ClientRequestId(1),
        node: "gpu-1".into(),
        deadline_after_ms: Some(600_000),
    }));
    round_trip(Message::Client(ClientRequest::Logs {
        task: TaskId(5),
        attempt: Some(2),
        stderr: true,
        offset: 100,
        max_bytes: 4096,
    }));
    round_trip(Message::ClientReply(ClientResponse::Logs(LogChunk {
        task: TaskId(5),
        attempt: 2,
        node: Some(NodeId(1)),
        offset: 100,
        data: serde_bytes::ByteBuf::from(vec![0u8, 255, b'\n']),
        size: 103,
        task_final: true,
    })));
    round_trip(Message::ToSlave(SlaveCommand::ReadLog {
        task: TaskId(5),
        attempt: 1,
        stderr: false,
        offset: 0,
        max_bytes: 1,
    }));
    round_trip(Message::Error(ErrorReply::new(
        ErrorKind::NotFound,
        "no such job",
    )));
    round_trip(Message::Client(ClientRequest::Submit {
        request: ClientRequestId(2),
        spec: JobSpec {
            name: "train".into(),
            count: 4,
            command: vec!["python3".into()],
            nodes: vec!["gpu-1".into()],
            retries: 2,
            backoff_ms: 5_000,
            timeout_ms: Some(3_600_000),
            ..Default::default()
        },
        allow_unplaceable: true,
    }));
}

/// `Jobs { stale }` and a job spec as a peer from before the filters and retries sent them.
#[test]
fn older_peers_messages_still_decode() {
    #[derive(Serialize)]
    enum OldRequest {
        Jobs { stale: bool },
    }
    let bytes = rmp_serde::to_vec_named(&OldRequest::Jobs { stale: true }).expect("encode");
    let r: ClientRequest = rmp_serde::from_slice(&bytes).expect("decode");
    assert_eq!(
        r,
        ClientRequest::Jobs {
            stale: true,
            filter: ListFilter::default()
        }
    );
    #[derive(Serialize)]
    struct OldSpec {
        count: u32,
        command: Vec<String>,
    }
    let bytes = rmp_serde::to_vec_named(&OldSpec {
        count: 1,
        command: vec!["true".into()],
    })
    .expect("encode");
    let s: JobSpec = rmp_serde::from_slice(&bytes).expect("decode");
    assert_eq!(s.retries, 0);
    assert_eq!(s.timeout_ms, None);
    assert!(s.nodes.is_empty());
}

/// A submit from before `allow_unplaceable` decodes with the check on.
#[test]
fn an_older_submit_decodes_without_allow_unplaceable() {
    #[derive(Serialize)]
    enum OldRequest {
        Submit {
            request: ClientRequestId,
            spec: JobSpec,
        },
    }
    let spec = JobSpec {
        count: 1,
        command: vec!["true".into()],
        ..Default::default()
    };
    let bytes = rmp_serde::to_vec_named(&OldRequest::Submit {
        request: ClientRequestId(4),
        spec: spec.clone(),
    })
    .expect("encode");
    let r: ClientRequest = rmp_serde::from_slice(&bytes).expect("decode");
    assert_eq!(
        r,
        ClientRequest::Submit {
            request: ClientRequestId(4),
            spec,
            allow_unplaceable: false,
        }
    );
}
