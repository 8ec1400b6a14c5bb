//! S0.6 — cross-node API forwarding by query and redirect (docs/DESIGN.md §S0): the leader's
//! choice of the peer that runs one call for a slave. Pure: the caller passes the engine
//! load the slaves' heartbeats reported and their selection tables; nothing here reads a
//! clock or does I/O.
//!
//! ```text
//!  slave n ──ForwardQuery{api, arg_bytes, kinds, exclude, links}──▶ leader
//!          ◀──ForwardTarget{node m, addr, engine, cost}─────────────┘  (choose)
//!  slave n ──ForwardedCall──▶ slave m ──result──▶ slave n
//! ```
//!
//! A candidate is a peer (not the asker, not excluded, up, not draining) with one of the
//! asked kinds that can run the API (its table has a time for it; the CPU runs every API).
//! Among candidates the least **execution time there + forwarding cost** wins, where the
//! forwarding cost is argument bytes / link bandwidth + round trip + that peer's queue wait
//! on the engine ([`forward_cost`], [`queue_wait_us`]). A peer whose last heartbeat showed a
//! free unit waits 0; one reported busy is charged an execution time per call ahead, so a
//! free peer wins, while a report a few hundred ms old does not hide a peer that has just
//! become free. The peer itself refuses a call when no unit is free on arrival, and the
//! asker asks again excluding it.

use hetsched_common::program::{scale_bucket, Api, SelectionTable};
use hetsched_common::protocol::{EngineLoad, ForwardQuery, ForwardTarget, LinkEstimate};
use hetsched_common::{EngineKind, NodeId};

/// Bandwidth assumed for a link the asker has not measured: 1 Gbit/s (S2's example).
pub const DEFAULT_BYTES_PER_S: u64 = 125_000_000;
/// Round trip assumed for a link the asker has not measured, µs.
pub const DEFAULT_RTT_US: u64 = 1_000;

/// The forwarding cost of one call, µs: `bytes / bandwidth + round trip + queue wait`, where
/// `bytes` are the arguments sent and the result written back (docs/DESIGN.md §S0 decision).
/// A link without a measured bandwidth or round trip takes the defaults above (the asker
/// measures both from its forwarded calls). Saturates instead of overflowing.
pub fn forward_cost(arg_bytes: u64, link: Option<&LinkEstimate>, queue_wait_us: u64) -> u64 {
    let bytes_per_s = link
        .map(|l| l.bytes_per_s)
        .filter(|b| *b > 0)
        .unwrap_or(DEFAULT_BYTES_PER_S);
    let rtt_us = link
        .map(|l| l.rtt_us)
        .filter(|r| *r > 0)
        .unwrap_or(DEFAULT_RTT_US);
    // Rounded up: any argument costs at least a microsecond on the wire.
    let transfer_us = (u128::from(arg_bytes) * 1_000_000).div_ceil(u128::from(bytes_per_s));
    let transfer_us = u64::try_from(transfer_us).unwrap_or(u64::MAX);
    transfer_us
        .saturating_add(rtt_us)
        .saturating_add(queue_wait_us)
}

/// The queue wait of one more call on an engine kind of a peer, µs: the calls that would
/// be ahead of it (those waiting, and itself, beyond the free units), spread over the units,
/// each taking `exec_us`. 0 while a unit is free for it.
pub fn queue_wait_us(load: &EngineLoad, exec_us: u64) -> u64 {
    let ahead = (load.waiting.saturating_add(1)).saturating_sub(load.free);
    if ahead == 0 {
        return 0;
    }
    let per_unit = u64::from(ahead).div_ceil(u64::from(load.count.max(1)));
    per_unit.saturating_mul(exec_us)
}

/// One peer as the leader sees it for a query.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// Node.
    pub node: NodeId,
    /// Name.
    pub name: &'a str,
    /// Slave listener address.
    pub addr: &'a str,
    /// Up and not draining.
    pub eligible: bool,
    /// Engine load from its last heartbeat (`None`: no recent report).
    pub load: Option<&'a [EngineLoad]>,
    /// Its selection table (`None`: it has sent no profile).
    pub table: Option<&'a SelectionTable>,
}

/// The time of `api` at `arg_bytes` on `kind` by `table`, µs, if it says.
fn exec_time(
    table: Option<&SelectionTable>,
    api: Api,
    arg_bytes: u64,
    kind: EngineKind,
) -> Option<u64> {
    table?
        .lookup(api, scale_bucket(arg_bytes))?
        .ranked
        .iter()
        .find(|e| e.engine == kind)
        .map(|e| e.time_us)
}

/// The peer that should run the call: the least execution time + forwarding cost among the
/// candidates with an asked kind that runs the API; ties go to the kind asked first, then
/// the lower node id. `None` when no peer qualifies.
pub fn choose(q: &ForwardQuery, candidates: &[Candidate<'_>]) -> Option<ForwardTarget> {
    let mut best: Option<((u64, usize, NodeId), ForwardTarget)> = None;
    for c in candidates {
        if !c.eligible || c.node == q.node || q.exclude.contains(&c.node) {
            continue;
        }
        let Some(load) = c.load else { continue };
        let link = q.links.iter().find(|l| l.node == c.node);
        for (rank, kind) in q.kinds.iter().enumerate() {
            let Some(l) = load.iter().find(|l| l.kind == *kind && l.count > 0) else {
                continue;
            };
            let exec = exec_time(c.table, q.api, q.arg_bytes, *kind);
            // Without a time from the peer's table only the CPU is known to run the API.
            let exec_us = match (exec, kind) {
                (Some(t), _) => t,
                (None, EngineKind::Cpu) => 0,
                (None, _) => continue,
            };
            // Arguments out and the result back cross the link (older askers: arguments).
            let bytes = if q.transfer_bytes > 0 {
                q.transfer_bytes
            } else {
                q.arg_bytes
            };
            let cost_us = forward_cost(bytes, link, queue_wait_us(l, exec_us));
            let key = (exec_us.saturating_add(cost_us), rank, c.node);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((
                    key,
                    ForwardTarget {
                        node: c.node,
                        name: c.name.to_string(),
                        addr: c.addr.to_string(),
                        engine: *kind,
                        cost_us,
                        exec_us,
                    },
                ));
            }
        }
    }
    best.map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::program::EngineTime;

    fn link(node: u64, rtt_us: u64, bytes_per_s: u64) -> LinkEstimate {
        LinkEstimate {
            node: NodeId(node),
            rtt_us,
            bytes_per_s,
        }
    }

    #[test]
    fn forwarding_cost_is_transfer_plus_round_trip_plus_queue_wait() {
        // 1 MB over 100 MB/s = 10 ms, + 2 ms round trip + 5 ms waiting.
        let l = link(2, 2_000, 100_000_000);
        assert_eq!(
            forward_cost(1_000_000, Some(&l), 5_000),
            10_000 + 2_000 + 5_000
        );
        // Unmeasured link: 1 Gbit/s and 1 ms.
        assert_eq!(
            forward_cost(125_000_000, None, 0),
            1_000_000 + DEFAULT_RTT_US
        );
        assert_eq!(
            forward_cost(1, Some(&link(2, 0, 0)), 0),
            1 + DEFAULT_RTT_US,
            "zero fields mean not measured; a byte costs at least 1 µs"
        );
        // More bytes, slower link, longer wait: never cheaper.
        let base = forward_cost(4096, Some(&l), 0);
        assert!(forward_cost(8192, Some(&l), 0) > base);
        assert!(forward_cost(4096, Some(&link(2, 2_000, 1_000)), 0) > base);
        assert!(forward_cost(4096, Some(&l), 1) > base);
        assert_eq!(
            forward_cost(u64::MAX, Some(&link(2, u64::MAX, 1)), u64::MAX),
            u64::MAX,
            "saturates"
        );
    }

    #[test]
    fn queue_wait_counts_calls_ahead_per_unit() {
        let l = |count, free, waiting| EngineLoad {
            kind: EngineKind::Gpu,
            count,
            free,
            waiting,
        };
        assert_eq!(queue_wait_us(&l(2, 1, 0), 100), 0, "a free unit takes it");
        assert_eq!(queue_wait_us(&l(2, 2, 1), 100), 0);
        assert_eq!(queue_wait_us(&l(1, 0, 0), 100), 100, "busy: one call ahead");
        assert_eq!(queue_wait_us(&l(2, 1, 1), 100), 100);
        assert_eq!(queue_wait_us(&l(2, 0, 3), 100), 200, "4 calls over 2 units");
        assert_eq!(
            queue_wait_us(&l(0, 0, 1), 100),
            200,
            "no units: counted as one"
        );
    }

    fn table(entries: &[(EngineKind, u64)]) -> SelectionTable {
        let mut t = SelectionTable::default();
        for (engine, time_us) in entries {
            t.record(
                Api::Gemm,
                scale_bucket(12 * 128 * 128),
                EngineTime {
                    engine: *engine,
                    time_us: *time_us,
                    emulated: *engine != EngineKind::Cpu,
                },
            );
        }
        t
    }

    fn load(kind: EngineKind, count: u32, free: u32) -> EngineLoad {
        EngineLoad {
            kind,
            count,
            free,
            waiting: 0,
        }
    }

    fn cand<'a>(
        node: u64,
        load: Option<&'a [EngineLoad]>,
        table: &'a SelectionTable,
    ) -> Candidate<'a> {
        Candidate {
            node: NodeId(node),
            name: "peer",
            addr: "127.0.0.1:1",
            eligible: true,
            load,
            table: Some(table),
        }
    }

    #[test]
    fn choice_takes_the_least_total_among_free_suitable_peers() {
        let gpu_table = &table(&[(EngineKind::Gpu, 1_000), (EngineKind::Cpu, 8_000)]);
        let npu_table = &table(&[(EngineKind::Npu, 1_500), (EngineKind::Cpu, 8_000)]);
        let gpu_load: &[EngineLoad] = &[load(EngineKind::Cpu, 2, 2), load(EngineKind::Gpu, 1, 1)];
        let gpu_busy: &[EngineLoad] = &[load(EngineKind::Cpu, 2, 2), load(EngineKind::Gpu, 1, 0)];
        let npu_load: &[EngineLoad] = &[load(EngineKind::Cpu, 2, 2), load(EngineKind::Npu, 2, 2)];
        let q = ForwardQuery {
            node: NodeId(1),
            api: Api::Gemm,
            arg_bytes: 12 * 128 * 128,
            kinds: vec![EngineKind::Gpu, EngineKind::Npu],
            exclude: vec![],
            links: vec![],
            transfer_bytes: 0,
        };
        let all = [
            cand(2, Some(gpu_load), gpu_table),
            cand(3, Some(npu_load), npu_table),
        ];
        let t = choose(&q, &all).expect("a target");
        assert_eq!((t.node, t.engine), (NodeId(2), EngineKind::Gpu));
        assert_eq!(t.exec_us, 1_000);
        assert_eq!(t.cost_us, forward_cost(q.arg_bytes, None, 0));

        // The GPU reported busy (one call ahead: +1 ms): the NPU peer is cheaper.
        let busy = [
            cand(2, Some(gpu_busy), gpu_table),
            cand(3, Some(npu_load), npu_table),
        ];
        assert_eq!(choose(&q, &busy).map(|t| t.node), Some(NodeId(3)));
        // Excluded (it refused): the NPU peer.
        let mut ex = q.clone();
        ex.exclude = vec![NodeId(2)];
        assert_eq!(choose(&ex, &all).map(|t| t.node), Some(NodeId(3)));
        // A slow measured link to the GPU peer (10 ms round trip) makes the NPU cheaper.
        let mut slow = q.clone();
        slow.links = vec![link(2, 10_000, 0)];
        assert_eq!(choose(&slow, &all).map(|t| t.node), Some(NodeId(3)));
        // Never the asker itself, nor a peer without a recent load report or down.
        let mut own = q.clone();
        own.node = NodeId(2);
        assert_eq!(choose(&own, &all).map(|t| t.node), Some(NodeId(3)));
        let unknown = [cand(2, None, gpu_table)];
        assert_eq!(choose(&q, &unknown), None);
        let mut down = cand(2, Some(gpu_load), gpu_table);
        down.eligible = false;
        assert_eq!(choose(&q, &[down]), None);
        // Only the kinds asked for: a CPU peer does not qualify for a GPU-or-NPU bar.
        let cpu_only: &[EngineLoad] = &[load(EngineKind::Cpu, 4, 4)];
        assert_eq!(choose(&q, &[cand(4, Some(cpu_only), gpu_table)]), None);
        // A kind the peer's table has no time for is not assumed to run the API.
        let mut npu_only = q.clone();
        npu_only.kinds = vec![EngineKind::Npu];
        assert_eq!(
            choose(&npu_only, &[cand(2, Some(npu_load), gpu_table)]),
            None
        );
    }
}
