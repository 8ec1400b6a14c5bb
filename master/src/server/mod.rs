//! The master process: consensus, the cluster port (Raft, slaves and clients share it), and
//! the leader duties. Everything here does I/O; the decisions live in `state` and `sched`.

mod duties;
mod forwarding;
mod http;
mod logs;
mod programs;
mod replicated;
mod senders;

pub use hetsched_master_core::duties::DutiesConfig;
pub use replicated::{Applied, Replicated};

use actix::prelude::*;
use duties::{DutiesMsg, Heartbeat, LeaderDuties};
use hetsched_common::protocol::{
    ClientRequest, ClientResponse, ErrorKind, ErrorReply, MemberInfo, Message, RaftCounters,
    SlaveRequest, SlaveResponse, StatusInfo,
};
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_common::{ClientRequestId, MasterId};
use hetsched_consensus::{Consensus, FaultConfig, ProposeError, RaftConfig, Role};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::preemption::PreemptionConfig;
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::{ClusterState, Command, CommandEnvelope, Outcome};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// Errors of the master process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
    /// Consensus failed to start.
    #[error(transparent)]
    Consensus(#[from] hetsched_consensus::Error),
    /// I/O (binding the port).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Metrics endpoint.
    #[error("metrics: {0}")]
    Metrics(String),
}

/// Configuration of one master.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// Id (≥ 1).
    pub id: u64,
    /// Cluster address to listen on.
    pub listen: String,
    /// Initial members and their cluster addresses (this one included).
    pub peers: BTreeMap<u64, String>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// HTTP address for /metrics.
    pub http: Option<String>,
    /// Admin address (bench proposals, fault injection): off when `None` (CONTRACT.md).
    pub admin: Option<String>,
    /// Leader-duty timing and retention.
    pub duties: DutiesConfig,
    /// Start empty and wait to be added to an existing cluster (`peers` holds only this
    /// master then).
    pub join: bool,
    /// Snapshot and compact the log every this many applied entries.
    pub snapshot_entries: u64,
    /// Node selection policy of the scheduler (for tasks that ask for GPUs).
    pub policy: PolicyKind,
    /// Limits of the S1 preemption stage.
    pub preemption: PreemptionConfig,
    /// Node selection policy for tasks that ask no GPU.
    pub cpu_policy: PolicyKind,
    /// Admission back-pressure: pending cap and per-user submit rate.
    pub admission: crate::backpressure::AdmissionConfig,
    /// S3 queue order and reserved CPU pools.
    pub queueing: hetsched_master_core::sched::multiqueue::QueueingConfig,
    /// S0.1–2 engine choice bounds (`--engine-efficiency-bound`, `--load-bound`).
    pub engine_choice: hetsched_master_core::sched::engine_choice::EngineChoiceConfig,
    /// S0.3 slave queue depth beyond free resources (`--queue-depth`; 0: off).
    pub queue_depth: u32,
}

/// Parses `ID=HOST:PORT,...`.
pub fn parse_peers(items: &[String]) -> Result<BTreeMap<u64, String>, Error> {
    let mut peers = BTreeMap::new();
    for item in items {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("peer {item:?} is not ID=HOST:PORT")))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| Error::Config(format!("peer id {id:?} is not a number")))?;
        if id == 0 {
            return Err(Error::Config(
                "peer ids start at 1 (0 means none in Raft)".into(),
            ));
        }
        hetsched_common::parse_host_port(addr.trim()).map_err(|e| Error::Config(e.to_string()))?;
        if peers.insert(id, addr.trim().to_string()).is_some() {
            return Err(Error::Config(format!("peer id {id} given twice")));
        }
    }
    Ok(peers)
}

/// What the request handlers and the duties actor share.
#[derive(Clone)]
pub struct MasterShared {
    /// This master.
    pub id: MasterId,
    peers: Arc<BTreeMap<u64, String>>,
    state: Arc<RwLock<ClusterState>>,
    /// Set once consensus has started (for member addresses).
    raft: Arc<std::sync::OnceLock<Consensus<Replicated>>>,
}

impl MasterShared {
    /// Read access to the applied state. Never held across an await.
    pub fn read_state(&self) -> RwLockReadGuard<'_, ClusterState> {
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

    /// A `NotLeader` answer naming the leader and its address when known.
    pub fn not_leader(&self, leader: Option<u64>) -> ErrorReply {
        ErrorReply::new(
            ErrorKind::NotLeader {
                leader: leader.map(MasterId),
                leader_addr: leader.and_then(|l| self.addr_of(l)),
            },
            match leader {
                Some(l) => format!("master {} is not the leader; master {l} is", self.id.0),
                None => format!("master {} is not the leader and knows no leader", self.id.0),
            },
        )
    }
}

impl MasterShared {
    /// Maps a consensus refusal to the answer a client can act on.
    pub fn propose_error(&self, e: ProposeError) -> ErrorReply {
        match e {
            ProposeError::NotLeader { leader } => self.not_leader(leader),
            // Dropped: it did not apply; Unknown: it may have. Both are safe to retry with
            // the same client request id.
            ProposeError::Dropped | ProposeError::Unknown => {
                ErrorReply::new(ErrorKind::Unknown, e.to_string())
            }
            ProposeError::TooLarge(_) | ProposeError::Invalid(_) => {
                ErrorReply::new(ErrorKind::Invalid, e.to_string())
            }
            ProposeError::Stopped | ProposeError::Timeout(_) => {
                ErrorReply::new(ErrorKind::Unavailable, e.to_string())
            }
        }
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
    digest: Arc<std::sync::Mutex<Option<StateDigest>>>,
    /// Admission back-pressure (leader-local).
    admission: Arc<std::sync::Mutex<crate::backpressure::Admission>>,
    /// Deliberate bugs switched on through the admin listener (chaos tests).
    bugs: Arc<std::sync::Mutex<hetsched_common::protocol::BugSpec>>,
    /// S0.6: the slaves' engine load from their heartbeats (leader-local).
    engine_loads: Arc<forwarding::EngineLoads>,
}

/// The state hash and serialised size at one applied index.
#[derive(Clone, Copy, Debug)]
struct StateDigest {
    index: u64,
    hash: u64,
    bytes: u64,
}

impl StateDigest {
    fn of(s: &ClusterState) -> Self {
        let bytes = s.to_bytes();
        Self {
            index: s.last_index(),
            hash: hetsched_master_core::state::fnv1a64(&bytes),
            bytes: bytes.len() as u64,
        }
    }
}

/// Requests served only on the admin listener: they change nothing a user owns but can
/// flood the log (benchmark proposals with payloads) or cut a master off (faults).
fn admin_only(req: &ClientRequest) -> Option<&'static str> {
    match req {
        ClientRequest::BenchPropose { .. } | ClientRequest::BenchCheck { .. } => {
            Some("benchmark requests")
        }
        ClientRequest::SetFaults(_) => Some("fault-injection requests"),
        ClientRequest::SetBugs(_) => Some("deliberate-bug switches"),
        ClientRequest::ExportLog { .. } => Some("log exports"),
        _ => None,
    }
}

/// The answer for a job id that is not in the state.
fn job_not_found(s: &ClusterState, job: hetsched_common::JobId) -> ErrorReply {
    ErrorReply::new(ErrorKind::NotFound, s.job_missing_message(job))
}

impl Master {
    /// Starts consensus and the duties actor (inside an actix System).
    pub fn start(cfg: &MasterConfig) -> Result<Self, Error> {
        if !cfg.peers.contains_key(&cfg.id) {
            return Err(Error::Config(format!(
                "--peers must include this master (id {})",
                cfg.id
            )));
        }
        let state = Arc::new(RwLock::new(ClusterState::new()));
        let (applied_tx, mut applied_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut raft_cfg = RaftConfig::new(cfg.id, cfg.peers.clone(), cfg.data_dir.join("raft"));
        raft_cfg.join = cfg.join;
        raft_cfg.snapshot_entries = cfg.snapshot_entries;
        let raft = Consensus::start(raft_cfg, Replicated::new(state.clone(), applied_tx))?;
        let shared = MasterShared {
            id: MasterId(cfg.id),
            peers: Arc::new(cfg.peers.clone()),
            state,
            raft: Arc::new(std::sync::OnceLock::new()),
        };
        let _ = shared.raft.set(raft.clone());
        let duties = LeaderDuties::new(
            shared.clone(),
            raft.clone(),
            Box::new(
                IndexedScheduler::new(cfg.policy, cfg.id)
                    .with_cpu_policy(cfg.cpu_policy, cfg.id)
                    .with_preemption(cfg.preemption)
                    .with_queueing(cfg.queueing)
                    .with_engine_choice(cfg.engine_choice)
                    .with_queue_depth(cfg.queue_depth),
            ),
            cfg.duties,
        )
        .start();
        let d = duties.clone();
        tokio::spawn(async move {
            while let Some(a) = applied_rx.recv().await {
                d.do_send(DutiesMsg::Applied(a));
            }
        });
        let mut watch = raft.watch();
        let d = duties.clone();
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
                    d.do_send(DutiesMsg::Raft(st));
                }
                if watch.changed().await.is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            shared,
            raft,
            duties,
            snapshot_file: cfg.data_dir.join("raft").join("raft-snapshot.bin"),
            policy: cfg.policy,
            cpu_policy: cfg.cpu_policy,
            preemption: cfg.preemption,
            queueing: cfg.queueing,
            engine_choice: cfg.engine_choice,
            queue_depth: cfg.queue_depth,
            digest: Arc::new(std::sync::Mutex::new(None)),
            bugs: Arc::default(),
            engine_loads: Arc::default(),
            admission: Arc::new(std::sync::Mutex::new(crate::backpressure::Admission::new(
                cfg.admission,
            ))),
        })
    }

    /// The frame handler for the cluster port (`admin` false) or the admin port (true):
    /// both serve everything, except that benchmark and fault-injection requests are
    /// refused on the cluster port.
    pub fn handler(&self, admin: bool) -> Handler {
        let me = self.clone();
        Arc::new(move |msg, _peer| {
            let me = me.clone();
            Box::pin(async move { me.handle(msg, admin).await })
        })
    }

    async fn handle(&self, msg: Message, admin: bool) -> Option<Message> {
        if let (false, Message::Client(req)) = (admin, &msg) {
            if let Some(what) = admin_only(req) {
                return Some(Message::Error(ErrorReply::new(
                    ErrorKind::Forbidden,
                    format!(
                        "{what} are served only on the admin listener (master --admin HOST:PORT), \
                         not on the cluster port"
                    ),
                )));
            }
        }
        match msg {
            Message::Raft { from, msgs } => {
                self.raft
                    .step(from.0, msgs.into_iter().map(|b| b.into_vec()).collect());
                None
            }
            Message::Client(req) => {
                let submit = matches!(req, ClientRequest::Submit { .. });
                let started = std::time::Instant::now();
                let answer = self.client(req).await;
                if submit {
                    metrics::histogram!("hetsched_master_submit_seconds", "via" => "cluster")
                        .record(started.elapsed());
                }
                Some(match answer {
                    Ok(r) => Message::ClientReply(r),
                    Err(e) => Message::Error(e),
                })
            }
            Message::Slave(req) => Some(match self.slave(req).await {
                Ok(r) => Message::SlaveReply(r),
                Err(e) => Message::Error(e),
            }),
            other => Some(Message::Error(ErrorReply::new(
                ErrorKind::Unsupported,
                format!("a master does not serve {}", message_name(&other)),
            ))),
        }
    }

    /// Proposes a command and waits until it is applied.
    async fn propose(
        &self,
        command: Command,
        request: Option<ClientRequestId>,
    ) -> Result<Outcome, ErrorReply> {
        let bytes = CommandEnvelope {
            at_ms: now_ms(),
            request,
            command,
        }
        .encode();
        let started = std::time::Instant::now();
        let r = self.raft.propose(bytes).await;
        if r.is_ok() {
            // Proposal to applied on this (leading) master.
            metrics::histogram!("hetsched_master_raft_commit_seconds").record(started.elapsed());
        }
        r.map_err(|e| self.shared.propose_error(e))
    }

    /// Admission back-pressure on the leader (a follower's submit is redirected anyway):
    /// refuses with `Busy` "busy, retry" (exit 5) when the pending queue is at its
    /// cap or the user is over the submit rate. A retried request that already applied is
    /// never refused (its answer is in the state).
    fn admit(
        &self,
        request: ClientRequestId,
        spec: &hetsched_common::JobSpec,
    ) -> Result<(), ErrorReply> {
        if self.raft.status().role != Role::Leader {
            return Ok(());
        }
        let pending = {
            let s = self.shared.read_state();
            if s.request_applied(request) {
                return Ok(());
            }
            s.pending().len() as u64
        };
        let mut a = match self.admission.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let now = now_ms();
        a.forget_idle(now);
        a.admit(&spec.user, u64::from(spec.count), pending, now)
            .map_err(|busy| {
                metrics::counter!("hetsched_master_submits_refused_busy_total").increment(1);
                ErrorReply::new(ErrorKind::Busy, busy.to_string())
            })
    }

    /// A linearizable read (Raft ReadIndex) unless the client accepts a stale answer: only a
    /// leader confirmed by a quorum, with everything committed before the read applied,
    /// answers. A deposed leader cut off from the majority cannot confirm and never answers.
    async fn read_barrier(&self, stale: bool) -> Result<(), ErrorReply> {
        if stale {
            return Ok(());
        }
        self.raft
            .read_index()
            .await
            .map(|_| ())
            .map_err(|e| self.shared.propose_error(e))
    }

    fn require_leader(&self) -> Result<(), ErrorReply> {
        let st = self.raft.status();
        if st.role == Role::Leader {
            Ok(())
        } else {
            Err(self.shared.not_leader(st.leader))
        }
    }

    pub(crate) async fn client(&self, req: ClientRequest) -> Result<ClientResponse, ErrorReply> {
        // Writes check what they name (a job, a task, a node) against the applied state
        // before proposing: only the leader's is current for that. A follower's may lag
        // behind a submit the leader already acknowledged, so it redirects instead.
        if matches!(
            req,
            ClientRequest::Submit { .. }
                | ClientRequest::Cancel { .. }
                | ClientRequest::CancelTask { .. }
                | ClientRequest::Drain { .. }
                | ClientRequest::Undrain { .. }
        ) {
            self.require_leader()?;
        }
        match req {
            ClientRequest::Submit { request, spec } => {
                spec.validate()
                    .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
                if let Some(n) = {
                    let s = self.shared.read_state();
                    spec.nodes
                        .iter()
                        .find(|n| s.resolve_node(n).is_none())
                        .cloned()
                } {
                    return Err(ErrorReply::new(
                        ErrorKind::NotFound,
                        format!(
                            "no such node: {n:?} (locality candidates must be registered nodes)"
                        ),
                    ));
                }
                self.admit(request, &spec)?;
                if self.bugs.lock().is_ok_and(|b| b.ack_before_commit) {
                    // Deliberate bug: acknowledged, never committed.
                    let base = u64::MAX / 2 + (request.0 >> 16);
                    return Ok(ClientResponse::Submitted {
                        job: hetsched_common::JobId(base),
                        tasks: (0..u64::from(spec.count))
                            .map(|i| hetsched_common::TaskId(base + i))
                            .collect(),
                    });
                }
                match self
                    .propose(Command::SubmitJob { spec }, Some(request))
                    .await?
                {
                    Outcome::Submitted { job, tasks } => {
                        Ok(ClientResponse::Submitted { job, tasks })
                    }
                    o => Err(unexpected(o)),
                }
            }
            ClientRequest::Cancel { request, job } => {
                {
                    let s = self.shared.read_state();
                    if !s.jobs().contains_key(&job) {
                        return Err(job_not_found(&s, job));
                    }
                }
                match self
                    .propose(Command::CancelJob { job }, Some(request))
                    .await?
                {
                    Outcome::Cancelled { job, tasks, .. } => {
                        Ok(ClientResponse::Cancelled { job, tasks })
                    }
                    o => Err(unexpected(o)),
                }
            }
            ClientRequest::Status { stale } => {
                self.read_barrier(stale).await?;
                Ok(ClientResponse::Status(self.status_info(stale)))
            }
            ClientRequest::Jobs { stale, filter } => {
                self.read_barrier(stale).await?;
                let s = self.shared.read_state();
                s.list_jobs(&filter)
                    .map(ClientResponse::Jobs)
                    .map_err(list_error)
            }
            ClientRequest::Tasks {
                stale,
                job,
                mut filter,
            } => {
                self.read_barrier(stale).await?;
                filter.job = filter.job.or(job);
                let s = self.shared.read_state();
                s.list_tasks(&filter)
                    .map(ClientResponse::Tasks)
                    .map_err(list_error)
            }
            ClientRequest::Nodes { stale } => {
                self.read_barrier(stale).await?;
                let s = self.shared.read_state();
                Ok(ClientResponse::Nodes(
                    s.nodes().values().map(|n| s.node_info(n)).collect(),
                ))
            }
            ClientRequest::Members { stale } => {
                self.read_barrier(stale).await?;
                let leader = self.raft.status().leader;
                Ok(ClientResponse::Members(
                    self.raft
                        .members()
                        .into_iter()
                        .map(|m| MemberInfo {
                            id: MasterId(m.id),
                            addr: m.addr,
                            voter: m.voter,
                            leader: leader == Some(m.id),
                            match_index: m.match_index,
                        })
                        .collect(),
                ))
            }
            ClientRequest::AddMember { id, addr } => {
                if id.0 == 0 {
                    return Err(ErrorReply::new(ErrorKind::Invalid, "master ids start at 1"));
                }
                hetsched_common::parse_host_port(&addr)
                    .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
                self.raft
                    .add_member(id.0, addr)
                    .await
                    .map_err(|e| self.shared.propose_error(e))?;
                Ok(ClientResponse::Done)
            }
            ClientRequest::RemoveMember { id } => {
                self.raft
                    .remove_member(id.0)
                    .await
                    .map_err(|e| self.shared.propose_error(e))?;
                Ok(ClientResponse::Done)
            }
            ClientRequest::TransferLeader { id } => {
                self.raft
                    .transfer_leader(id.0)
                    .await
                    .map_err(|e| self.shared.propose_error(e))?;
                Ok(ClientResponse::Done)
            }
            ClientRequest::BenchPropose {
                client,
                seq,
                record,
                payload,
            } => {
                let cmd = Command::Bench {
                    client,
                    seq,
                    record,
                    payload,
                };
                self.propose(cmd, None).await?;
                Ok(ClientResponse::Done)
            }
            ClientRequest::BenchCheck { client, acked } => {
                self.read_barrier(false).await?;
                let s = self.shared.read_state();
                let empty = Default::default();
                let c = s.bench().get(&client).unwrap_or(&empty);
                Ok(ClientResponse::BenchChecked {
                    applied: c.recorded.len() as u64,
                    missing: acked
                        .into_iter()
                        .filter(|q| !c.recorded.contains(q))
                        .collect(),
                })
            }
            ClientRequest::SetPriorityConfig { request, config } => {
                match self
                    .propose(Command::SetPriorityConfig { config }, Some(request))
                    .await?
                {
                    Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
                    _ => Ok(ClientResponse::PriorityConfig(
                        self.shared.read_state().priority().clone(),
                    )),
                }
            }
            ClientRequest::PriorityConfig { stale } => {
                self.read_barrier(stale).await?;
                Ok(ClientResponse::PriorityConfig(
                    self.shared.read_state().priority().clone(),
                ))
            }
            ClientRequest::DryRun { spec } => {
                spec.validate()
                    .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
                self.read_barrier(false).await?;
                Ok(ClientResponse::DryRun(self.dry_run(spec)?))
            }
            ClientRequest::SetFaults(f) => {
                tracing::warn!(faults = ?f, "fault injection changed");
                self.raft.set_faults(FaultConfig {
                    seed: f.seed,
                    drop_rate: f.drop_rate.clamp(0.0, 1.0),
                    delay: std::time::Duration::from_millis(f.delay_ms),
                    cut: f.cut.iter().map(|m| m.0).collect(),
                    isolated: f.isolated,
                });
                Ok(ClientResponse::Done)
            }
            ClientRequest::SetBugs(b) => {
                tracing::warn!(bugs = ?b, "deliberate bugs changed");
                if let Ok(mut cur) = self.bugs.lock() {
                    *cur = b;
                }
                Ok(ClientResponse::Done)
            }
            ClientRequest::ExportLog { from, max_bytes } => {
                // Bounded so that one page (plus a small cluster's snapshot) stays far inside
                // a frame.
                const DEFAULT_PAGE: u64 = 1024 * 1024;
                const MAX_PAGE: u64 = 4 * 1024 * 1024;
                let max_bytes = match max_bytes {
                    0 => DEFAULT_PAGE,
                    n => n.min(MAX_PAGE),
                };
                let page = self
                    .raft
                    .export_log(from, max_bytes)
                    .await
                    .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?;
                use hetsched_common::protocol::{LogEntry, LogPage, LogSnapshot};
                Ok(ClientResponse::LogPage(LogPage {
                    master: hetsched_common::MasterId(self.raft.id()),
                    snapshot: page.snapshot.map(|(index, state)| LogSnapshot {
                        index,
                        state: serde_bytes::ByteBuf::from(state),
                    }),
                    entries: page
                        .entries
                        .into_iter()
                        .map(|(index, command)| LogEntry {
                            index,
                            command: serde_bytes::ByteBuf::from(command),
                        })
                        .collect(),
                    next: page.next,
                    applied: page.applied,
                }))
            }
            ClientRequest::CancelTask { request, task } => {
                if !self.shared.read_state().tasks().contains_key(&task) {
                    return Err(not_found(format!("no such task: {task}")));
                }
                match self
                    .propose(Command::CancelTask { task }, Some(request))
                    .await?
                {
                    Outcome::Cancelled { job, tasks, .. } => {
                        Ok(ClientResponse::Cancelled { job, tasks })
                    }
                    o => Err(unexpected(o)),
                }
            }
            ClientRequest::Drain {
                request,
                node,
                deadline_after_ms,
            } => {
                let id = self.node_named(&node)?;
                let deadline_ms = deadline_after_ms.map(|d| now_ms().saturating_add(d));
                let cmd = Command::DrainNode {
                    node: id,
                    deadline_ms,
                };
                self.node_change(cmd, request, id).await
            }
            ClientRequest::Undrain { request, node } => {
                let id = self.node_named(&node)?;
                self.node_change(Command::UndrainNode { node: id }, request, id)
                    .await
            }
            ClientRequest::Logs {
                task,
                attempt,
                stderr,
                offset,
                max_bytes,
            } => {
                logs::read(
                    &self.shared,
                    logs::LogQuery {
                        task,
                        attempt,
                        stderr,
                        offset,
                        max_bytes,
                    },
                )
                .await
            }
            ClientRequest::Calls { task } => {
                self.read_barrier(false).await?;
                let (node, addr, attempt) = programs::locate(&self.shared.read_state(), task)?;
                programs::fetch_calls(task, node, &addr, attempt).await
            }
            ClientRequest::Profiles { stale } => {
                self.read_barrier(stale).await?;
                Ok(ClientResponse::Profiles(programs::profiles_info(
                    &self.shared.read_state(),
                )))
            }
        }
    }

    /// The node a client names (name, id or `node-N`), or a not-found answer.
    fn node_named(&self, name: &str) -> Result<hetsched_common::NodeId, ErrorReply> {
        self.shared
            .read_state()
            .resolve_node(name)
            .ok_or_else(|| not_found(format!("no such node: {name:?}")))
    }

    /// Proposes a drain change and answers with the node as it is after it applied.
    async fn node_change(
        &self,
        cmd: Command,
        request: ClientRequestId,
        id: hetsched_common::NodeId,
    ) -> Result<ClientResponse, ErrorReply> {
        match self.propose(cmd, Some(request)).await? {
            Outcome::DrainChanged { node } => {
                let s = self.shared.read_state();
                s.nodes()
                    .get(&node)
                    .map(|n| ClientResponse::Node(s.node_info(n)))
                    .ok_or_else(|| not_found(format!("no such node: {id}")))
            }
            o => Err(unexpected(o)),
        }
    }

    /// Applies the submission to a copy of the state and runs one scheduling round on it:
    /// the priorities admission would give, where the round would place each task and what
    /// it would preempt. Nothing is proposed.
    fn dry_run(
        &self,
        spec: hetsched_common::JobSpec,
    ) -> Result<Vec<hetsched_common::protocol::DryRunTask>, ErrorReply> {
        let mut copy = self.shared.read_state().clone();
        let index = copy.last_index() + 1;
        let tasks = match copy.apply(
            index,
            CommandEnvelope {
                at_ms: now_ms(),
                request: None,
                command: Command::SubmitJob { spec },
            },
        ) {
            Outcome::Submitted { tasks, .. } => tasks,
            o => return Err(unexpected(o)),
        };
        let mut sched = IndexedScheduler::new(self.policy, self.shared.id.0)
            .with_cpu_policy(self.cpu_policy, self.shared.id.0)
            .with_preemption(self.preemption)
            .with_queueing(self.queueing)
            .with_engine_choice(self.engine_choice)
            .with_queue_depth(self.queue_depth);
        sched.max_per_plan = usize::MAX;
        sched.reset(&copy);
        let plan = sched.plan(&copy);
        Ok(tasks
            .iter()
            .filter_map(|t| copy.tasks().get(t))
            .map(|t| hetsched_common::protocol::DryRunTask {
                index: t.index,
                priority: t.priority,
                node: plan
                    .assignments
                    .iter()
                    .find(|a| a.task == t.id)
                    .map(|a| a.node),
                engine: plan
                    .assignments
                    .iter()
                    .find(|a| a.task == t.id)
                    .and_then(|a| a.engine),
                queued: plan.assignments.iter().any(|a| a.task == t.id && a.queued),
                preempts: plan
                    .preempt
                    .iter()
                    .filter(|p| p.preemptor == t.id)
                    .flat_map(|p| p.victims.iter().map(|v| v.task))
                    .collect(),
            })
            .collect())
    }

    /// The state's hash and size at its applied index (computed at most once per index).
    fn digest(&self, s: &ClusterState) -> StateDigest {
        let mut cache = match self.digest.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match *cache {
            Some(d) if d.index == s.last_index() => d,
            _ => {
                let d = StateDigest::of(s);
                *cache = Some(d);
                d
            }
        }
    }

    fn status_info(&self, stale: bool) -> StatusInfo {
        let st = self.raft.status();
        let s = self.shared.read_state();
        let digest = self.digest(&s);
        StatusInfo {
            master_id: self.shared.id,
            leader: st.leader.map(MasterId),
            leader_addr: st.leader.and_then(|l| self.shared.addr_of(l)),
            term: st.term,
            role: match st.role {
                Role::Leader => "leader",
                Role::Follower => "follower",
                Role::Candidate => "candidate",
                Role::PreCandidate => "pre-candidate",
            }
            .to_string(),
            applied_index: s.last_index(),
            state_hash: format!("{:016x}", digest.hash),
            stale: stale || st.role != Role::Leader,
            nodes: s.node_counts(),
            jobs: s.jobs().len() as u64,
            tasks: s.task_counts(),
            queues: s.queue_counts(),
            cpu_config: s
                .cpu_history()
                .iter()
                .map(|(class, milli)| (class.as_str().to_string(), *milli as f64 / 1000.0))
                .collect(),
            state_bytes: digest.bytes,
            snapshot_bytes: std::fs::metadata(&self.snapshot_file).map_or(0, |m| m.len()),
            raft: {
                let c = self.raft.stats();
                RaftCounters {
                    commit_index: st.commit_index,
                    first_index: c.first_index,
                    proposals: c.proposals,
                    entries_persisted: c.entries_persisted,
                    flushes: c.flushes,
                    snapshots: c.snapshots,
                }
            },
        }
    }

    async fn slave(&self, req: SlaveRequest) -> Result<SlaveResponse, ErrorReply> {
        match req {
            SlaveRequest::Register {
                key,
                node,
                name,
                addr,
                capacity,
                labels,
                held,
                partitions,
            } => {
                self.require_leader()?;
                hetsched_common::parse_host_port(&addr)
                    .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
                let cmd = Command::RegisterNode {
                    key,
                    node,
                    name,
                    addr,
                    capacity,
                    labels,
                    partitions,
                };
                match self.propose(cmd, None).await? {
                    Outcome::Registered { node } => {
                        // Registration doubles as the first heartbeat.
                        let _ = self
                            .duties
                            .send(Heartbeat {
                                node,
                                held,
                                samples: Vec::new(),
                            })
                            .await;
                        Ok(SlaveResponse::Registered { node })
                    }
                    Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
                    o => Err(unexpected(o)),
                }
            }
            SlaveRequest::Heartbeat {
                node,
                held,
                samples,
                engine_load,
            } => {
                self.engine_loads.record(node, engine_load);
                match self
                    .duties
                    .send(Heartbeat {
                        node,
                        held,
                        samples,
                    })
                    .await
                {
                    Ok(Ok(leader)) => Ok(SlaveResponse::HeartbeatAck { leader }),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(ErrorReply::new(ErrorKind::Unavailable, e.to_string())),
                }
            }
            SlaveRequest::TaskStarted {
                node,
                task,
                attempt,
            } => {
                self.require_leader()?;
                self.propose(
                    Command::TaskStarted {
                        node,
                        task,
                        attempt,
                    },
                    None,
                )
                .await?;
                // Stale or not, the report is settled: the slave may forget it.
                Ok(SlaveResponse::Ack)
            }
            SlaveRequest::TaskFinished {
                node,
                task,
                attempt,
                exit_code,
                reason,
            } => {
                self.require_leader()?;
                // A lost attempt (its supervisor vanished without a recorded exit) did not
                // finish: it is re-queued with attempt + 1, like one found by reconciliation.
                let cmd = if reason == Some(hetsched_common::TaskReason::Lost) {
                    Command::TaskLost {
                        node,
                        task,
                        attempt,
                    }
                } else {
                    Command::TaskFinished {
                        node,
                        task,
                        attempt,
                        exit_code,
                        reason,
                    }
                };
                let was_final = self.task_is_final(task);
                self.propose(cmd, None).await?;
                if !was_final {
                    task_outcome_metric(&self.shared.read_state(), task, attempt);
                }
                Ok(SlaveResponse::Ack)
            }
            SlaveRequest::RecordProfile {
                node,
                engines,
                table,
            } => {
                self.require_leader()?;
                let cmd = Command::RecordProfile {
                    node,
                    engines,
                    table,
                };
                match self.propose(cmd, None).await? {
                    Outcome::Rejected(why) if why.starts_with("unknown node") => {
                        Err(ErrorReply::new(ErrorKind::UnknownNode, why))
                    }
                    Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
                    _ => Ok(SlaveResponse::Ack),
                }
            }
            SlaveRequest::RecordCalls {
                node,
                task,
                attempt,
                summary,
            } => {
                self.require_leader()?;
                let cmd = Command::RecordCalls {
                    node,
                    task,
                    attempt,
                    summary,
                };
                self.propose(cmd, None).await?;
                Ok(SlaveResponse::Ack)
            }
            SlaveRequest::StealRequest { node } => {
                self.require_leader()?;
                self.duties
                    .send(duties::StealRequest { thief: node })
                    .await
                    .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?;
                Ok(SlaveResponse::Ack)
            }
            SlaveRequest::ForwardQuery(q) => {
                self.require_leader()?;
                let target = self.engine_loads.answer(&self.shared.read_state(), &q);
                match &target {
                    Some(t) => {
                        tracing::debug!(asker = %q.node, api = %q.api, target = %t.node, engine = %t.engine, cost_us = t.cost_us, "forwarding target")
                    }
                    None => tracing::debug!(asker = %q.node, api = %q.api, "no forwarding target"),
                }
                Ok(SlaveResponse::ForwardTarget(target))
            }
            SlaveRequest::TaskReports { node, reports } => {
                self.require_leader()?;
                if !reports.is_empty() {
                    let finishing: Vec<(hetsched_common::TaskId, u32)> = reports
                        .iter()
                        .filter_map(|r| match r {
                            hetsched_common::protocol::TaskReport::Finished {
                                task,
                                attempt,
                                ..
                            } if !self.task_is_final(*task) => Some((*task, *attempt)),
                            _ => None,
                        })
                        .collect();
                    // S3.6 compressions are entries of their own (`CompressTask`), counted
                    // once here, by the leader that proposed them.
                    let (compressions, reports): (Vec<_>, Vec<_>) =
                        reports.into_iter().partition(|r| {
                            matches!(r, hetsched_common::protocol::TaskReport::Compressed { .. })
                        });
                    for c in compressions {
                        if let hetsched_common::protocol::TaskReport::Compressed {
                            task,
                            attempt,
                            cpu_milli,
                            gpu_task,
                        } = c
                        {
                            let cmd = Command::CompressTask {
                                node,
                                task,
                                attempt,
                                cpu_milli,
                                gpu_task,
                            };
                            if self.propose(cmd, None).await? == Outcome::TaskUpdated {
                                metrics::counter!("hetsched_master_compressions_total")
                                    .increment(1);
                                tracing::info!(%task, %gpu_task, cpu_milli, "CPU task compressed");
                            }
                        }
                    }
                    // One entry for the whole batch; stale reports in it are ignored at apply.
                    if !reports.is_empty() {
                        self.propose(Command::TaskReports { node, reports }, None)
                            .await?;
                    }
                    let s = self.shared.read_state();
                    for (task, attempt) in finishing {
                        task_outcome_metric(&s, task, attempt);
                    }
                }
                Ok(SlaveResponse::Ack)
            }
        }
    }
}

impl Master {
    /// Whether `task` has ended for good (or is unknown): its outcome was counted already.
    fn task_is_final(&self, task: hetsched_common::TaskId) -> bool {
        self.shared
            .read_state()
            .tasks()
            .get(&task)
            .is_none_or(|t| t.status.state.is_final())
    }
}

/// Counts a task's end once, on the leader that committed the report that ended it: by the
/// state it ended in and its reason (CONTRACT.md, "Task states and reasons"). Ends the
/// leader decides itself (cancel, timeout) are counted in the duties.
fn task_outcome_metric(s: &ClusterState, task: hetsched_common::TaskId, attempt: u32) {
    let Some(t) = s.tasks().get(&task) else {
        return;
    };
    if t.status.attempt != attempt || !t.status.state.is_final() {
        return;
    }
    let reason = t
        .status
        .reason
        .map_or_else(|| "none".to_string(), |r| r.to_string());
    metrics::counter!(
        "hetsched_master_task_outcomes_total",
        "state" => t.status.state.as_str(),
        "reason" => reason
    )
    .increment(1);
}

fn not_found(message: String) -> ErrorReply {
    ErrorReply::new(ErrorKind::NotFound, message)
}

fn list_error(e: hetsched_master_core::state::ListError) -> ErrorReply {
    match e {
        hetsched_master_core::state::ListError::NotFound(m) => not_found(m),
        hetsched_master_core::state::ListError::Invalid(m) => {
            ErrorReply::new(ErrorKind::Invalid, m)
        }
    }
}

fn unexpected(o: Outcome) -> ErrorReply {
    match o {
        Outcome::Rejected(why) => ErrorReply::new(ErrorKind::Invalid, why),
        o => ErrorReply::new(ErrorKind::Internal, format!("unexpected outcome {o:?}")),
    }
}

fn message_name(m: &Message) -> &'static str {
    match m {
        Message::Raft { .. } => "raft messages",
        Message::Client(_) => "client requests",
        Message::ClientReply(_) => "client replies",
        Message::Slave(_) => "slave requests",
        Message::SlaveReply(_) => "slave replies",
        Message::ToSlave(_) => "slave commands",
        Message::ToSlaveReply(_) => "slave command replies",
        Message::Error(_) => "error replies",
        Message::Peer(_) => "slave-to-slave requests",
        Message::PeerReply(_) => "slave-to-slave replies",
    }
}

/// How long a master keeps trying to bind a listener whose port is still held (by its own
/// previous incarnation, typically) before giving up.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds `addr`, retrying while the address is in use for up to [`BIND_RETRY`].
async fn bind_with_retry(what: &str, addr: &str) -> Result<tokio::net::TcpListener, Error> {
    let start = std::time::Instant::now();
    let mut delay = std::time::Duration::from_millis(50);
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < BIND_RETRY => {
                tracing::warn!(%addr, error = %e, "{what} address in use; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_millis(500));
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
    let master = Master::start(&cfg)?;
    tracing::info!(id = cfg.id, listen = %cfg.listen, admin = ?cfg.admin, "master started");
    if let Some((listener, prometheus)) = http {
        let m = master.clone();
        tokio::spawn(async move {
            if let Err(e) = http::serve(listener, m, prometheus).await {
                tracing::error!(error = %e, "http listener stopped");
            }
        });
    }
    if let Some(admin) = admin {
        let handler = master.handler(true);
        tokio::spawn(async move {
            if let Err(e) = wire::serve(admin, FrameLimits::default(), handler).await {
                tracing::error!(error = %e, "admin listener stopped");
            }
        });
    }
    wire::serve(listener, FrameLimits::default(), master.handler(false))
        .await
        .map_err(|e| Error::Config(e.to_string()))
}
