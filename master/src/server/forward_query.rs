//! S0.6 on the leader: the engine load and the measured links the slaves' heartbeats report
//! (kept in memory, never logged, like liveness) and the answer to a slave's `ForwardQuery`,
//! decided by the pure [`hetsched_master_core::forward::choose`]. `nodes --json` shows each
//! slave's links on its entry.

use hetsched_common::protocol::{EngineLoad, ForwardQuery, ForwardTarget, LinkEstimate};
use hetsched_common::NodeId;
use hetsched_master_core::forward::{choose, Candidate};
use hetsched_master_core::state::{ClusterState, NodeLiveness};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A load report older than this is not used (the node may be gone; its heartbeats come
/// every few hundred ms).
const LOAD_FRESH_FOR: Duration = Duration::from_secs(3);

/// The last engine load each slave reported.
#[derive(Debug, Default)]
pub struct EngineLoads {
    by_node: Mutex<HashMap<NodeId, (Instant, Vec<EngineLoad>)>>,
    /// Each slave's links as it last reported them (kept until it reports again).
    links: Mutex<HashMap<NodeId, Vec<LinkEstimate>>>,
    /// Issue 52: the images each slave's store held at its last heartbeat.
    images: Mutex<HashMap<NodeId, Vec<hetsched_common::protocol::ImageInfo>>>,
}

impl EngineLoads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, (Instant, Vec<EngineLoad>)>> {
        match self.by_node.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Records a heartbeat's report (an empty one, from an older slave, is ignored).
    pub fn record(&self, node: NodeId, load: Vec<EngineLoad>) {
        if load.is_empty() {
            return;
        }
        self.lock().insert(node, (Instant::now(), load));
    }

    /// Records a heartbeat's links (an empty report, before any forwarded call or from an
    /// older slave, keeps what was known).
    pub fn record_links(&self, node: NodeId, links: Vec<LinkEstimate>) {
        if links.is_empty() {
            return;
        }
        let mut m = match self.links.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        m.insert(node, links);
    }

    /// Records a heartbeat's images (leader-local, as the links).
    pub fn record_images(&self, node: NodeId, images: Vec<hetsched_common::protocol::ImageInfo>) {
        let mut m = self.images.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(node, images);
    }

    /// The images `node`'s store held at its last heartbeat.
    pub fn images_of(&self, node: NodeId) -> Vec<hetsched_common::protocol::ImageInfo> {
        let m = self.images.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&node).cloned().unwrap_or_default()
    }

    /// `node`'s links as last reported, by peer id.
    pub fn links_of(&self, node: NodeId) -> Vec<LinkEstimate> {
        let m = match self.links.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut v = m.get(&node).cloned().unwrap_or_default();
        v.sort_by_key(|l| l.node);
        v
    }

    /// Answers a query from the applied state and the fresh load reports. The chosen
    /// engine's unit is counted as taken until the peer's next heartbeat, so that askers
    /// within one heartbeat period are spread over the free units instead of piling onto
    /// one.
    pub fn answer(&self, s: &ClusterState, q: &ForwardQuery) -> Option<ForwardTarget> {
        let mut loads = self.lock();
        let now = Instant::now();
        loads.retain(|_, (at, _)| now.duration_since(*at) < LOAD_FRESH_FOR);
        let candidates: Vec<Candidate<'_>> = s
            .nodes()
            .values()
            .map(|n| Candidate {
                node: n.id,
                name: &n.name,
                addr: &n.addr,
                eligible: n.liveness == NodeLiveness::Up && n.drain.is_none(),
                load: loads.get(&n.id).map(|(_, l)| l.as_slice()),
                table: s.profiles().get(&n.id).map(|p| &p.table),
            })
            .collect();
        // Links the query does not carry come from the asker's heartbeats.
        let mut q = q.clone();
        for l in self.links_of(q.node) {
            if !q.links.iter().any(|x| x.node == l.node) {
                q.links.push(l);
            }
        }
        let target = choose(&q, &candidates);
        drop(candidates);
        let target = target?;
        if let Some(l) = loads
            .get_mut(&target.node)
            .and_then(|(_, l)| l.iter_mut().find(|l| l.kind == target.engine))
        {
            l.free = l.free.saturating_sub(1);
        }
        Some(target)
    }
}
