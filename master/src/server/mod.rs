//! The master process: consensus, the cluster port (Raft, slaves and clients share it), and
//! the leader duties. Everything here does I/O; the decisions live in `hetsched-master-core`
//! (`state`, `sched`, `duties`).
//!
//! Requests are decided by a handler per family, each a small struct over the applied
//! state with unit tests that need no socket or runtime: [`client_jobs::ClientJobs`]
//! (submit, cancel, drain, priorities, batches), [`client_queries::ClientQueries`] (reads,
//! the status, dry runs), [`slave_reports::SlaveReports`] (registration, heartbeats, task
//! reports, forwarding), [`admin::Admin`] (membership, benchmarks, faults, log exports),
//! [`acl::Acl`] (tokens) and [`authz::Authz`] (who may send what). [`Master`] keeps the
//! async glue in three files: `ports` (the frame handler, the caller check, proposing,
//! read barriers, the leader check), `client_api` and `slave_api` (each request routed to
//! its handler, the handler's command proposed, its answer sent).
//!
//! Besides: `config` (the master's configuration and errors), `boot` (starting consensus
//! and the duties executor, binding the listeners), `hooks` (the chaos tests' deliberate
//! bugs, installed only with an admin listener), `heartbeats` (heartbeats answered off the
//! duties actor), `net` (the multi-threaded runtime of the cluster port), `reply` (error
//! replies); `duties_executor` carries out the pure duties core's effects, `senders` talk to
//! slaves, `forward_query` keeps S0.6 engine loads, `waiting` keeps why tasks wait, `usage`
//! computes users' quota standing, `logs` and `programs` fetch from slaves, `http` serves
//! metrics, the API and the UI.

mod acl;
mod admin;
mod authz;
mod boot;
mod client_api;
mod client_flows;
mod client_jobs;
mod client_queries;
mod config;
mod dependency_checks;
mod duties_executor;
pub(crate) mod events;
mod forward_query;
mod heartbeats;
mod hooks;
mod http;
mod job_wait;
mod logs;
mod net;
mod ports;
mod programs;
mod replicated;
mod reply;
mod report_groups;
mod senders;
mod slave_api;
mod slave_reports;
#[cfg(test)]
mod test_state;
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
    /// Read access to the applied state. Never held across an await.
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
    /// How the scheduler is configured (dry runs plan with it too).
    sched: client_queries::SchedulerSettings,
    /// State hash and size, cached per applied index: `status` serialises the whole state
    /// only when something applied since the last one asked.
    digest: Arc<std::sync::Mutex<Option<client_queries::StateDigest>>>,
    /// Admission back-pressure (leader-local).
    admission: Arc<std::sync::Mutex<crate::backpressure::Admission>>,
    /// S0.6: the slaves' engine load from their heartbeats (leader-local).
    engine_loads: Arc<forward_query::EngineLoads>,
    /// Verified API tokens (docs/SECURITY.md).
    token_cache: authz::TokenCache,
    /// Why tasks wait, and the last hour's queue lengths and allocation (leader-local).
    reasons: Arc<waiting::WaitReasons>,
    /// Heartbeats answered on the network threads, drained by the duties executor.
    heartbeats: Arc<heartbeats::HeartbeatDesk>,
    /// Issue 55: job and task state changes of the applied entries (this master's).
    events: Arc<std::sync::Mutex<events::Journal>>,
    /// Issue 54: the slaves' report batches, grouped into entries under load.
    report_groups: report_groups::ReportGroups,
}
