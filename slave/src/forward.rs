//! S0.6 — cross-node API forwarding by query and redirect, the slave's side (docs/DESIGN.md, S0).
//!
//! ```text
//!  program call ──▶ wanted_kinds (local ranking vs the peers' tables) ── empty ──▶ run here
//!                          │ kinds better than here (or: nothing suitable free here)
//!                          ▼
//!            leader: ForwardQuery{api, arg_bytes, kinds, exclude, links}
//!                          │ ForwardTarget{peer, addr} (none: run here)
//!                          ▼
//!            peer: ForwardedCall ──▶ Done(record) │ Refused (busy: ask again, excluding it)
//!                                     failure or timeout ──▶ run here on the best local engine
//! ```
//!
//! A call is forwarded when the best local engine for it is busy, or when a peer's engine
//! kind is faster by more than `--forward-margin` (remote time × (1 + margin) < local time).
//! Engine times come from this slave's selection table and, for the peers, from their
//! tables as the masters hold them (fetched every [`DIRECTORY_REFRESH`]). The peer runs the
//! call on a free unit of an acceptable kind or refuses; it never forwards it again. The
//! round trip to each peer is measured from the forwarded calls (the time less the peer's
//! own service time) and sent with each query; arguments are regenerated from their seed on
//! the peer, so no bulk transfer happens whose bandwidth could be measured: the leader
//! assumes its default bandwidth (`hetsched_master_core::forward::DEFAULT_BYTES_PER_S`).

use crate::program::ProgramRuntime;
use crate::store::Store;
use hetsched_common::leader::{LeaderClient, LeaderOptions};
use hetsched_common::program::{ApiCall, CallRecord, SelectionTable};
use hetsched_common::protocol::{
    ClientRequest, ClientResponse, ForwardQuery, ForwardTarget, LinkEstimate, Message, PeerReply,
    PeerRequest, SlaveRequest, SlaveResponse,
};
use hetsched_common::wire::Connection;
use hetsched_common::{EngineKind, NodeId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Default of `--forward-margin`: a peer's engine must be more than 1.5× as fast.
pub const DEFAULT_FORWARD_MARGIN: f64 = 0.5;
/// How often the peers' selection tables are fetched from the masters.
pub const DIRECTORY_REFRESH: Duration = Duration::from_secs(2);
/// Deadline of one forwarding query to a master.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Most peers asked for one call (a refusal sends the query again, excluding the peer).
const MAX_PEERS_PER_CALL: usize = 2;

/// `slave --forward-margin F --forward-timeout D --no-forward`.
#[derive(Clone, Copy, Debug)]
pub struct ForwardOptions {
    /// Forward at all.
    pub enabled: bool,
    /// How much faster (as a fraction) a peer's engine kind must be.
    pub margin: f64,
    /// Deadline of one forwarded call (connect, run there, result back).
    pub timeout: Duration,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            margin: DEFAULT_FORWARD_MARGIN,
            timeout: Duration::from_secs(60),
        }
    }
}

/// The engine kinds elsewhere that a call should be forwarded to, best first; empty: run
/// it here. `local_top` is the best local kind for the call, `local_top_free` whether a
/// unit of it is free, `local_us` its time for the call (if known), `remote` each kind's
/// best time among the peers.
///
/// - The best local engine is free: kinds whose time × (1 + `margin`) is below the local
///   time (nothing when the local time is unknown).
/// - It is busy (no suitable local engine is free): the peers' kinds at least as fast as
///   it, its own kind included.
pub fn wanted_kinds(
    local_top: EngineKind,
    local_top_free: bool,
    local_us: Option<u64>,
    remote: &BTreeMap<EngineKind, u64>,
    margin: f64,
) -> Vec<EngineKind> {
    let mut kinds: Vec<(u64, EngineKind)> = match (local_top_free, local_us) {
        (true, None) => return Vec::new(),
        (true, Some(t)) => remote
            .iter()
            .filter(|(_, r)| (**r as f64) * (1.0 + margin.max(0.0)) < t as f64)
            .map(|(k, r)| (*r, *k))
            .collect(),
        (false, t) => remote
            .iter()
            .filter(|(k, r)| **k == local_top || t.is_some_and(|t| **r <= t))
            .map(|(k, r)| (*r, *k))
            .collect(),
    };
    kinds.sort();
    kinds.into_iter().map(|(_, k)| k).collect()
}

/// The peers' selection tables, as the masters last answered.
#[derive(Debug, Default)]
struct Directory {
    tables: Vec<(NodeId, SelectionTable)>,
}

impl Directory {
    /// Each kind's best time for `call` among the peers (not `me`).
    fn remote_times(&self, me: Option<NodeId>, call: &ApiCall) -> BTreeMap<EngineKind, u64> {
        let mut best: BTreeMap<EngineKind, u64> = BTreeMap::new();
        for (node, table) in &self.tables {
            if Some(*node) == me {
                continue;
            }
            let Some(row) = table.lookup(call.api, call.bucket()) else {
                continue;
            };
            for e in &row.ranked {
                let t = best.entry(e.engine).or_insert(e.time_us);
                *t = (*t).min(e.time_us);
            }
        }
        best
    }
}

/// What became of a call offered for forwarding.
#[derive(Debug)]
pub enum Forwarded {
    /// A peer ran it: its record (node, engine are the peer's; `forwarded` set).
    Ran(CallRecord),
    /// It was not forwarded (or the peer failed): why; the call runs here.
    Local(Option<String>),
}

/// The slave's forwarding client: asks the leader, sends the call to the peer.
pub struct Forwarder {
    opts: ForwardOptions,
    masters: Vec<String>,
    store: Store,
    handle: tokio::runtime::Handle,
    directory: RwLock<Directory>,
    links: Mutex<BTreeMap<NodeId, LinkEstimate>>,
    /// Asks the leader (its target follows `NotLeader` answers); each query works on a copy
    /// and writes back where it ended.
    leader: Mutex<LeaderClient>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("opts", &self.opts)
            .field("masters", &self.masters)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Forwarder {
    /// A forwarder; `refresh` starts the task that keeps the peers' tables current.
    pub fn new(
        opts: ForwardOptions,
        masters: Vec<String>,
        store: Store,
        handle: tokio::runtime::Handle,
    ) -> Arc<Self> {
        let leader = LeaderClient::new(masters.clone())
            .with_options(LeaderOptions {
                connect_timeout: QUERY_TIMEOUT,
                call_timeout: QUERY_TIMEOUT,
                max_redirects: 3,
                ..LeaderOptions::default()
            })
            .with_leader_hint(store.leader_hint().ok().flatten());
        Arc::new(Self {
            opts,
            masters,
            store,
            handle,
            directory: RwLock::default(),
            links: Mutex::default(),
            leader: Mutex::new(leader),
        })
    }

    /// Options in force.
    pub fn options(&self) -> ForwardOptions {
        self.opts
    }

    /// Fetches the peers' tables from the masters every [`DIRECTORY_REFRESH`], forever.
    pub async fn refresh(self: Arc<Self>) {
        let mut next = 0usize;
        loop {
            if let Some(addr) = self.masters.get(next % self.masters.len().max(1)) {
                let answer = async {
                    let conn = Connection::connect(addr, QUERY_TIMEOUT).await?;
                    conn.call(
                        Message::Client(ClientRequest::Profiles { stale: true }),
                        QUERY_TIMEOUT,
                    )
                    .await
                }
                .await;
                match answer {
                    Ok(Message::ClientReply(ClientResponse::Profiles(p))) => {
                        let me = self.store.node().ok().flatten();
                        let tables: Vec<(NodeId, SelectionTable)> = p
                            .nodes
                            .into_iter()
                            .filter(|n| Some(n.node) != me && !n.table.rows.is_empty())
                            .map(|n| (n.node, n.table))
                            .collect();
                        metrics::gauge!("hetsched_slave_forward_peer_tables")
                            .set(tables.len() as f64);
                        match self.directory.write() {
                            Ok(mut d) => d.tables = tables,
                            Err(p) => p.into_inner().tables = tables,
                        }
                    }
                    other => {
                        tracing::debug!(master = %addr, answer = ?other.map(|m| format!("{m:?}")), "peer tables not fetched");
                        next += 1;
                    }
                }
            }
            tokio::time::sleep(DIRECTORY_REFRESH).await;
        }
    }

    /// Each kind's best time for `call` on the peers.
    pub fn remote_times(&self, call: &ApiCall) -> BTreeMap<EngineKind, u64> {
        let me = self.store.node().ok().flatten();
        match self.directory.read() {
            Ok(d) => d.remote_times(me, call),
            Err(p) => p.into_inner().remote_times(me, call),
        }
    }

    /// Offers `call` (position `index` in its program) to a peer able to run it on one of
    /// `kinds`. With `beat` set (µs), only a peer whose execution time plus forwarding cost,
    /// as the leader estimates them, is below it gets the call. Blocking: called from the
    /// program's thread.
    pub fn forward(
        &self,
        index: u32,
        call: &ApiCall,
        kinds: Vec<EngineKind>,
        beat: Option<u64>,
    ) -> Forwarded {
        let Some(me) = self.store.node().ok().flatten() else {
            return Forwarded::Local(Some("not registered yet".into()));
        };
        let mut exclude = Vec::new();
        let mut why = None;
        for _ in 0..MAX_PEERS_PER_CALL {
            let links = lock(&self.links).values().copied().collect();
            let q = ForwardQuery {
                node: me,
                api: call.api,
                arg_bytes: call.scale(),
                kinds: kinds.clone(),
                exclude: exclude.clone(),
                links,
            };
            let target = match self.handle.block_on(self.query(q)) {
                Ok(Some(t)) => t,
                Ok(None) => return Forwarded::Local(why),
                Err(e) => {
                    tracing::debug!(error = %e, "forwarding query failed");
                    return Forwarded::Local(why);
                }
            };
            if let Some(local_us) = beat {
                let remote_us = target.exec_us.saturating_add(target.cost_us);
                if remote_us >= local_us {
                    tracing::debug!(peer = %target.name, remote_us, local_us, "forwarding would not pay off");
                    return Forwarded::Local(why);
                }
            }
            match self
                .handle
                .block_on(self.send(me, &target, call, kinds.clone()))
            {
                Ok(PeerAnswer::Done(mut record)) => {
                    metrics::counter!("hetsched_slave_forwards_total", "direction" => "out", "outcome" => "done").increment(1);
                    record.index = index;
                    record.forwarded = true;
                    return Forwarded::Ran(record);
                }
                Ok(PeerAnswer::Refused(reason)) => {
                    metrics::counter!("hetsched_slave_forwards_total", "direction" => "out", "outcome" => "refused").increment(1);
                    tracing::debug!(peer = %target.name, %reason, "peer refused a forwarded call");
                    why = Some(format!("forwarding to {} refused: {reason}", target.name));
                    exclude.push(target.node);
                }
                Err(e) => {
                    metrics::counter!("hetsched_slave_forwards_total", "direction" => "out", "outcome" => "failed").increment(1);
                    tracing::warn!(peer = %target.name, addr = %target.addr, error = %e, "forwarded call failed; running it here");
                    return Forwarded::Local(Some(format!(
                        "forwarding to {} failed: {e}",
                        target.name
                    )));
                }
            }
        }
        Forwarded::Local(why)
    }

    /// One query to the leader, following `NotLeader` answers a few hops.
    async fn query(&self, q: ForwardQuery) -> Result<Option<ForwardTarget>, String> {
        let mut leader = lock(&self.leader).clone();
        let answer = leader
            .attempt(Message::Slave(SlaveRequest::ForwardQuery(q)))
            .await;
        // The leader that answered, or the master to ask after a failure.
        *lock(&self.leader) = leader;
        match answer {
            Ok(Message::SlaveReply(SlaveResponse::ForwardTarget(t))) => Ok(t),
            Ok(other) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends the call to the peer and waits for its answer; measures the round trip.
    async fn send(
        &self,
        me: NodeId,
        target: &ForwardTarget,
        call: &ApiCall,
        kinds: Vec<EngineKind>,
    ) -> Result<PeerAnswer, String> {
        let t0 = Instant::now();
        let req = Message::Peer(PeerRequest::ForwardedCall {
            from: me,
            call: call.clone(),
            kinds,
        });
        let answer = async {
            let conn = Connection::connect(&target.addr, self.opts.timeout).await?;
            conn.call(req, self.opts.timeout).await
        }
        .await
        .map_err(|e| e.to_string())?;
        match answer {
            Message::PeerReply(PeerReply::Done { record, served_us }) => {
                let rtt_us = (t0.elapsed().as_micros() as u64).saturating_sub(served_us);
                let mut links = lock(&self.links);
                let l = links.entry(target.node).or_insert(LinkEstimate {
                    node: target.node,
                    rtt_us,
                    bytes_per_s: 0,
                });
                // A moving average: one slow call (a loaded machine) does not define the link.
                l.rtt_us = (l.rtt_us * 3 + rtt_us) / 4;
                Ok(PeerAnswer::Done(record))
            }
            Message::PeerReply(PeerReply::Refused { reason }) => Ok(PeerAnswer::Refused(reason)),
            Message::Error(e) => Err(e.message),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }
}

enum PeerAnswer {
    Done(CallRecord),
    Refused(String),
}

/// Serves a peer's forwarded call: runs it here on a free unit of one of `kinds` that runs
/// its API (never forwarded again), or refuses. Blocking.
pub fn serve(
    runtime: &ProgramRuntime,
    from: NodeId,
    call: &ApiCall,
    kinds: &[EngineKind],
) -> PeerReply {
    let t0 = Instant::now();
    if let Err(why) = call.validate() {
        return PeerReply::Refused {
            reason: format!("invalid call: {why}"),
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
    let record = runtime.execute(0, call, Some(unit));
    metrics::counter!("hetsched_slave_forwards_total", "direction" => "in", "outcome" => "done")
        .increment(1);
    tracing::info!(from = %from, api = %call.api, engine = %record.engine, duration_ms = record.duration_ms, "ran a forwarded call");
    PeerReply::Done {
        record,
        served_us: t0.elapsed().as_micros() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn a_peer_runs_a_forwarded_call_on_a_free_unit_or_refuses() {
        use hetsched_common::program::Api;
        let rt = gpu_runtime();
        let call = ApiCall::new(Api::Gemm, 32, 7);
        let cpu_digest = crate::engine::kernels::digest(&crate::engine::kernels::run(&call));
        match serve(&rt, NodeId(1), &call, &[EngineKind::Gpu]) {
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
        let r = serve(&rt, NodeId(1), &call, &[EngineKind::Gpu]);
        assert!(
            matches!(&r, PeerReply::Refused { reason } if reason.contains("no free engine")),
            "{r:?}"
        );
        drop(held);
        // A kind that does not implement the API here is never used.
        let sort = ApiCall::new(Api::Sort, 100, 1);
        assert!(matches!(
            serve(&rt, NodeId(1), &sort, &[EngineKind::Gpu]),
            PeerReply::Refused { .. }
        ));
        // Bad input from a peer: refused with the reason, no panic.
        let bad = ApiCall::new(Api::Gemm, 1 << 20, 1);
        assert!(matches!(
            serve(&rt, NodeId(1), &bad, &[EngineKind::Gpu]),
            PeerReply::Refused { reason } if reason.contains("invalid call")
        ));
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
}
