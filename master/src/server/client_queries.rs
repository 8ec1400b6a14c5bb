//! The client API's reads: the cluster status (with the state hash, cached per applied
//! index), jobs, tasks, nodes, why a task waits, the priority configuration, API-program
//! profiles, batches, users' standing, and dry runs of a submission. [`ClientQueries`]
//! answers each from the applied state and what the leader keeps in memory; `client_api`
//! puts a Raft read barrier first (each read is linearizable unless the client accepts a
//! stale answer).

use super::forward_query::EngineLoads;
use super::reply::{list_error, not_found, unexpected};
use super::waiting::WaitReasons;
use super::{programs, usage};
use hetsched_common::protocol::{
    is_wait_reason, ClientResponse, DryRunTask, ErrorKind, ErrorReply, ListFilter, RaftCounters,
    StatusInfo, UsageInfo, WAIT_REASONS,
};
use hetsched_common::{JobId, JobSpec, MasterId, TaskId};
use hetsched_consensus::{ConsensusStats, RaftStatus, Role};
use hetsched_master_core::sched::engine_choice::EngineChoiceConfig;
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::multiqueue::QueueingConfig;
use hetsched_master_core::sched::preemption::PreemptionConfig;
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::{Command, CommandEnvelope, Outcome, Replica};
use std::sync::Mutex;

/// The state hash and serialised size at one applied index.
#[derive(Clone, Copy, Debug)]
pub(super) struct StateDigest {
    index: u64,
    hash: u64,
    bytes: u64,
}

impl StateDigest {
    /// The digest of `s` at its applied index, from `cache` when it holds that index's
    /// (computed at most once per index).
    pub fn cached(cache: &Mutex<Option<StateDigest>>, s: &Replica) -> Self {
        let mut cache = match cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match *cache {
            Some(d) if d.index == s.last_index() => d,
            _ => {
                let d = Self::of(s);
                *cache = Some(d);
                d
            }
        }
    }

    fn of(s: &Replica) -> Self {
        // Issue 53: the accounting records are the snapshot's, not the state's.
        let bytes = s.state_document();
        Self {
            index: s.last_index(),
            hash: hetsched_master_core::state::fnv1a64(&bytes),
            bytes: bytes.len() as u64,
        }
    }
}

/// A `--reason` filter must name a waiting reason.
fn check_reason(reason: &str) -> Result<(), ErrorReply> {
    if is_wait_reason(reason) {
        Ok(())
    } else {
        Err(ErrorReply::new(
            ErrorKind::Invalid,
            format!(
                "unknown reason {reason:?} (one of: {})",
                WAIT_REASONS.join(", ")
            ),
        ))
    }
}

/// How the master's scheduler is configured (`master` flags): the duties plan with it, and a
/// dry run plans with the same.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SchedulerSettings {
    /// Node selection for tasks that ask for GPUs.
    pub policy: PolicyKind,
    /// Node selection for tasks that ask none.
    pub cpu_policy: PolicyKind,
    /// S1 preemption limits.
    pub preemption: PreemptionConfig,
    /// S3 queue order and reserved pools.
    pub queueing: QueueingConfig,
    /// S0.1–2 engine choice bounds.
    pub engine_choice: EngineChoiceConfig,
    /// S0.3 slave queue depth.
    pub queue_depth: u32,
    /// S4.7 parallel selection: groups and threads.
    pub parallel: hetsched_master_core::sched::ParallelConfig,
}

impl SchedulerSettings {
    /// The scheduler of master `id`.
    pub fn scheduler(&self, id: u64) -> IndexedScheduler {
        IndexedScheduler::new(self.policy, id)
            .with_cpu_policy(self.cpu_policy, id)
            .with_preemption(self.preemption)
            .with_queueing(self.queueing)
            .with_engine_choice(self.engine_choice)
            .with_queue_depth(self.queue_depth)
            .with_parallel(self.parallel)
    }
}

/// What `status` reports besides the applied state: consensus as this master sees it.
#[derive(Clone, Debug)]
pub(super) struct RaftFacts {
    /// This master.
    pub master: MasterId,
    /// Its Raft status.
    pub status: RaftStatus,
    /// Its log counters.
    pub stats: ConsensusStats,
    /// The leader's cluster address, when known.
    pub leader_addr: Option<String>,
    /// Size of its snapshot file.
    pub snapshot_bytes: u64,
    /// Whether it runs without TLS.
    pub insecure: bool,
    /// Its open-file limits and descriptors in use.
    pub open_files: Option<hetsched_common::protocol::OpenFiles>,
    /// The heartbeat period slaves are asked for (0: their own).
    pub heartbeat_ms: u64,
}

/// The answers to client reads, over the applied state, the leader's waiting reasons and
/// the time.
pub(super) struct ClientQueries<'a> {
    state: &'a Replica,
    reasons: &'a WaitReasons,
    now_ms: u64,
}

impl<'a> ClientQueries<'a> {
    /// Answers against `state`, with `reasons` read at `now_ms`.
    pub fn new(state: &'a Replica, reasons: &'a WaitReasons, now_ms: u64) -> Self {
        Self {
            state,
            reasons,
            now_ms,
        }
    }

    /// Jobs matching `filter` (with a reason: those with a task waiting for it).
    pub fn jobs(&self, filter: ListFilter) -> Result<ClientResponse, ErrorReply> {
        let s = self.state;
        let Some(reason) = filter.reason.clone() else {
            return s
                .list_jobs(&filter)
                .map(ClientResponse::Jobs)
                .map_err(list_error);
        };
        check_reason(&reason)?;
        let all = ListFilter {
            limit: None,
            ..filter.clone()
        };
        let mut jobs = s.list_jobs(&all).map_err(list_error)?;
        let r = self.reasons.read(s, self.now_ms);
        jobs.retain(|j| {
            s.jobs().get(&j.id).is_some_and(|job| {
                job.tasks
                    .iter()
                    .any(|t| r.name(*t).is_some_and(|n| n == reason))
            })
        });
        if let Some(l) = filter.limit {
            jobs.truncate(l as usize);
        }
        Ok(ClientResponse::Jobs(jobs))
    }

    /// Tasks matching `filter` (of `job` when the filter names none), with why each waits.
    pub fn tasks(
        &self,
        job: Option<JobId>,
        mut filter: ListFilter,
    ) -> Result<ClientResponse, ErrorReply> {
        filter.job = filter.job.or(job);
        if let Some(r) = &filter.reason {
            check_reason(r)?;
        }
        let listed = ListFilter {
            limit: filter.limit.filter(|_| filter.reason.is_none()),
            ..filter.clone()
        };
        let tasks = self.state.list_tasks(&listed).map_err(list_error)?;
        let mut r = self.reasons.read(self.state, self.now_ms);
        Ok(ClientResponse::Tasks(r.fill(tasks, &filter)))
    }

    /// Why a task waits, node by node.
    pub fn explain(
        &self,
        task: TaskId,
        preemption: &PreemptionConfig,
    ) -> Result<ClientResponse, ErrorReply> {
        let board = self.reasons.board();
        let mut info = hetsched_master_core::sched::explain::explain(
            self.state,
            task,
            Some(&board),
            self.now_ms,
            preemption,
        )
        .ok_or_else(|| not_found(format!("no such task: {task}")))?;
        info.waiting = self.reasons.read(self.state, self.now_ms).waiting(task);
        Ok(ClientResponse::Explain(info))
    }

    /// Every registered node, with the links and images its slave last reported.
    pub fn nodes(&self, loads: &EngineLoads) -> ClientResponse {
        let s = self.state;
        ClientResponse::Nodes(
            s.nodes()
                .values()
                .map(|n| {
                    let mut info = s.node_info(n);
                    info.links = loads.links_of(n.id);
                    info.containers.images = loads.images_of(n.id);
                    info
                })
                .collect(),
        )
    }

    /// The priority configuration in force.
    pub fn priority_config(&self) -> ClientResponse {
        ClientResponse::PriorityConfig(self.state.priority().clone())
    }

    /// The API programs' selection tables and task–engine relation (S0).
    pub fn profiles(&self) -> ClientResponse {
        ClientResponse::Profiles(programs::profiles_info(self.state))
    }

    /// One batch, planned against actual.
    pub fn batch(&self, id: u64) -> Result<ClientResponse, ErrorReply> {
        self.state
            .batch_info(id)
            .map(ClientResponse::Batch)
            .ok_or_else(|| not_found(format!("no such batch: batch-{id} (or it was collected)")))
    }

    /// Users against their quotas, and the leader's last hour.
    pub fn usage(&self) -> ClientResponse {
        ClientResponse::Usage(UsageInfo {
            users: usage::usage(self.state),
            history: self.reasons.history(),
        })
    }

    /// A dry run's submission is valid (checked before the read barrier).
    pub fn check_dry_run(spec: &JobSpec) -> Result<(), ErrorReply> {
        spec.validate()
            .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))
    }

    /// What a submission would get, without proposing it: the submission applied to a
    /// copy of the state and one scheduling round run on it with `sched` (of master `id`):
    /// the priorities admission would give, where the round would place each task and
    /// what it would preempt.
    pub fn dry_run(
        &self,
        spec: JobSpec,
        sched: &SchedulerSettings,
        id: u64,
    ) -> Result<ClientResponse, ErrorReply> {
        let mut copy = self.state.clone();
        let index = copy.last_index() + 1;
        let tasks = match copy.apply(
            index,
            CommandEnvelope {
                at_ms: self.now_ms,
                request: None,
                command: Command::SubmitJob { spec },
            },
        ) {
            Outcome::Submitted { tasks, .. } => tasks,
            o => return Err(unexpected(o)),
        };
        let mut sched = sched.scheduler(id);
        sched.max_per_plan = usize::MAX;
        sched.reset(&copy);
        let plan = sched.plan(&copy);
        let of = |t: TaskId| plan.assignments.iter().find(|a| a.task == t);
        Ok(ClientResponse::DryRun(
            tasks
                .iter()
                .filter_map(|t| copy.tasks().get(t))
                .map(|t| DryRunTask {
                    index: t.index,
                    priority: t.priority,
                    node: of(t.id).map(|a| a.node),
                    engine: of(t.id).and_then(|a| a.engine),
                    queued: plan.assignments.iter().any(|a| a.task == t.id && a.queued),
                    preempts: plan
                        .preempt
                        .iter()
                        .filter(|p| p.preemptor == t.id)
                        .flat_map(|p| p.victims.iter().map(|v| v.task))
                        .collect(),
                })
                .collect(),
        ))
    }

    /// The status this master reports: its role, the state's counts and hash (cached in
    /// `digests`), Raft counters; `stale` when the client did not ask for a linearizable
    /// read.
    pub fn status(
        &self,
        raft: RaftFacts,
        digests: &Mutex<Option<StateDigest>>,
        stale: bool,
    ) -> StatusInfo {
        let (st, s) = (raft.status, self.state);
        let digest = StateDigest::cached(digests, s);
        StatusInfo {
            master_id: raft.master,
            leader: st.leader.map(MasterId),
            leader_addr: raft.leader_addr,
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
            insecure: raft.insecure,
            open_files: raft.open_files,
            heartbeat_ms: raft.heartbeat_ms,
            nodes: s.node_counts(),
            jobs: s.jobs().len() as u64,
            tasks: s.task_counts(),
            queues: s.queue_counts(),
            waiting: self.reasons.read(s, self.now_ms).counts(),
            cpu_config: s
                .cpu_history()
                .iter()
                .map(|(class, milli)| (class.as_str().to_string(), *milli as f64 / 1000.0))
                .collect(),
            state_bytes: digest.bytes,
            snapshot_bytes: raft.snapshot_bytes,
            raft: RaftCounters {
                commit_index: st.commit_index,
                first_index: raft.stats.first_index,
                proposals: raft.stats.proposals,
                entries_persisted: raft.stats.entries_persisted,
                flushes: raft.stats.flushes,
                snapshots: raft.stats.snapshots,
            },
        }
    }
}

impl ClientQueries<'_> {
    /// Issue 53: ended attempts' usage records that `filter` selects (`history`).
    pub fn accounting_history(
        &self,
        filter: &hetsched_common::protocol::HistoryFilter,
    ) -> ClientResponse {
        ClientResponse::History(hetsched_common::protocol::HistoryInfo {
            records: self.state.accounting().history(filter),
            retention_ms: self.state.retention_ms(),
        })
    }

    /// Issue 53: usage totals since `since_ms` grouped `by`, with each user's fair-share
    /// standing (`usage`); only `user`'s when named.
    pub fn accounting_usage(
        &self,
        since_ms: u64,
        by: hetsched_common::protocol::UsageBy,
        user: Option<String>,
    ) -> ClientResponse {
        let s = self.state;
        let half_life_ms = s.half_life_ms();
        let fair_share = half_life_ms
            .map(|h| {
                s.accounting()
                    .fair_share(self.now_ms, h, &s.priority().shares)
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|f| user.as_ref().is_none_or(|u| *u == f.user))
            .collect();
        ClientResponse::AccountingUsage(hetsched_common::protocol::AccountingUsageInfo {
            fair_share,
            half_life_ms,
            since_ms,
            by,
            totals: s.accounting().usage(since_ms, by, user.as_deref()),
        })
    }
}

#[cfg(test)]
#[path = "client_queries_tests.rs"]
mod tests;
