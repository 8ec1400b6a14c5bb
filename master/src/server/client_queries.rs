//! The client API's reads: the cluster status (with the state hash, cached per applied
//! index), jobs, tasks, nodes, the priority configuration, API-program profiles and call
//! records, and dry runs of a submission. Each is linearizable (a Raft read barrier first)
//! unless the client accepts a stale answer.

use super::reply::{list_error, unexpected};
use super::{now_ms, programs, Master};
use hetsched_common::protocol::{
    is_wait_reason, ClientResponse, DryRunTask, ErrorKind, ErrorReply, ListFilter, RaftCounters,
    StatusInfo, WAIT_REASONS,
};
use hetsched_common::{JobId, JobSpec, MasterId, TaskId};
use hetsched_consensus::Role;
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::{Command, CommandEnvelope, Outcome, Replica};

/// The state hash and serialised size at one applied index.
#[derive(Clone, Copy, Debug)]
pub(super) struct StateDigest {
    index: u64,
    hash: u64,
    bytes: u64,
}

impl StateDigest {
    fn of(s: &Replica) -> Self {
        let bytes = s.to_bytes();
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

impl Master {
    /// The cluster status.
    pub(super) async fn status(&self, stale: bool) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        Ok(ClientResponse::Status(self.status_info(stale)))
    }

    /// Jobs matching `filter`.
    pub(super) async fn jobs(
        &self,
        stale: bool,
        filter: ListFilter,
    ) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        let s = self.shared.read_state();
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
        let r = self.reasons_in(&s);
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

    /// Tasks matching `filter` (of `job` when the filter names none).
    pub(super) async fn tasks(
        &self,
        stale: bool,
        job: Option<JobId>,
        mut filter: ListFilter,
    ) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        filter.job = filter.job.or(job);
        if let Some(r) = &filter.reason {
            check_reason(r)?;
        }
        let s = self.shared.read_state();
        let listed = ListFilter {
            limit: filter.limit.filter(|_| filter.reason.is_none()),
            ..filter.clone()
        };
        let tasks = s.list_tasks(&listed).map_err(list_error)?;
        Ok(ClientResponse::Tasks(self.with_reasons(&s, tasks, &filter)))
    }

    /// Why a task waits, node by node.
    pub(super) async fn explain(&self, task: TaskId) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(false).await?;
        let s = self.shared.read_state();
        let board = self.reasons.board();
        let mut info = hetsched_master_core::sched::explain::explain(
            &s,
            task,
            Some(&board),
            now_ms(),
            &self.preemption,
        )
        .ok_or_else(|| ErrorReply::new(ErrorKind::NotFound, format!("no such task: {task}")))?;
        info.waiting = self.reasons_in(&s).waiting(task);
        Ok(ClientResponse::Explain(info))
    }

    /// Every registered node.
    pub(super) async fn nodes(&self, stale: bool) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        let s = self.shared.read_state();
        Ok(ClientResponse::Nodes(
            s.nodes()
                .values()
                .map(|n| {
                    let mut info = s.node_info(n);
                    info.links = self.engine_loads.links_of(n.id);
                    info
                })
                .collect(),
        ))
    }

    /// The priority configuration in force.
    pub(super) async fn priority_config(&self, stale: bool) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        Ok(ClientResponse::PriorityConfig(
            self.shared.read_state().priority().clone(),
        ))
    }

    /// The API programs' selection tables and task–engine relation (S0).
    pub(super) async fn profiles(&self, stale: bool) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        Ok(ClientResponse::Profiles(programs::profiles_info(
            &self.shared.read_state(),
        )))
    }

    /// A task's call records (S0), fetched from the slave that ran it.
    pub(super) async fn calls(&self, task: TaskId) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(false).await?;
        let (node, addr, attempt) = programs::locate(&self.shared.read_state(), task)?;
        programs::fetch_calls(task, node, &addr, attempt).await
    }

    /// What a submission would get, without proposing it.
    pub(super) async fn dry_run_request(
        &self,
        spec: JobSpec,
    ) -> Result<ClientResponse, ErrorReply> {
        spec.validate()
            .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
        self.read_barrier(false).await?;
        Ok(ClientResponse::DryRun(self.dry_run(spec)?))
    }

    /// Applies the submission to a copy of the state and runs one scheduling round on it:
    /// the priorities admission would give, where the round would place each task and what
    /// it would preempt. Nothing is proposed.
    fn dry_run(&self, spec: JobSpec) -> Result<Vec<DryRunTask>, ErrorReply> {
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
            .map(|t| DryRunTask {
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
    fn digest(&self, s: &Replica) -> StateDigest {
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

    /// The status this master reports: its role, the state's counts and hash, Raft counters.
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
            insecure: hetsched_common::wire::tls::current().is_none(),
            nodes: s.node_counts(),
            jobs: s.jobs().len() as u64,
            tasks: s.task_counts(),
            queues: s.queue_counts(),
            waiting: self.waiting_counts(&s),
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
}
