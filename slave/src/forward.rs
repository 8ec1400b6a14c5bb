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
//! call on a free unit of an acceptable kind or refuses; it never forwards it again.
//!
//! Bytes move: the caller sends the call's argument bytes (what its program generated,
//! [`kernels::inputs`]), the peer computes on them and writes the result bytes back, and the
//! caller takes its digest from the bytes it received. Both are capped
//! ([`MAX_FORWARD_ARG_BYTES`], [`MAX_FORWARD_RESULT_BYTES`]: a `gemm n=1024` call fits); a
//! call over the cap runs here, its record saying why. Each transfer measures the link: the
//! connect is one round trip, and the call's time less the peer's service time is what the
//! bytes took. Both are smoothed per peer (EWMA, weight 1/4; the bandwidth as smoothed bytes
//! over smoothed time, from transfers of at least [`MEASURE_MIN_BYTES`]), sent with each
//! query and with the heartbeats (`nodes --json` `links`); the leader's cost uses them, and
//! its default bandwidth only for a peer not yet measured.

use crate::engine::kernels;
use crate::store::Store;
use hetsched_common::leader::{LeaderClient, LeaderOptions};
use hetsched_common::program::{Api, ApiCall, CallRecord, SelectionTable, Transfer};
use hetsched_common::protocol::{
    ClientRequest, ClientResponse, ForwardQuery, ForwardTarget, LinkEstimate, Message, PeerReply,
    PeerRequest, SlaveRequest, SlaveResponse, MAX_FORWARD_ARG_BYTES, MAX_FORWARD_RESULT_BYTES,
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
/// A transfer smaller than this measures the round trip only: its time is mostly overhead.
pub const MEASURE_MIN_BYTES: u64 = 64 * 1024;

/// The links this slave measured, by peer; shared with the heartbeats.
pub type Links = Arc<Mutex<BTreeMap<NodeId, LinkEstimate>>>;

/// About how many result bytes `call` writes back (compress: a third of its input, as
/// text-like data deflates).
pub fn result_len_estimate(call: &ApiCall) -> u64 {
    let size = call.size();
    match call.api {
        Api::Gemm => size.saturating_mul(size).saturating_mul(4),
        Api::Sort => size.saturating_mul(8),
        Api::Sha256 => 32,
        Api::Compress => size / 3,
    }
}

/// Smooths one link sample into `l` (weight 1/4 on the new one).
fn smooth(old: u64, new: u64) -> u64 {
    if old == 0 {
        new
    } else {
        (old.saturating_mul(3).saturating_add(new)) / 4
    }
}

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
    links: Links,
    /// Per peer: smoothed bytes and µs of the transfers big enough to measure.
    meter: Mutex<BTreeMap<NodeId, (f64, f64)>>,
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
            links: Arc::default(),
            meter: Mutex::default(),
            leader: Mutex::new(leader),
        })
    }

    /// Options in force.
    pub fn options(&self) -> ForwardOptions {
        self.opts
    }

    /// The measured links (the heartbeats report them).
    pub fn links(&self) -> Links {
        self.links.clone()
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
        let arg_len = kernels::input_len(call);
        if arg_len > MAX_FORWARD_ARG_BYTES {
            return Forwarded::Local(Some(format!(
                "not forwarded: arguments of {arg_len} bytes exceed the forwarding cap of {MAX_FORWARD_ARG_BYTES} bytes"
            )));
        }
        // Generated once, when a peer is found, and sent to each peer asked.
        let mut args: Option<Vec<u8>> = None;
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
                transfer_bytes: arg_len.saturating_add(result_len_estimate(call)),
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
            let args = args.get_or_insert_with(|| kernels::inputs(call));
            match self
                .handle
                .block_on(self.send(me, &target, call, kinds.clone(), args))
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
        args: &[u8],
    ) -> Result<PeerAnswer, String> {
        let req = Message::Peer(PeerRequest::ForwardedCall {
            from: me,
            call: call.clone(),
            kinds,
            args: args.to_vec(),
        });
        let t0 = Instant::now();
        let conn = Connection::connect(&target.addr, self.opts.timeout)
            .await
            .map_err(|e| e.to_string())?;
        // The TCP handshake is one round trip.
        let rtt_us = (t0.elapsed().as_micros() as u64).max(1);
        let t1 = Instant::now();
        let answer = conn
            .call(req, self.opts.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let call_us = t1.elapsed().as_micros() as u64;
        match answer {
            Message::PeerReply(PeerReply::Done {
                mut record,
                served_us,
                result,
            }) => {
                if result.len() as u64 > MAX_FORWARD_RESULT_BYTES {
                    return Err(format!(
                        "result of {} bytes exceeds the forwarding cap of {MAX_FORWARD_RESULT_BYTES} bytes",
                        result.len()
                    ));
                }
                // What the bytes took: the call's time less the peer's service (one round
                // trip stays in, as the leader's cost adds a round trip of its own).
                let transfer_us = call_us.saturating_sub(served_us).max(1);
                let bytes = args.len() as u64 + result.len() as u64;
                {
                    // Moving averages: one slow call (a loaded machine) does not define the
                    // link. Bytes and time are smoothed apart and divided, so a transfer
                    // that took almost no time cannot swing the estimate.
                    let mut meter = lock(&self.meter);
                    let m = meter.entry(target.node).or_insert((0.0, 0.0));
                    if bytes >= MEASURE_MIN_BYTES {
                        *m = if m.1 == 0.0 {
                            (bytes as f64, transfer_us as f64)
                        } else {
                            (
                                0.75 * m.0 + 0.25 * bytes as f64,
                                0.75 * m.1 + 0.25 * transfer_us as f64,
                            )
                        };
                    }
                    let mut links = lock(&self.links);
                    let l = links.entry(target.node).or_insert(LinkEstimate {
                        node: target.node,
                        rtt_us: 0,
                        bytes_per_s: 0,
                    });
                    l.rtt_us = smooth(l.rtt_us, rtt_us);
                    if m.1 > 0.0 {
                        l.bytes_per_s = (m.0 * 1e6 / m.1) as u64;
                    }
                }
                if !result.is_empty() {
                    // The caller's result is the bytes it received.
                    record.digest = kernels::digest(&result);
                }
                record.transfer = Some(Transfer {
                    arg_bytes: args.len() as u64,
                    result_bytes: result.len() as u64,
                    transfer_us,
                    rtt_us,
                });
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

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
