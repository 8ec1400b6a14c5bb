//! The snapshot encoding and the state hash must not move: snapshots and logs written by an
//! older binary load, and replicas of mixed versions agree on `state_hash`. The expected
//! values below were recorded with the binary before the state became books (commit
//! 5fa47823); a change to them is a change of the on-disk format.

use super::*;
use crate::sched::test_log::{node, spec, submitted_tasks};
use hetsched_common::protocol::TokenRole;
use hetsched_common::{ClientRequestId, TaskClass, TaskReason};

fn env(at_ms: u64, request: Option<u64>, command: Command) -> CommandEnvelope {
    CommandEnvelope {
        at_ms,
        request: request.map(ClientRequestId),
        command,
    }
}

/// A replica touched in every field the log can change: nodes (one drained), jobs and tasks
/// in several states, requests, bench counters, a priority configuration, profiles, the
/// CPU history and a token.
fn sample_state() -> Replica {
    let mut s = Replica::new();
    let mut i = 0;
    let mut apply = |s: &mut Replica, request: Option<u64>, c: Command| {
        i += 1;
        s.apply(i, env(10_000 + i * 7, request, c))
    };
    for key in [11, 12, 13] {
        apply(&mut s, None, node(key, 8, 1, &[]));
    }
    let tasks = submitted_tasks(apply(
        &mut s,
        Some(1),
        Command::SubmitJob {
            spec: spec(3, 1, 0),
        },
    ));
    let more = submitted_tasks(apply(
        &mut s,
        Some(2),
        Command::SubmitJob {
            spec: spec(2, 2, 1),
        },
    ));
    let plan = Plan {
        assignments: vec![
            Assign::to(tasks[0], NodeId(1)),
            Assign::to(tasks[1], NodeId(2)),
            Assign::to(more[0], NodeId(3)),
        ],
        ..Default::default()
    };
    apply(&mut s, None, Command::ApplyPlan(plan));
    apply(
        &mut s,
        None,
        Command::TaskStarted {
            node: NodeId(1),
            task: tasks[0],
            attempt: 1,
        },
    );
    apply(
        &mut s,
        None,
        Command::TaskFinished {
            node: NodeId(1),
            task: tasks[0],
            attempt: 1,
            exit_code: 1,
            reason: Some(TaskReason::Exit),
        },
    );
    apply(
        &mut s,
        None,
        Command::TaskStarted {
            node: NodeId(2),
            task: tasks[1],
            attempt: 1,
        },
    );
    let cancel = submitted_tasks(apply(
        &mut s,
        Some(3),
        Command::SubmitJob {
            spec: spec(1, 1, 0),
        },
    ));
    apply(&mut s, Some(4), Command::CancelTask { task: cancel[0] });
    for seq in 0..3 {
        apply(
            &mut s,
            None,
            Command::Bench {
                client: 5,
                seq,
                record: seq != 1,
                payload: Default::default(),
            },
        );
    }
    apply(
        &mut s,
        None,
        Command::SetPriorityConfig {
            config: Default::default(),
        },
    );
    apply(
        &mut s,
        None,
        Command::DrainNode {
            node: NodeId(3),
            deadline_ms: Some(99_000),
        },
    );
    apply(
        &mut s,
        None,
        Command::RecordProfile {
            node: NodeId(2),
            engines: Vec::new(),
            table: Default::default(),
        },
    );
    apply(
        &mut s,
        None,
        Command::RecordCpuConfig {
            task: more[0],
            class: TaskClass::Image,
            cpu_milli: 1500,
        },
    );
    apply(
        &mut s,
        None,
        Command::CreateToken {
            token: TokenRecord {
                accessor: "acc".into(),
                user: "u".into(),
                role: TokenRole::Operator,
                salt: "00".into(),
                hash: "ff".into(),
                created_ms: 0,
                expires_ms: None,
            },
            bootstrap: true,
        },
    );
    apply(&mut s, None, Command::NodeDown { node: NodeId(1) });
    s
}

const SAMPLE_HASH: u64 = 0x4c7a_0424_15cc_8625;
const SAMPLE_BYTES_HASH: u64 = 0x4c7a_0424_15cc_8625;
const SAMPLE_LEN: usize = 3905;
const EMPTY_HASH: u64 = 0x4b4d_0c4d_2994_f012;

#[test]
fn the_encoding_and_the_hash_are_as_before_the_books() {
    let s = sample_state();
    let bytes = s.to_bytes();
    assert_eq!(s.state_hash(), SAMPLE_HASH);
    assert_eq!(fnv1a64(&bytes), SAMPLE_BYTES_HASH);
    assert_eq!(bytes.len(), SAMPLE_LEN);
    assert_eq!(ClusterState::new().state_hash(), EMPTY_HASH);
    assert_eq!(Replica::new().state_hash(), EMPTY_HASH);
}

#[test]
fn a_decoded_state_equals_the_encoded_one_and_encodes_the_same() {
    let s = sample_state();
    let bytes = s.to_bytes();
    let back = Replica::from_bytes(&bytes).expect("decode");
    assert_eq!(back, s);
    assert_eq!(back.to_bytes(), bytes);
}

#[test]
fn a_snapshot_with_legacy_request_outcomes_folds_them_on_restore() {
    let s = sample_state();
    let legacy: BTreeMap<ClientRequestId, Outcome> =
        [(ClientRequestId(77), Outcome::Ignored("old".into()))].into();
    let mut doc = s.cluster().document_with(s.bench());
    doc.applied_requests = &legacy;
    let bytes = rmp_serde::to_vec_named(&doc).expect("encode");
    let back = Replica::from_bytes(&bytes).expect("decode");
    assert!(back.request_applied(ClientRequestId(77)));
    assert!(back.request_applied(ClientRequestId(1)));
    // Folded: never written again.
    let again = Replica::from_bytes(&back.to_bytes()).expect("decode");
    assert_eq!(again, back);
}
