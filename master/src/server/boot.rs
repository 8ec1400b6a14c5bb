//! Starting a master: consensus, the duties executor and the tasks that feed it applied
//! entries and role changes; then binding the cluster, admin and HTTP listeners (retrying a
//! port its previous incarnation still holds) and serving them.

use super::client_queries::SchedulerSettings;
use super::duties_executor::{DutiesMsg, LeaderDuties};
use super::hooks::AdminHooks;
use super::report_groups::{Propose, ProposeFailure};
use super::{http, Error, Master, MasterConfig, MasterShared, Replicated};
use actix::prelude::*;
use hetsched_common::wire::{self, FrameLimits};
use hetsched_common::MasterId;
use hetsched_consensus::{Consensus, ProposeError, RaftConfig, Role};
use hetsched_master_core::duties::DutiesConfig;
use hetsched_master_core::state::{AccountingSettings, Replica};
use std::sync::{Arc, RwLock};

/// Starts consensus and the duties actor (inside an actix System).
fn start(cfg: &MasterConfig) -> Result<Master, Error> {
    if !cfg.peers.contains_key(&cfg.id) {
        return Err(Error::Config(format!(
            "--peers must include this master (id {})",
            cfg.id
        )));
    }
    let state = Arc::new(RwLock::new(Replica::new()));
    let (applied_tx, mut applied_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut raft_cfg = RaftConfig::new(cfg.id, cfg.peers.clone(), cfg.data_dir.join("raft"));
    raft_cfg.join = cfg.join;
    raft_cfg.snapshot_entries = cfg.snapshot_entries;
    let events = Arc::new(std::sync::Mutex::new(super::events::Journal::default()));
    let replicated = Replicated::new(state.clone(), applied_tx, events.clone());
    let raft = Consensus::start(raft_cfg, replicated)?;
    let shared = MasterShared {
        id: MasterId(cfg.id),
        peers: Arc::new(cfg.peers.clone()),
        state,
        raft: Arc::new(std::sync::OnceLock::new()),
    };
    let _ = shared.raft.set(raft.clone());
    let reasons: Arc<super::waiting::WaitReasons> = Arc::default();
    let heartbeats: Arc<super::heartbeats::HeartbeatDesk> = Arc::default();
    let sched = SchedulerSettings {
        policy: cfg.policy,
        cpu_policy: cfg.cpu_policy,
        preemption: cfg.preemption,
        queueing: cfg.queueing,
        engine_choice: cfg.engine_choice,
        queue_depth: cfg.queue_depth,
        parallel: cfg.parallel,
    };
    let duties = LeaderDuties::new(
        shared.clone(),
        raft.clone(),
        reasons.clone(),
        heartbeats.clone(),
        Box::new(sched.scheduler(cfg.id)),
        // Issue 53: the accounting flags are replicated settings: this master's barrier
        // carries them when it takes the lead.
        DutiesConfig {
            accounting: Some(AccountingSettings {
                retention_ms: cfg.accounting_retention_ms,
                half_life_ms: cfg.fairshare_half_life_ms,
            }),
            ..cfg.duties
        },
    )
    .start();
    let d = duties.clone();
    tokio::spawn(async move {
        while let Some(a) = applied_rx.recv().await {
            d.do_send(DutiesMsg::Applied(a));
        }
    });
    watch_role(&raft, duties.clone());
    let report_groups = super::report_groups::ReportGroups::start(proposer(&raft, &shared));
    Ok(Master {
        shared,
        raft,
        duties,
        snapshot_file: cfg.data_dir.join("raft").join("raft-snapshot.bin"),
        sched,
        digest: Arc::new(std::sync::Mutex::new(None)),
        engine_loads: Arc::default(),
        token_cache: Default::default(),
        reasons,
        heartbeats,
        events,
        report_groups,
        admission: Arc::new(std::sync::Mutex::new(crate::backpressure::Admission::new(
            cfg.admission,
        ))),
    })
}

/// How the report group commit proposes: as [`Master::propose`], handing a command too
/// large for one entry back.
fn proposer(raft: &Consensus<Replicated>, shared: &MasterShared) -> Propose {
    let (raft, shared) = (raft.clone(), shared.clone());
    Box::new(move |command| {
        let (raft, shared) = (raft.clone(), shared.clone());
        Box::pin(async move {
            super::ports::propose_stamped(&raft, command, None)
                .await
                .map_err(|(e, command)| ProposeFailure {
                    too_large: matches!(e, ProposeError::TooLarge(_)).then_some(command),
                    reply: shared.propose_error(e),
                })
        })
    })
}

/// Follows Raft's role: leader-change, term and is-leader metrics, and each change of
/// role, leader or term handed to the duties executor.
fn watch_role(raft: &Consensus<Replicated>, duties: Addr<LeaderDuties>) {
    let mut watch = raft.watch();
    tokio::spawn(async move {
        let mut last_role = None;
        loop {
            let st = watch.borrow_and_update().clone();
            if last_role.is_some_and(|(_, leader, _)| leader != st.leader) {
                metrics::counter!("hetsched_master_leader_changes_total").increment(1);
            }
            metrics::gauge!("hetsched_master_term").set(st.term as f64);
            if last_role != Some((st.role, st.leader, st.term)) {
                last_role = Some((st.role, st.leader, st.term));
                metrics::gauge!("hetsched_master_is_leader").set(if st.role == Role::Leader {
                    1.0
                } else {
                    0.0
                });
                duties.do_send(DutiesMsg::Raft(st));
            }
            if watch.changed().await.is_err() {
                break;
            }
        }
    });
}

/// How long a master keeps trying to bind a listener whose port is still held (by its own
/// previous incarnation, typically) before giving up.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds `addr`, retrying while the address is in use for up to [`BIND_RETRY`].
async fn bind_with_retry(what: &str, addr: &str) -> Result<tokio::net::TcpListener, Error> {
    let start = std::time::Instant::now();
    let mut backoff = hetsched_common::backoff::Backoff::new(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_millis(500),
    );
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < BIND_RETRY => {
                tracing::warn!(%addr, error = %e, "{what} address in use; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => {
                return Err(Error::Config(format!(
                    "cannot listen on {addr} ({what}): {e}"
                )))
            }
        }
    }
}

/// Runs a master until the process is stopped: binds the cluster port (and the admin port
/// when configured), starts consensus and the duties, and serves.
pub async fn run(cfg: MasterConfig) -> Result<(), Error> {
    let listener = bind_with_retry("cluster", &cfg.listen).await?;
    let admin = match &cfg.admin {
        Some(a) => Some(bind_with_retry("admin", a).await?),
        None => None,
    };
    // The recorder first, so that every series from the start is recorded.
    let http = match &cfg.http {
        Some(a) => Some((
            bind_with_retry("http", a).await?,
            http::install_recorder().map_err(Error::Metrics)?,
        )),
        None => None,
    };
    let master = start(&cfg)?;
    tracing::info!(id = cfg.id, listen = %cfg.listen, admin = ?cfg.admin, "master started");
    if let Some((listener, prometheus)) = http {
        let m = master.clone();
        tokio::spawn(async move {
            if let Err(e) = http::serve(listener, m, prometheus).await {
                tracing::error!(error = %e, "http listener stopped");
            }
        });
    }
    let mut handler = master.handler(false);
    if let Some(admin) = admin {
        // Test hooks come with the admin listener only: switched there, carried out in
        // front of the cluster port.
        let hooks = AdminHooks::default();
        let raft = master.raft.clone();
        handler = hooks.cluster_port(
            handler,
            Arc::new(move || raft.status().role == Role::Leader),
        );
        let duties = master.duties.clone();
        let admin_handler = hooks.admin_port(
            master.handler(true),
            // The dependency gate lives in the duties' scheduler.
            Arc::new(move |b| {
                duties.do_send(super::duties_executor::SetDependencyGate(
                    !b.skip_dependency_gate,
                ))
            }),
        );
        tokio::spawn(async move {
            if let Err(e) = wire::serve(admin, FrameLimits::default(), admin_handler).await {
                tracing::error!(error = %e, "admin listener stopped");
            }
        });
    }
    // The cluster port is served on the network runtime, off the actor thread.
    match super::net::spawn(wire::serve(listener, FrameLimits::default(), handler)).await {
        Ok(served) => served.map_err(|e| Error::Config(e.to_string())),
        Err(e) => Err(Error::Config(format!("cluster listener stopped: {e}"))),
    }
}
