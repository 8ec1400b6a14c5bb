//! The master process: consensus, the cluster port (Raft, slaves and clients share it), and
//! the leader duties. Everything here does I/O; the decisions live in `hetsched-master-core`
//! (`state`, `sched`, `duties`).
//!
//! By concern: `config` (the master's configuration and errors), `boot` (starting
//! consensus and the duties executor, binding the listeners), `ports` (what the cluster and
//! admin ports serve), `client_api` (client writes), `client_queries` (client reads, the
//! status and dry runs), `membership` (Raft membership requests), `slave_api` (slave
//! requests), `heartbeats` (heartbeats answered off the duties actor), `net` (the
//! multi-threaded runtime of the cluster port), `admin` (benchmark requests, faults and deliberate-bug switches), `authz` (who may
//! send which client request), `acl` (token requests),
//! `consensus_io` (proposing, read barriers, the leader check), `reply` (error replies);
//! `duties_executor` carries out the pure duties core's effects, `senders` talk to slaves,
//! `forward_query` answers S0.6 forwarding queries, `waiting` keeps why tasks wait, `usage` answers users' quota standing, `http` serves metrics, the API and the UI.

mod acl;
mod admin;
mod authz;
mod batch;
mod boot;
mod client_api;
mod client_queries;
mod config;
mod consensus_io;
mod dependency_checks;
mod duties_executor;
mod flows;
mod forward_query;
mod heartbeats;
mod http;
mod logs;
mod membership;
mod net;
mod ports;
mod programs;
mod replicated;
mod reply;
mod senders;
mod slave_api;
mod usage;
mod waiting;

pub use boot::run;
pub use config::{parse_peers, Error, MasterConfig};
pub use hetsched_master_core::duties::DutiesConfig;
pub use replicated::{Applied, Replicated};

use actix::prelude::*;
use duties_executor::LeaderDuties;
use hetsched_common::MasterId;
use hetsched_consensus::Consensus;
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::preemption::PreemptionConfig;
use hetsched_master_core::state::Replica;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// What the request handlers and the duties actor share.
#[derive(Clone)]
pub struct MasterShared {
    /// This master.
    pub id: MasterId,
    peers: Arc<BTreeMap<u64, String>>,
    state: Arc<RwLock<Replica>>,
    /// Set once consensus has started (for member addresses).
    raft: Arc<std::sync::OnceLock<Consensus<Replicated>>>,
}

impl MasterShared {
    /// Read access to the applied state (a [`Replica`] reads as its cluster state). Never
    /// held across an await.
    pub fn read_state(&self) -> RwLockReadGuard<'_, Replica> {
        match self.state.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Cluster address of master `id`: from the live Raft configuration (members added
    /// later included), else from the bootstrap peers.
    pub fn addr_of(&self, id: u64) -> Option<String> {
        self.raft
            .get()
            .and_then(|r| r.peer_addr(id))
            .or_else(|| self.peers.get(&id).cloned())
    }
}

/// Milliseconds since the Unix epoch: the leader stamps every command with it.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A running master's handles.
#[derive(Clone)]
pub struct Master {
    shared: MasterShared,
    raft: Consensus<Replicated>,
    duties: Addr<LeaderDuties>,
    snapshot_file: PathBuf,
    policy: PolicyKind,
    cpu_policy: PolicyKind,
    preemption: PreemptionConfig,
    queueing: hetsched_master_core::sched::multiqueue::QueueingConfig,
    engine_choice: hetsched_master_core::sched::engine_choice::EngineChoiceConfig,
    queue_depth: u32,
    /// State hash and size, cached per applied index: `status` serialises the whole state
    /// only when something applied since the last one asked.
    digest: Arc<std::sync::Mutex<Option<client_queries::StateDigest>>>,
    /// Admission back-pressure (leader-local).
    admission: Arc<std::sync::Mutex<crate::backpressure::Admission>>,
    /// Deliberate bugs switched on through the admin listener (chaos tests).
    bugs: Arc<std::sync::Mutex<hetsched_common::protocol::BugSpec>>,
    /// S0.6: the slaves' engine load from their heartbeats (leader-local).
    engine_loads: Arc<forward_query::EngineLoads>,
    /// Verified API tokens (docs/SECURITY.md).
    token_cache: authz::TokenCache,
    /// Why tasks wait, and the last hour's queue lengths and allocation (leader-local).
    reasons: Arc<waiting::WaitReasons>,
    /// Heartbeats answered on the network threads, drained by the duties executor.
    heartbeats: Arc<heartbeats::HeartbeatDesk>,
}
