use super::*;
use crate::forward_serve::serve;
use crate::program::ProgramRuntime;

fn remote(entries: &[(EngineKind, u64)]) -> BTreeMap<EngineKind, u64> {
    entries.iter().copied().collect()
}

#[test]
fn a_faster_kind_elsewhere_is_wanted_only_beyond_the_margin() {
    use EngineKind::{Cpu, Gpu, Npu};
    let r = remote(&[(Cpu, 8_000), (Gpu, 1_000), (Npu, 6_000)]);
    // CPU here free at 8 ms: the GPU (8× faster) is wanted, the NPU (1.33×) is not.
    assert_eq!(wanted_kinds(Cpu, true, Some(8_000), &r, 0.5), vec![Gpu]);
    assert_eq!(
        wanted_kinds(Cpu, true, Some(8_000), &r, 0.2),
        vec![Gpu, Npu]
    );
    assert!(wanted_kinds(Cpu, true, Some(8_000), &r, 10.0).is_empty());
    assert!(
        wanted_kinds(Cpu, true, None, &r, 0.5).is_empty(),
        "unknown time here"
    );
    // A GPU here, free, as fast: nothing.
    assert!(wanted_kinds(Gpu, true, Some(1_000), &r, 0.5).is_empty());
}

fn gpu_runtime() -> ProgramRuntime {
    let f = crate::engine::EnginesFile::parse(
        "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
        "e.toml",
    )
    .expect("parses");
    ProgramRuntime {
        engines: Arc::new(crate::engine::EngineSet::new(&f, 1, 1, true).expect("builds")),
        table: Arc::default(),
        node: "gpu-node".into(),
        call_timeout: Duration::from_secs(2),
        forwarder: None,
        check_results: false,
    }
}

#[test]
fn a_peer_runs_a_forwarded_call_on_a_free_unit_or_refuses() {
    use hetsched_common::program::Api;
    let rt = gpu_runtime();
    let call = ApiCall::new(Api::Gemm, 32, 7);
    let cpu_digest = crate::engine::kernels::digest(&crate::engine::kernels::run(&call));
    match serve(
        &rt,
        NodeId(1),
        &call,
        &[EngineKind::Gpu],
        &kernels::inputs(&call),
    ) {
        PeerReply::Done { record, .. } => {
            assert_eq!(record.engine, EngineKind::Gpu);
            assert!(record.emulated);
            assert_eq!(record.node, "gpu-node");
            assert_eq!(record.digest, cpu_digest, "same result as the CPU");
        }
        other => panic!("not run: {other:?}"),
    }
    // The GPU busy: refused, not queued, not run on another kind.
    let held = rt.engines.try_acquire(EngineKind::Gpu).expect("gpu");
    let r = serve(
        &rt,
        NodeId(1),
        &call,
        &[EngineKind::Gpu],
        &kernels::inputs(&call),
    );
    assert!(
        matches!(&r, PeerReply::Refused { reason } if reason.contains("no free engine")),
        "{r:?}"
    );
    drop(held);
    // A kind that does not implement the API here is never used.
    let sort = ApiCall::new(Api::Sort, 100, 1);
    assert!(matches!(
        serve(
            &rt,
            NodeId(1),
            &sort,
            &[EngineKind::Gpu],
            &kernels::inputs(&sort)
        ),
        PeerReply::Refused { .. }
    ));
    // Bad input from a peer: refused with the reason, no panic.
    let bad = ApiCall::new(Api::Gemm, 1 << 20, 1);
    assert!(matches!(
        serve(&rt, NodeId(1), &bad, &[EngineKind::Gpu], &[]),
        PeerReply::Refused { reason } if reason.contains("invalid call")
    ));
}

#[test]
fn forwarded_bytes_are_computed_on_and_capped() {
    use hetsched_common::program::Api;
    let rt = gpu_runtime();
    let call = ApiCall::new(Api::Gemm, 32, 7);
    let args = kernels::inputs(&call);
    match serve(&rt, NodeId(1), &call, &[EngineKind::Gpu], &args) {
        PeerReply::Done { record, result, .. } => {
            assert_eq!(result, kernels::run(&call), "the result is written back");
            assert_eq!(record.digest, kernels::digest(&result));
        }
        other => panic!("not run: {other:?}"),
    }
    // Arguments of the wrong length, or over the cap: refused with the reason.
    let r = serve(&rt, NodeId(1), &call, &[EngineKind::Gpu], &args[4..]);
    assert!(
        matches!(&r, PeerReply::Refused { reason } if reason.contains("bytes")),
        "{r:?}"
    );
    let big = vec![0u8; MAX_FORWARD_ARG_BYTES as usize + 1];
    let r = serve(&rt, NodeId(1), &call, &[EngineKind::Gpu], &big);
    assert!(
        matches!(&r, PeerReply::Refused { reason } if reason.contains("forwarding cap")),
        "{r:?}"
    );
    // A gemm n=1024 call fits the caps and, as bytes on the wire, one frame.
    let n1024 = ApiCall::new(Api::Gemm, 1024, 1);
    assert!(kernels::input_len(&n1024) <= MAX_FORWARD_ARG_BYTES);
    assert!(result_len_estimate(&n1024) <= MAX_FORWARD_RESULT_BYTES);
    let env = hetsched_common::wire::Envelope {
        version: hetsched_common::wire::PROTOCOL_VERSION,
        request_id: 1,
        more: false,
        token: None,
        body: Message::Peer(PeerRequest::ForwardedCall {
            from: NodeId(1),
            call: n1024.clone(),
            kinds: vec![EngineKind::Gpu],
            args: vec![7u8; kernels::input_len(&n1024) as usize],
        }),
    };
    let frame = hetsched_common::wire::encode_frame(&env, hetsched_common::wire::DEFAULT_MAX_FRAME)
        .expect("fits a frame");
    assert!(
        frame.len() < 9 * 1024 * 1024,
        "bytes travel as bytes: {}",
        frame.len()
    );
}

#[test]
fn a_busy_best_engine_asks_for_kinds_at_least_as_fast() {
    use EngineKind::{Cpu, Gpu, Npu};
    let r = remote(&[(Cpu, 8_000), (Gpu, 1_000), (Npu, 6_000)]);
    assert_eq!(
        wanted_kinds(Npu, false, Some(6_000), &r, 0.5),
        vec![Gpu, Npu]
    );
    assert_eq!(wanted_kinds(Gpu, false, Some(1_000), &r, 0.5), vec![Gpu]);
    // Nothing elsewhere as fast: nothing to ask for (the call waits here).
    let only_cpu = remote(&[(Cpu, 8_000)]);
    assert!(wanted_kinds(Gpu, false, Some(1_000), &only_cpu, 0.5).is_empty());
    assert!(wanted_kinds(Gpu, false, None, &only_cpu, 0.5).is_empty());
    assert!(wanted_kinds(Gpu, false, None, &BTreeMap::new(), 0.5).is_empty());
    assert_eq!(
        wanted_kinds(Cpu, false, Some(8_000), &r, 0.5),
        vec![Gpu, Npu, Cpu]
    );
}
