//! S0.6 — serving a peer's forwarded call (docs/DESIGN.md, S0): the receiving side of
//! [`crate::forward`]. Kept apart from it because it runs the call on this node's program
//! runtime ([`crate::program`]), which itself forwards through [`crate::forward`]: one
//! module holding both sides made the two import each other.

use crate::engine::kernels;
use crate::forward::result_len_estimate;
use crate::program::ProgramRuntime;
use hetsched_common::program::{Api, ApiCall};
use hetsched_common::protocol::{PeerReply, MAX_FORWARD_ARG_BYTES, MAX_FORWARD_RESULT_BYTES};
use hetsched_common::{EngineKind, NodeId};
use std::time::Instant;

/// Serves a peer's forwarded call: runs it here on a free unit of one of `kinds` that runs
/// its API, on the argument bytes sent (never forwarded again), and writes the result back;
/// or refuses. Blocking.
pub fn serve(
    runtime: &ProgramRuntime,
    from: NodeId,
    call: &ApiCall,
    kinds: &[EngineKind],
    args: &[u8],
) -> PeerReply {
    let t0 = Instant::now();
    if let Err(why) = call.validate() {
        return PeerReply::Refused {
            reason: format!("invalid call: {why}"),
        };
    }
    if args.len() as u64 > MAX_FORWARD_ARG_BYTES {
        return PeerReply::Refused {
            reason: format!(
                "arguments of {} bytes exceed the forwarding cap of {MAX_FORWARD_ARG_BYTES} bytes",
                args.len()
            ),
        };
    }
    let result_len = result_len_estimate(call);
    if call.api != Api::Compress && result_len > MAX_FORWARD_RESULT_BYTES {
        return PeerReply::Refused {
            reason: format!(
                "a result of {result_len} bytes would exceed the forwarding cap of {MAX_FORWARD_RESULT_BYTES} bytes"
            ),
        };
    }
    // Older callers send no arguments: they are regenerated from the call's seed.
    let owned;
    let args = if args.is_empty() && kernels::input_len(call) > 0 {
        owned = kernels::inputs(call);
        &owned[..]
    } else {
        args
    };
    if args.len() as u64 != kernels::input_len(call) {
        return PeerReply::Refused {
            reason: format!(
                "{} arguments are {} bytes, the call's size needs {}",
                call.api,
                args.len(),
                kernels::input_len(call)
            ),
        };
    }
    let Some(unit) = kinds
        .iter()
        .filter(|k| runtime.engines.implementation(**k, call.api).is_some())
        .find_map(|k| runtime.engines.try_acquire(*k))
    else {
        metrics::counter!("hetsched_slave_forwards_total", "direction" => "in", "outcome" => "refused").increment(1);
        return PeerReply::Refused {
            reason: format!(
                "no free engine of {} runs {} on {}",
                kinds
                    .iter()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                call.api,
                runtime.node
            ),
        };
    };
    let (record, result) = runtime.execute_args(call, Some(unit), args);
    if result.len() as u64 > MAX_FORWARD_RESULT_BYTES {
        return PeerReply::Refused {
            reason: format!(
                "result of {} bytes exceeds the forwarding cap of {MAX_FORWARD_RESULT_BYTES} bytes",
                result.len()
            ),
        };
    }
    metrics::counter!("hetsched_slave_forwards_total", "direction" => "in", "outcome" => "done")
        .increment(1);
    tracing::info!(from = %from, api = %call.api, engine = %record.engine, duration_ms = record.duration_ms, arg_bytes = args.len(), result_bytes = result.len(), "ran a forwarded call");
    PeerReply::Done {
        record,
        served_us: t0.elapsed().as_micros() as u64,
        result,
    }
}
