//! Property tests of the wire protocol: every message round-trips through a frame, and no
//! byte string makes the decoder panic.

use hetsched_common::protocol::*;
use hetsched_common::wire::{decode_payload, encode_frame, Envelope, DEFAULT_MAX_FRAME};
use hetsched_common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn resources() -> impl Strategy<Value = NodeResources> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(("[A-Z0-9]{1,8}", 0u32..=1000, any::<bool>()), 0..4),
        0u32..8,
    )
        .prop_map(|(cpu, mem, gpus, npu)| NodeResources {
            cpu_milli: cpu,
            mem_mib: mem,
            gpus: gpus
                .into_iter()
                .map(|(model, free_milli, emulated)| GpuDevice {
                    model,
                    free_milli,
                    emulated,
                })
                .collect(),
            engines: BTreeMap::from([(EngineKind::Npu, npu)]),
        })
}

fn request() -> impl Strategy<Value = ResourceRequest> {
    (
        any::<u64>(),
        any::<u64>(),
        0u32..8,
        0u32..=1000,
        prop::collection::vec("[A-Z0-9]{1,6}", 0..3),
    )
        .prop_map(|(cpu, mem, count, milli, models)| ResourceRequest {
            cpu_milli: cpu,
            mem_mib: mem,
            gpu: GpuRequest {
                count,
                milli,
                models,
            },
            engines: BTreeMap::new(),
        })
}

fn spec() -> impl Strategy<Value = JobSpec> {
    (
        "\\PC{0,12}",
        "[a-z]{0,8}",
        request(),
        any::<u32>(),
        prop::collection::vec("\\PC{0,10}", 0..4),
    )
        .prop_map(|(name, user, resources, count, command)| JobSpec {
            name,
            user: user.clone(),
            partition: user,
            resources,
            count,
            command,
            env: BTreeMap::from([("K".to_string(), "V".to_string())]),
            no_preempt: count % 2 == 0,
            ..Default::default()
        })
}

fn state() -> impl Strategy<Value = TaskState> {
    prop_oneof![
        Just(TaskState::Pending),
        Just(TaskState::Assigned),
        Just(TaskState::Running),
        Just(TaskState::Succeeded),
        Just(TaskState::Failed),
        Just(TaskState::Cancelled),
    ]
}

fn held() -> impl Strategy<Value = HeldTask> {
    (
        any::<u64>(),
        any::<u32>(),
        prop_oneof![
            Just(None),
            any::<i32>().prop_map(Some),
            Just(Some(i32::MIN))
        ],
        any::<bool>(),
    )
        .prop_map(|(t, attempt, code, running)| HeldTask {
            task: TaskId(t),
            attempt,
            phase: match (code, running) {
                (Some(exit_code), _) => HeldPhase::Finished { exit_code },
                (None, true) => HeldPhase::Running,
                (None, false) => HeldPhase::Queued,
            },
        })
}

fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop_oneof![
        Just(ErrorKind::Malformed),
        Just(ErrorKind::TooLarge),
        Just(ErrorKind::WrongVersion),
        (any::<Option<u64>>(), any::<Option<String>>()).prop_map(|(l, a)| ErrorKind::NotLeader {
            leader: l.map(MasterId),
            leader_addr: a
        }),
        Just(ErrorKind::Invalid),
        Just(ErrorKind::UnknownNode),
        Just(ErrorKind::Unsupported),
        Just(ErrorKind::Unknown),
        Just(ErrorKind::Unavailable),
        Just(ErrorKind::Internal),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let ids = (any::<u64>(), any::<u64>(), any::<u32>());
    prop_oneof![
        (
            any::<u64>(),
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4)
        )
            .prop_map(|(f, m)| Message::Raft {
                from: MasterId(f),
                msgs: m.into_iter().map(serde_bytes::ByteBuf::from).collect()
            }),
        (any::<u64>(), spec(), any::<bool>()).prop_map(|(r, spec, allow_unplaceable)| {
            Message::Client(ClientRequest::Submit {
                request: ClientRequestId(r),
                spec,
                allow_unplaceable,
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(r, j)| Message::Client(ClientRequest::Cancel {
            request: ClientRequestId(r),
            job: JobId(j)
        })),
        any::<bool>().prop_map(|stale| Message::Client(ClientRequest::Status { stale })),
        (any::<bool>(), any::<u64>())
            .prop_map(|(stale, batch)| Message::Client(ClientRequest::Batch { stale, batch })),
        (any::<u64>(), any::<u64>()).prop_map(|(r, batch)| Message::Client(
            ClientRequest::CancelBatch {
                request: ClientRequestId(r),
                batch,
            }
        )),
        any::<bool>().prop_map(|stale| Message::Client(ClientRequest::Jobs {
            stale,
            filter: Default::default()
        })),
        (any::<bool>(), any::<Option<u64>>()).prop_map(|(stale, j)| Message::Client(
            ClientRequest::Tasks {
                stale,
                job: j.map(JobId),
                filter: Default::default(),
            }
        )),
        any::<bool>().prop_map(|stale| Message::Client(ClientRequest::Nodes { stale })),
        (any::<u64>(), prop::collection::vec(any::<u64>(), 0..5)).prop_map(|(j, t)| {
            Message::ClientReply(ClientResponse::Submitted {
                job: JobId(j),
                tasks: t.into_iter().map(TaskId).collect(),
            })
        }),
        (any::<u64>(), any::<u32>()).prop_map(|(j, n)| Message::ClientReply(
            ClientResponse::Cancelled {
                job: JobId(j),
                tasks: n
            }
        )),
        (
            any::<u64>(),
            any::<Option<u64>>(),
            "[a-f0-9]{16}",
            any::<bool>()
        )
            .prop_map(|(m, l, h, stale)| {
                Message::ClientReply(ClientResponse::Status(StatusInfo {
                    master_id: MasterId(m),
                    leader: l.map(MasterId),
                    leader_addr: Some("127.0.0.1:1".into()),
                    term: m / 2,
                    role: "leader".into(),
                    applied_index: m,
                    state_hash: h,
                    stale,
                    insecure: stale,
                    nodes: NodeCounts {
                        total: 2,
                        up: 1,
                        down: 1,
                        draining: 0,
                    },
                    jobs: 3,
                    tasks: BTreeMap::from([("pending".to_string(), m)]),
                    raft: RaftCounters {
                        commit_index: m,
                        first_index: 1,
                        proposals: 2,
                        entries_persisted: 3,
                        flushes: 1,
                        snapshots: 0,
                    },
                    state_bytes: m,
                    snapshot_bytes: 7,
                    open_files: l.map(|n| OpenFiles {
                        soft: n,
                        hard: n,
                        open: Some(m),
                    }),
                    heartbeat_ms: m,
                    queues: Default::default(),
                    cpu_config: BTreeMap::from([("image".to_string(), 2.0)]),
                    waiting: BTreeMap::from([("quota".to_string(), 1)]),
                }))
            }),
        (any::<u64>(), "\\PC{0,8}").prop_map(|(id, name)| Message::ClientReply(
            ClientResponse::Jobs(vec![JobInfo {
                id: JobId(id),
                name: name.clone(),
                user: name.clone(),
                partition: name,
                state: "running".into(),
                tasks: 3,
                task_states: BTreeMap::from([("running".to_string(), 3)]),
                submitted_ms: id,
                batch_id: Some(id),
                planned_start_s: Some(1.5),
                planned_finish_s: Some(2.5),
                actual_finish_s: None,
                after: vec![JobId(id / 2)],
                after_any: Vec::new(),
                after_fail: vec![JobId(1)],
                after_each: Some(JobId(2)),
                after_mode: hetsched_common::AfterMode::Any,
                singleton: true,
                max_running: Some(2),
                dependents: vec![JobId(id)],
                flow_id: Some(id),
            }])
        )),
        (ids, state(), any::<Option<i32>>()).prop_map(|((t, j, a), state, exit_code)| {
            Message::ClientReply(ClientResponse::Tasks(vec![TaskInfo {
                id: TaskId(t),
                job_id: JobId(j),
                index: a,
                state,
                node: Some(NodeId(j)),
                attempt: a,
                exit_code,
                priority: i64::from(a) - 3,
                user: "u".into(),
                partition: "default".into(),
                preemptions: a,
                failures: 0,
                not_before_ms: None,
                reason: hetsched_common::TaskReason::of_exit_code(exit_code.unwrap_or(0)),
                reason_detail: (a % 2 == 1).then(|| "job-3 failed".to_string()),
                cpus: 1.5,
                cpu_search: Some("probing".into()),
                compressed: a % 2 == 0,
                calls: None,
                queue: "cpu".into(),
                borrowed: a % 2 == 0,
                waiting: (a % 3 == 0).then(|| {
                    hetsched_common::protocol::WaitingInfo::new(
                        "resources",
                        "cpus: 0 of 2 nodes have room",
                    )
                }),
            }]))
        }),
        (any::<u64>(), resources()).prop_map(|(id, r)| Message::ClientReply(
            ClientResponse::Nodes(vec![NodeInfo {
                id: NodeId(id),
                name: "n".into(),
                addr: "127.0.0.1:9".into(),
                state: "up".into(),
                capacity: r.clone(),
                free: r,
                tasks: 1,
                gpus_emulated: true,
                partitions: vec!["default".into(), "gpu".into()],
                draining: false,
                drain_deadline_ms: None,
                cgroup: "v1".into(),
                engines: vec![],
                probes: hetsched_common::protocol::ProbesInfo {
                    gpu: "emulated".into(),
                    membw: "resctrl".into(),
                },
                queued: 2,
                steals_in: 3,
                steals_out: 0,
                gpu_pool: Some("multi".into()),
                links: vec![hetsched_common::protocol::LinkEstimate {
                    node: NodeId(id),
                    rtt_us: 80,
                    bytes_per_s: 1 << 30,
                }],
                membw_total_mbps: Some(21_000),
                membw_total_source: Some("triad".into()),
                containers: Default::default(),
            }])
        )),
        (
            any::<u64>(),
            any::<Option<u64>>(),
            resources(),
            prop::collection::vec(held(), 0..4)
        )
            .prop_map(|(key, node, capacity, held)| {
                Message::Slave(SlaveRequest::Register {
                    key,
                    node: node.map(NodeId),
                    name: "s".into(),
                    addr: "127.0.0.1:5".into(),
                    capacity,
                    labels: BTreeMap::from([("env".to_string(), "edge".to_string())]),
                    held,
                    partitions: vec!["default".into()],
                })
            }),
        (any::<u64>(), prop::collection::vec(held(), 0..6)).prop_map(|(n, held)| Message::Slave(
            SlaveRequest::Heartbeat {
                node: NodeId(n),
                held,
                samples: vec![hetsched_common::protocol::ProbeSample {
                    task: TaskId(n),
                    attempt: 1,
                    cpu_milli: 2000,
                    gpu_util: Some(55.5),
                    gpu_emulated: true,
                    membw_mbps: None,
                    membw_emulated: false,
                }],
                engine_load: vec![EngineLoad {
                    kind: EngineKind::Gpu,
                    count: 1,
                    free: (n % 2) as u32,
                    waiting: (n % 5) as u32,
                }],
                links: vec![LinkEstimate {
                    node: NodeId(n / 2),
                    rtt_us: 90,
                    bytes_per_s: n,
                }],
                images: vec![hetsched_common::protocol::ImageInfo {
                    reference: "oci:/srv/images/bb:v1".into(),
                    digest: format!("sha256:{n:064x}"),
                    size_mib: n % 4096,
                }],
            }
        )),
        ids.prop_map(|(n, t, a)| Message::Slave(SlaveRequest::TaskStarted {
            node: NodeId(n),
            task: TaskId(t),
            attempt: a
        })),
        (ids, any::<i32>()).prop_map(|((n, t, a), c)| Message::Slave(SlaveRequest::TaskFinished {
            node: NodeId(n),
            task: TaskId(t),
            attempt: a,
            exit_code: c,
            reason: hetsched_common::TaskReason::of_exit_code(c)
        })),
        any::<u64>()
            .prop_map(|n| Message::SlaveReply(SlaveResponse::Registered { node: NodeId(n) })),
        (any::<u64>(), any::<u64>()).prop_map(|(m, h)| Message::SlaveReply(
            SlaveResponse::HeartbeatAck {
                leader: MasterId(m),
                heartbeat_ms: h,
            }
        )),
        Just(Message::SlaveReply(SlaveResponse::Ack)),
        (
            ids,
            request(),
            prop::collection::vec((0u32..8, 0u32..=1000), 0..3),
            prop::collection::vec("\\PC{0,6}", 1..3)
        )
            .prop_map(|((t, j, a), resources, gpus, command)| Message::ToSlave(
                SlaveCommand::Assign(Assignment {
                    task: TaskId(t),
                    job: JobId(j),
                    index: a,
                    attempt: a,
                    command,
                    env: BTreeMap::new(),
                    resources,
                    gpus,
                    queued: false,
                    engine: None,
                    job_name: String::new(),
                    workdir: None,
                    image: None,
                    run_as: None,
                    network: None,
                })
            )),
        ids.prop_map(|(_, t, a)| Message::ToSlave(SlaveCommand::StopTask {
            task: TaskId(t),
            attempt: a,
            grace_ms: None,
        })),
        Just(Message::ToSlaveReply(SlaveCommandReply::Accepted)),
        Just(Message::ToSlaveReply(SlaveCommandReply::Stopped)),
        (ids, 1u64..4096, any::<u64>()).prop_map(|((n, t, a), size, seed)| {
            use hetsched_common::program::{
                Api, ApiCall, CallRecord, CallSummary, EngineTime, SelectionTable,
            };
            use hetsched_common::EngineKind;
            let call = ApiCall::new(Api::Sort, size, seed);
            let mut table = SelectionTable::default();
            table.record(
                call.api,
                call.bucket(),
                EngineTime {
                    engine: EngineKind::Gpu,
                    time_us: size,
                    emulated: true,
                },
            );
            match seed % 8 {
                0 => Message::Slave(SlaveRequest::RecordProfile {
                    node: NodeId(n),
                    engines: vec![],
                    table,
                }),
                1 => Message::Slave(SlaveRequest::RecordCalls {
                    node: NodeId(n),
                    task: TaskId(t),
                    attempt: a,
                    summary: CallSummary {
                        total: a,
                        ..Default::default()
                    },
                }),
                3 => Message::Slave(SlaveRequest::ForwardQuery(ForwardQuery {
                    node: NodeId(n),
                    api: call.api,
                    arg_bytes: call.scale(),
                    kinds: vec![EngineKind::Gpu, EngineKind::Npu],
                    exclude: vec![NodeId(t)],
                    links: vec![LinkEstimate {
                        node: NodeId(t),
                        rtt_us: size,
                        bytes_per_s: seed,
                    }],
                    transfer_bytes: size,
                })),
                4 => Message::SlaveReply(SlaveResponse::ForwardTarget(Some(ForwardTarget {
                    node: NodeId(t),
                    name: "peer".into(),
                    addr: "127.0.0.1:9".into(),
                    engine: EngineKind::Gpu,
                    cost_us: size,
                    exec_us: seed,
                }))),
                5 => Message::Peer(PeerRequest::ForwardedCall {
                    from: NodeId(n),
                    call: call.clone(),
                    kinds: vec![EngineKind::Gpu],
                    args: vec![seed as u8; (size % 64) as usize],
                }),
                6 => Message::PeerReply(PeerReply::Refused {
                    reason: format!("busy {seed}"),
                }),
                _ => {
                    let record = CallRecord {
                        index: a,
                        api: call.api,
                        engine: EngineKind::Cpu,
                        node: "n".into(),
                        duration_ms: size as f64 / 7.0,
                        forwarded: seed % 2 == 0,
                        emulated: false,
                        digest: "00".into(),
                        scale_bytes: call.scale(),
                        fallback_from: Some(EngineKind::Dsp),
                        error: None,
                        transfer: None,
                        check: None,
                    };
                    if seed % 2 == 0 {
                        Message::PeerReply(PeerReply::Done {
                            record,
                            served_us: size,
                            result: vec![1, 2, 3],
                        })
                    } else {
                        Message::ToSlaveReply(SlaveCommandReply::Calls(vec![record]))
                    }
                }
            }
        }),
        any::<bool>().prop_map(|stale| Message::Client(ClientRequest::Members { stale })),
        (1u64.., "[a-z0-9.]{1,10}:[0-9]{1,5}").prop_map(|(id, addr)| Message::Client(
            ClientRequest::AddMember {
                id: MasterId(id),
                addr
            }
        )),
        any::<u64>()
            .prop_map(|id| Message::Client(ClientRequest::RemoveMember { id: MasterId(id) })),
        any::<u64>()
            .prop_map(|id| Message::Client(ClientRequest::TransferLeader { id: MasterId(id) })),
        (
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(client, seq, record, p)| {
                Message::Client(ClientRequest::BenchPropose {
                    client,
                    seq,
                    record,
                    payload: serde_bytes::ByteBuf::from(p),
                })
            }),
        (any::<u64>(), prop::collection::vec(any::<u64>(), 0..8)).prop_map(|(client, acked)| {
            Message::Client(ClientRequest::BenchCheck { client, acked })
        }),
        (
            any::<u64>(),
            0.0f64..1.0,
            any::<u64>(),
            prop::collection::vec(any::<u64>(), 0..3),
            any::<bool>()
        )
            .prop_map(|(seed, drop_rate, delay_ms, cut, isolated)| {
                Message::Client(ClientRequest::SetFaults(FaultSpec {
                    seed,
                    drop_rate,
                    delay_ms,
                    cut: cut.into_iter().map(MasterId).collect(),
                    isolated,
                }))
            }),
        (
            any::<u64>(),
            any::<Option<String>>(),
            any::<bool>(),
            any::<bool>(),
            any::<Option<u64>>()
        )
            .prop_map(|(id, addr, voter, leader, match_index)| {
                Message::ClientReply(ClientResponse::Members(vec![MemberInfo {
                    id: MasterId(id),
                    addr,
                    voter,
                    leader,
                    match_index,
                }]))
            }),
        Just(Message::ClientReply(ClientResponse::Done)),
        (any::<u64>(), prop::collection::vec(any::<u64>(), 0..4)).prop_map(|(applied, missing)| {
            Message::ClientReply(ClientResponse::BenchChecked { applied, missing })
        }),
        (error_kind(), "\\PC{0,30}")
            .prop_map(|(kind, message)| Message::Error(ErrorReply { kind, message })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(request_id in any::<u64>(), more in any::<bool>(), body in message()) {
        let env = Envelope { version: hetsched_common::wire::PROTOCOL_VERSION, request_id, more, token: None, body };
        let frame = encode_frame(&env, DEFAULT_MAX_FRAME).expect("encode");
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        prop_assert_eq!(len, frame.len() - 4);
        let back = decode_payload(&frame[4..]).map_err(|(_, e)| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, env);
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_payload(&bytes);
    }

    #[test]
    fn truncated_frames_are_errors_not_panics(body in message(), cut in 0usize..64) {
        let env = Envelope::new(7, body);
        let frame = encode_frame(&env, DEFAULT_MAX_FRAME).expect("encode");
        let payload = &frame[4..];
        let end = payload.len().saturating_sub(cut.max(1));
        // A strict prefix of a valid payload must not decode to the same envelope.
        if let Ok(decoded) = decode_payload(&payload[..end]) {
            prop_assert_ne!(decoded, env);
        }
    }
}
