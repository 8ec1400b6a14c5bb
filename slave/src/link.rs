//! The link to the masters: registration, heartbeats, and delivery of reports until the
//! leader acknowledges them.
//!
//! # Choosing the master
//! Requests go through a [`LeaderClient`]: first to the leader remembered from the last run
//! (a hint kept in the store), else the configured masters in order; `NotLeader` redirects
//! are followed at once (a few hops at most), and a broken connection, a timeout,
//! `NotLeader` without an address, or `Unavailable` moves on to the next configured master,
//! the request waiting for the next round. Rounds back off exponentially while nothing
//! answers; the slave never gives up. The master that answers is remembered in the store.

use crate::agent::AgentMsg;
use crate::store::Store;
use hetsched_common::backoff::Backoff;
use hetsched_common::leader::{LeaderClient, LeaderError, LeaderOptions};
use hetsched_common::protocol::{
    ErrorKind, Message, ProbeSample, SlaveRequest, SlaveResponse, TaskReport, MAX_HEARTBEAT_MS,
};
use hetsched_common::wire::CallError;
use hetsched_common::{Attempt, NodeId, NodeResources, TaskId};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Timing of the link.
#[derive(Clone, Copy, Debug)]
pub struct LinkTiming {
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// Deadline of one request (connect included).
    pub call_timeout: Duration,
    /// First retry delay after a failed round.
    pub backoff_min: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
}

/// What the slave tells the masters about itself.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Registration key.
    pub key: u64,
    /// Human name.
    pub name: String,
    /// Address masters dispatch to.
    pub addr: String,
    /// Capacity.
    pub capacity: NodeResources,
    /// Partitions served (empty: `default`).
    pub partitions: Vec<String>,
    /// Labels the slave sets itself (e.g. [`hetsched_common::protocol::CGROUP_LABEL`]).
    pub labels: BTreeMap<String, String>,
}

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No master could be reached.
    #[error("transport: {0}")]
    Transport(#[from] CallError),
    /// The master does not know this node: register again.
    #[error("unknown node")]
    UnknownNode,
    /// Try again later (no leader known, leader busy, outcome unknown).
    #[error("retry later: {0}")]
    Retry(String),
    /// The master refused the request.
    #[error("refused: {kind:?}: {message}")]
    Refused {
        /// Kind.
        kind: ErrorKind,
        /// Text.
        message: String,
    },
    /// The agent is gone (the slave is shutting down).
    #[error("agent stopped")]
    AgentGone,
}

/// The link's state.
pub struct Link {
    /// Follows the leader; its target is the address requests go to now.
    client: LeaderClient,
    node: Option<NodeId>,
    registered: bool,
    me: Identity,
    timing: LinkTiming,
    store: Store,
    agent: mpsc::UnboundedSender<AgentMsg>,
    pending: VecDeque<TaskReport>,
    /// Probe samples from the sampler, sent with the next heartbeat.
    samples: Option<mpsc::UnboundedReceiver<ProbeSample>>,
    /// The engines whose load heartbeats carry (S0.6 forwarding queries use it).
    engines: Option<std::sync::Arc<crate::engine::EngineSet>>,
    links: Option<crate::forward::Links>,
    /// The connection (by [`LeaderClient::connections_opened`]) the leader was last told
    /// takes its commands (`SlaveRequest::Attach`); `None`: not on this connection yet.
    attached: Option<u64>,
    /// Whether the link offers to take commands (off once a master said it cannot).
    attach: bool,
    /// The slave's containers, whose images heartbeats carry (issue 52).
    containers: Option<std::sync::Arc<crate::container::Containers>>,
    /// Issue 54: the heartbeat period the leader last asked for (zero: the slave's own).
    asked_period: Duration,
}

/// Most reports in one [`SlaveRequest::TaskReports`] (keeps one log entry well under the
/// frame and entry size caps).
const MAX_REPORTS_PER_BATCH: usize = 2048;

/// How long start reports alone may wait before they are sent. A start report is best
/// effort (the finish report and heartbeats supersede it) and frees nothing on the
/// leader, so it waits for the next report that must go soon — a finish, an ask — and
/// rides in its batch: a short task's start and finish then cost the masters one log
/// entry instead of two (each entry is a leader and two follower fsyncs and a plan).
/// Nothing waits on it: the task has started already.
pub const START_REPORT_HOLD: Duration = Duration::from_millis(50);

/// How long a finish (or any other report) waits for more before its batch goes, unless
/// [`FULL_BATCH`] reports wait already. Batches otherwise hold what arrived during the
/// previous call, about one finish at a few hundred tasks/s: one log entry, one plan and
/// one dispatch per task. A few milliseconds more from a task's end to its report gather
/// several ends into one entry, one plan and one flush of the slave's store (the agent
/// writes a result without flushing; `deliver` flushes before the batch leaves, so
/// "acknowledged ⇒ durable" holds); nothing waits on a finish but its report.
pub const REPORT_LINGER: Duration = Duration::from_millis(5);

/// Puts an unsent batch back at the front of the pending reports, in order.
fn put_back(pending: &mut VecDeque<TaskReport>, batch: Vec<TaskReport>) {
    for r in batch.into_iter().rev() {
        pending.push_front(r);
    }
}

/// Reports that make a batch worth sending without waiting further.
pub const FULL_BATCH: usize = 32;

impl Link {
    /// A link that starts at the remembered leader (if any) or the first master.
    pub fn new(
        masters: Vec<String>,
        me: Identity,
        timing: LinkTiming,
        store: Store,
        agent: mpsc::UnboundedSender<AgentMsg>,
    ) -> Self {
        let hint = store.leader_hint().ok().flatten();
        let node = store.node().ok().flatten();
        let client = LeaderClient::new(masters)
            .with_options(LeaderOptions {
                connect_timeout: timing.call_timeout,
                call_timeout: timing.call_timeout,
                ..LeaderOptions::default()
            })
            .with_leader_hint(hint);
        Self {
            client,
            node,
            registered: false,
            me,
            timing,
            store,
            agent,
            pending: VecDeque::new(),
            samples: None,
            engines: None,
            links: None,
            attached: None,
            attach: false,
            containers: None,
            asked_period: Duration::ZERO,
        }
    }

    /// The period heartbeats go at: the slave's own, or longer where the leader asks
    /// (issue 54: a large cluster keeps its leader's heartbeat load bounded).
    pub fn heartbeat_period(&self) -> Duration {
        self.timing.heartbeat.max(self.asked_period)
    }

    /// The leader's commands that come over the link are answered by `handler` (as on the
    /// slave's port), and the link offers them to each leader it talks to: the leader then
    /// needs no connection of its own to this slave.
    pub fn with_commands(mut self, handler: hetsched_common::wire::Handler) -> Self {
        self.client = self.client.with_commands(handler);
        self.attach = true;
        self
    }

    /// Sends the probe samples arriving on `rx` with the heartbeats.
    pub fn with_samples(mut self, rx: mpsc::UnboundedReceiver<ProbeSample>) -> Self {
        self.samples = Some(rx);
        self
    }

    /// The samples waiting for a heartbeat, oldest first (the newest
    /// [`MAX_PENDING_SAMPLES`](crate::probe::MAX_PENDING_SAMPLES) at most).
    fn take_samples(&mut self) -> Vec<ProbeSample> {
        let mut out = Vec::new();
        if let Some(rx) = &mut self.samples {
            while let Ok(s) = rx.try_recv() {
                out.push(s);
            }
        }
        let max = crate::probe::MAX_PENDING_SAMPLES;
        if out.len() > max {
            out.drain(..out.len() - max);
        }
        out
    }

    /// Heartbeats carry these engines' load.
    pub fn with_engines(mut self, engines: std::sync::Arc<crate::engine::EngineSet>) -> Self {
        self.engines = Some(engines);
        self
    }

    /// Heartbeats carry the images of this store (issue 52).
    pub fn with_containers(
        mut self,
        containers: Option<std::sync::Arc<crate::container::Containers>>,
    ) -> Self {
        self.containers = containers;
        self
    }

    /// Heartbeats carry these measured links (S0.6).
    pub fn with_links(mut self, links: Option<crate::forward::Links>) -> Self {
        self.links = links;
        self
    }

    /// Runs until the agent is gone.
    pub async fn run(mut self, mut reports: mpsc::UnboundedReceiver<TaskReport>) {
        let mut backoff = Backoff::new(self.timing.backoff_min, self.timing.backoff_max);
        let mut period = self.heartbeat_period();
        let mut heartbeat = tokio::time::interval(period);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Since when the pending reports have waited (START_REPORT_HOLD, REPORT_LINGER).
        let mut held_since: Option<tokio::time::Instant> = None;
        let mut hold_until: Option<tokio::time::Instant> = None;
        loop {
            let mut beat = false;
            tokio::select! {
                _ = heartbeat.tick() => beat = true,
                r = reports.recv() => match r {
                    Some(r) => self.pending.push_back(r),
                    None => return,
                },
                _ = tokio::time::sleep_until(hold_until.unwrap_or_else(tokio::time::Instant::now)),
                    if hold_until.is_some() => {}
            }
            while let Ok(r) = reports.try_recv() {
                self.pending.push_back(r);
            }
            if let Some(hold) = self.hold(beat) {
                let until = *held_since.get_or_insert_with(tokio::time::Instant::now) + hold;
                if tokio::time::Instant::now() < until {
                    hold_until = Some(until);
                    continue;
                }
            }
            held_since = None;
            hold_until = None;
            let round = self.round(beat).await;
            if round.is_err() {
                // The asked period was this leader's: the next one (another master, maybe
                // set otherwise) may expect the slave's own, and says so in its first ack.
                self.asked_period = Duration::ZERO;
            }
            if self.heartbeat_period() != period {
                period = self.heartbeat_period();
                tracing::info!(?period, "heartbeat period as the leader asks");
                heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
            match round {
                Ok(()) => backoff.reset(),
                Err(LinkError::AgentGone) => return,
                Err(e) => {
                    // The client's target has already moved on to the master tried next.
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, next = %self.client.target(), retry_in = ?wait, "masters not reachable; retrying");
                    tokio::time::sleep(wait).await;
                    // Beat first when the masters answer again: a slave whose connection
                    // broke shows it lives at once, not a period later (issue 54: past the
                    // heartbeat limit a closed link without a heartbeat soon is a dead slave).
                    heartbeat.reset_immediately();
                }
            }
        }
    }

    /// How long the pending reports may wait for more before this round delivers them
    /// (`None`: deliver now).
    fn hold(&self, beat: bool) -> Option<Duration> {
        if beat || !self.registered || self.pending.is_empty() || self.pending.len() >= FULL_BATCH {
            return None;
        }
        if self
            .pending
            .iter()
            .all(|r| matches!(r, TaskReport::Started { .. }))
        {
            Some(START_REPORT_HOLD)
        } else {
            Some(REPORT_LINGER)
        }
    }

    /// One round: register if needed, heartbeat when due, deliver pending reports. The
    /// heartbeat goes first so that reports the leader cannot take yet never delay liveness.
    async fn round(&mut self, beat: bool) -> Result<(), LinkError> {
        if !self.registered {
            self.register().await?;
        }
        if beat {
            let r = self.heartbeat().await;
            if let Err(LinkError::UnknownNode) = r {
                tracing::warn!("leader does not know this node; registering again");
                self.registered = false;
            }
            r?;
            self.offer_commands().await?;
            self.ask_to_steal().await?;
            self.ask_to_start().await?;
        }
        let r = self.deliver().await;
        if let Err(LinkError::UnknownNode) = r {
            tracing::warn!("leader does not know this node; registering again");
            self.registered = false;
        }
        r
    }

    async fn held(&self) -> Result<Vec<hetsched_common::protocol::HeldTask>, LinkError> {
        let (tx, rx) = oneshot::channel();
        self.agent
            .send(AgentMsg::Held { reply: tx })
            .map_err(|_| LinkError::AgentGone)?;
        rx.await.map_err(|_| LinkError::AgentGone)
    }

    async fn register(&mut self) -> Result<(), LinkError> {
        let req = SlaveRequest::Register {
            key: self.me.key,
            node: self.node,
            name: self.me.name.clone(),
            addr: self.me.addr.clone(),
            capacity: self.me.capacity.clone(),
            labels: self.me.labels.clone(),
            held: self.held().await?,
            partitions: self.me.partitions.clone(),
        };
        match self.call(req).await? {
            SlaveResponse::Registered { node } => {
                if self.node != Some(node) {
                    if let Some(old) = self.node {
                        tracing::warn!(old = %old, new = %node, "cluster gave this slave a new node id");
                    }
                    if let Err(e) = self.store.set_node(node).await {
                        tracing::error!(error = %e, "cannot persist node id");
                    }
                    self.node = Some(node);
                }
                self.registered = true;
                tracing::info!(node = %node, master = %self.client.target(), "registered");
                Ok(())
            }
            other => Err(LinkError::Retry(format!(
                "unexpected answer to Register: {other:?}"
            ))),
        }
    }

    /// Tells the leader this link takes its commands, once per connection (after a
    /// heartbeat, so the connection is the leader's). A master that does not know
    /// `Attach` keeps dialling the slave's port: the link stops offering.
    async fn offer_commands(&mut self) -> Result<(), LinkError> {
        let Some(node) = self.node else {
            return Ok(());
        };
        if !self.attach || self.attached == Some(self.client.connections_opened()) {
            return Ok(());
        }
        match self.call(SlaveRequest::Attach { node }).await {
            Ok(_) => {
                self.attached = Some(self.client.connections_opened());
                tracing::debug!(master = %self.client.target(), "link takes the leader's commands");
                Ok(())
            }
            Err(LinkError::Refused {
                kind: ErrorKind::Malformed | ErrorKind::Unsupported,
                message,
            }) => {
                tracing::info!(master = %self.client.target(), %message, "master cannot send commands over the link; it dials this slave's port");
                self.attach = false;
                Ok(())
            }
            Err(LinkError::UnknownNode) => {
                self.registered = false;
                Ok(())
            }
            Err(e) => {
                // Offered again after the next heartbeat; commands meanwhile go to the port.
                tracing::debug!(error = %e, "link not attached yet");
                Ok(())
            }
        }
    }

    /// S0.4: with an empty queue and free cores, ask the leader for queued work of other
    /// slaves (at most once per heartbeat). A refusal (an older master, a leader catching
    /// up) only means no steal this time.
    async fn ask_to_steal(&mut self) -> Result<(), LinkError> {
        let Some(node) = self.node else {
            return Ok(());
        };
        let (tx, rx) = oneshot::channel();
        self.agent
            .send(AgentMsg::WantsWork { reply: tx })
            .map_err(|_| LinkError::AgentGone)?;
        if !rx.await.map_err(|_| LinkError::AgentGone)? {
            return Ok(());
        }
        if let Err(e) = self.call(SlaveRequest::StealRequest { node }).await {
            tracing::debug!(error = %e, "steal request not taken");
        }
        Ok(())
    }

    /// S0.3: the queued attempts the agent would start if the leader promoted them.
    async fn asks(&self) -> Result<Vec<(TaskId, Attempt)>, LinkError> {
        let (tx, rx) = oneshot::channel();
        self.agent
            .send(AgentMsg::Asks { reply: tx })
            .map_err(|_| LinkError::AgentGone)?;
        rx.await.map_err(|_| LinkError::AgentGone)
    }

    /// S0.3: queues an ask for every queued attempt the agent has room for and that no
    /// pending report asks for already (asked again each heartbeat while refused; the
    /// leader adds nothing to its log for an ask it cannot grant).
    async fn ask_to_start(&mut self) -> Result<(), LinkError> {
        for (task, attempt) in self.asks().await? {
            let ask = TaskReport::WantsStart { task, attempt };
            if !self.pending.contains(&ask) {
                self.pending.push_back(ask);
            }
        }
        Ok(())
    }

    async fn heartbeat(&mut self) -> Result<(), LinkError> {
        let Some(node) = self.node else {
            return Err(LinkError::UnknownNode);
        };
        let held = self.held().await?;
        // Samples are measurements, not results: lost with a failed heartbeat, they are
        // replaced by the next second's.
        let samples = self.take_samples();
        let engine_load = self.engines.as_ref().map(|e| e.loads()).unwrap_or_default();
        let links = self
            .links
            .as_ref()
            .map(|l| match l.lock() {
                Ok(g) => g.values().copied().collect(),
                Err(p) => p.into_inner().values().copied().collect(),
            })
            .unwrap_or_default();
        let images = self
            .containers
            .as_ref()
            .map(|c| c.store.images())
            .unwrap_or_default();
        let beat = SlaveRequest::Heartbeat {
            node,
            held,
            samples,
            engine_load,
            links,
            images,
        };
        match self.call(beat).await? {
            SlaveResponse::HeartbeatAck { heartbeat_ms, .. } => {
                // Bounded: a leader cannot silence a slave for longer than a minute.
                self.asked_period = Duration::from_millis(heartbeat_ms.min(MAX_HEARTBEAT_MS));
                Ok(())
            }
            SlaveResponse::Ack => Ok(()),
            other => Err(LinkError::Retry(format!(
                "unexpected answer to Heartbeat: {other:?}"
            ))),
        }
    }

    /// Sends pending reports in order, many per `TaskReports` message (one log entry each).
    /// A refused batch is sent again report by report, so one bad report cannot block the
    /// others; "retry later" stops this round's delivery until the next tick; a transport
    /// failure ends the round with an error (the caller backs off).
    async fn deliver(&mut self) -> Result<(), LinkError> {
        let Some(node) = self.node else {
            return Err(LinkError::UnknownNode);
        };
        if self
            .pending
            .iter()
            .any(|r| matches!(r, TaskReport::Finished { .. }))
        {
            self.make_results_durable().await;
        }
        while !self.pending.is_empty() {
            let n = self.pending.len().min(MAX_REPORTS_PER_BATCH);
            let mut batch: Vec<TaskReport> = self.pending.drain(..n).collect();
            if let Err(e) = self.add_asks(&mut batch).await {
                put_back(&mut self.pending, batch);
                return Err(e);
            }
            match self.send_reports(node, &batch).await {
                Ok(()) => {}
                Err(LinkError::Refused { kind, message }) => {
                    tracing::info!(?kind, %message, "a batch of reports was refused; sending them one by one");
                    put_back(&mut self.pending, batch);
                    return self.deliver_one_by_one(node).await;
                }
                Err(LinkError::Retry(why)) => {
                    tracing::debug!(%why, "reports deferred");
                    put_back(&mut self.pending, batch);
                    return Ok(());
                }
                Err(e) => {
                    put_back(&mut self.pending, batch);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// S0.3: the cores the ends in `batch` free go to queued tasks in the same entry: the
    /// agent answers once it has handled the ends (its mailbox is in order).
    async fn add_asks(&mut self, batch: &mut Vec<TaskReport>) -> Result<(), LinkError> {
        if !batch
            .iter()
            .any(|r| matches!(r, TaskReport::Finished { .. }))
        {
            return Ok(());
        }
        for (task, attempt) in self.asks().await? {
            let ask = TaskReport::WantsStart { task, attempt };
            if !batch.contains(&ask) {
                batch.push(ask);
            }
        }
        Ok(())
    }

    /// Sends `batch` as one `TaskReports` message. Once it is taken the agent hears which
    /// results the master acknowledged and which queued attempts it promoted; an answer of
    /// another kind counts as a refusal.
    async fn send_reports(&mut self, node: NodeId, batch: &[TaskReport]) -> Result<(), LinkError> {
        let req = SlaveRequest::TaskReports {
            node,
            reports: batch.to_vec(),
        };
        let promoted = match self.call(req).await? {
            SlaveResponse::Ack => Vec::new(),
            SlaveResponse::Promoted { tasks } => tasks,
            other => {
                return Err(LinkError::Refused {
                    kind: ErrorKind::Unsupported,
                    message: format!("unexpected answer to TaskReports: {other:?}"),
                })
            }
        };
        for r in batch {
            if let TaskReport::Finished { task, attempt, .. } = r {
                let (task, attempt) = (*task, *attempt);
                tracing::debug!(task = %task, attempt, "finish report acknowledged");
                self.agent
                    .send(AgentMsg::Acked { task, attempt })
                    .map_err(|_| LinkError::AgentGone)?;
            }
        }
        if !promoted.is_empty() {
            self.agent
                .send(AgentMsg::Promoted { tasks: promoted })
                .map_err(|_| LinkError::AgentGone)?;
        }
        Ok(())
    }

    /// After a refused batch: each pending report in a batch of its own. A refused start
    /// report, ask or compression is dropped (a start only informs — the finish report and
    /// heartbeats carry the same facts —, asks are made again with the next end, and a
    /// compressed task keeps running at its halved size); a refused result is kept for the
    /// next round, never dropped.
    async fn deliver_one_by_one(&mut self, node: NodeId) -> Result<(), LinkError> {
        for _ in 0..self.pending.len() {
            let Some(report) = self.pending.pop_front() else {
                break;
            };
            match self.send_reports(node, std::slice::from_ref(&report)).await {
                Ok(()) => {}
                Err(LinkError::Refused { kind, message }) => {
                    tracing::warn!(?report, ?kind, %message, "master refused a report");
                    if matches!(report, TaskReport::Finished { .. }) {
                        self.pending.push_back(report);
                    }
                }
                Err(LinkError::Retry(why)) => {
                    // The leader is there but cannot take it now (no quorum, leadership
                    // changing): try again at the next tick, without backing off the link.
                    tracing::debug!(?report, %why, "report deferred");
                    self.pending.push_front(report);
                    return Ok(());
                }
                Err(e) => {
                    self.pending.push_front(report);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A finish report leaves only once its result is durable: the agent writes the record
    /// without flushing and hands the report over at once, so the ends gathered for one
    /// batch share this one flush (`agent/commit.rs`). A failed flush is logged and the
    /// reports go anyway, as the agent did when it flushed: the master learning a result
    /// beats holding it back, and the supervisor's status file still holds it for a restart.
    async fn make_results_durable(&self) {
        metrics::counter!("hetsched_slave_flushes_total").increment(1);
        if let Err(e) = self.store.flush().await {
            tracing::error!(error = %e, "cannot flush the store before reporting results");
        }
    }

    /// One request to the leader (see the module documentation).
    async fn call(&mut self, req: SlaveRequest) -> Result<SlaveResponse, LinkError> {
        match self.client.attempt(Message::Slave(req)).await {
            Ok(Message::SlaveReply(r)) => {
                self.remember_leader();
                Ok(r)
            }
            Ok(other) => Err(LinkError::Refused {
                kind: ErrorKind::Unsupported,
                message: format!("unexpected answer {other:?}"),
            }),
            Err(LeaderError::Unreachable { source, .. }) => Err(LinkError::Transport(source)),
            Err(LeaderError::NoLeader { message, .. }) => {
                Err(LinkError::Retry(format!("no leader known: {message}")))
            }
            Err(LeaderError::Unavailable { message, .. }) => Err(LinkError::Retry(message)),
            Err(LeaderError::Refused {
                kind: ErrorKind::UnknownNode,
                ..
            }) => Err(LinkError::UnknownNode),
            Err(LeaderError::Refused { kind, message, .. }) => {
                Err(LinkError::Refused { kind, message })
            }
            Err(e) => Err(LinkError::Retry(e.to_string())),
        }
    }

    fn remember_leader(&mut self) {
        let target = self.client.target();
        if self.store.leader_hint().ok().flatten().as_deref() != Some(target) {
            if let Err(e) = self.store.set_leader_hint(target) {
                tracing::debug!(error = %e, "cannot remember the leader");
            }
        }
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
