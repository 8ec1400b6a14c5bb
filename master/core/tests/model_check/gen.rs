//! The model checker's command generator: from the state now, one random command of any
//! kind `ClusterState::apply` takes — plans of the real `IndexedScheduler` (fresh, and stale:
//! built now, applied later), bogus plans (random, stale and duplicate decisions, preemptions
//! of anything), slave reports delivered late, out of order, twice and for stale attempts,
//! steals, CPU changes, compressions, drains, GC, priority configurations, re-registrations,
//! S2 batches and their re-plans (`gen_batch.rs`), submissions with placements (planned on a
//! copy of the state as a leader does, or random), retried client requests — on a seeded `SplitMix64`, so a seed replays exactly.

use hetsched_common::priority::{Principal, PriorityConfig, PriorityEntry, Quota};
use hetsched_common::program::{CallSummary, EngineDecl};
use hetsched_common::protocol::{TaskReport, TokenRole, GPU_POOL_LABEL};
use hetsched_common::rng::SplitMix64;
use hetsched_common::{
    ClientRequestId, CpuSearchSpec, EngineKind, GpuDevice, GpuRequest, JobId, JobSpec, NodeId,
    NodeResources, ResourceRequest, TaskClass, TaskId, TaskReason,
};
use hetsched_master_core::sched::{steal, IndexedScheduler, Scheduler};
use hetsched_master_core::state::{
    Assign, ClusterState, Command, CommandEnvelope, NodeReports, Outcome, PlaceNew, Plan,
    Preemption, TaskRef, TokenRecord,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

#[path = "gen_batch.rs"]
mod gen_batch;

/// Most tasks not yet final before submissions pause (a job is cancelled instead), and most
/// tasks in all before GC is forced: small states keep the snapshot round trip cheap.
const MAX_OPEN: usize = 12;
const MAX_TASKS: usize = 24;

const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];
const MODELS: [&str; 2] = ["A10", "V100M16"];

/// The generator's own state: its random stream and clock, and what the simulated slaves
/// and clients have yet to say.
pub struct Generator {
    rng: SplitMix64,
    /// The leader's clock, ms.
    now: u64,
    /// Slave reports not yet delivered (delivered later, in any order).
    outbox: Vec<Command>,
    /// Recent reports, to deliver again.
    sent: VecDeque<Command>,
    /// Plans built earlier, applied later.
    stale: Vec<Plan>,
    /// Request ids used, to retry.
    requests: Vec<(ClientRequestId, Command)>,
    next_request: u64,
    /// Registration keys handed out.
    keys: u64,
    /// Commands generated.
    generated: u64,
    /// The last command generated is a fresh plan of the real scheduler.
    pub fresh: bool,
}

impl Generator {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            now: 1_000_000,
            outbox: Vec::new(),
            sent: VecDeque::new(),
            stale: Vec::new(),
            requests: Vec::new(),
            next_request: 0,
            keys: 0,
            generated: 0,
            fresh: false,
        }
    }

    /// The next command (with its client request id, if any) on state `s`, whose scheduler
    /// is `sched`; the clock moves on.
    pub fn next(
        &mut self,
        s: &ClusterState,
        sched: &mut IndexedScheduler,
    ) -> (Command, Option<ClientRequestId>) {
        self.now += self.rng.below(1500);
        self.fresh = false;
        self.generated += 1;
        self.generate(s, sched)
    }

    /// The leader time to stamp the command with: now, or now and then a deposed leader's
    /// slower clock (never for a fresh plan, which is checked to apply whole).
    pub fn at_ms(&mut self) -> u64 {
        if !self.fresh && self.rng.below(50) == 0 {
            self.now.saturating_sub(self.rng.below(5000))
        } else {
            self.now
        }
    }

    /// Learns what an outcome asks of the slaves: each accepted assignment is reported
    /// started some time later.
    pub fn observe(&mut self, outcome: &Outcome) {
        if let Outcome::PlanApplied { accepted, .. } | Outcome::SubmittedPlaced { accepted, .. } =
            outcome
        {
            for r in accepted {
                self.outbox.push(Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                });
            }
        }
    }

    /// Whether to swap the state for its restored snapshot now (as a follower installing
    /// one would), about once in 500 steps.
    pub fn restore_now(&mut self) -> bool {
        self.rng.below(500) == 0
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        Some(items[self.rng.below(items.len() as u64) as usize].clone())
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    fn node_ids(&self, s: &ClusterState) -> Vec<NodeId> {
        s.nodes().keys().copied().collect()
    }

    /// A node id: mostly a registered one, sometimes one that never was.
    fn any_node(&mut self, s: &ClusterState) -> NodeId {
        let ids = self.node_ids(s);
        match self.pick(&ids) {
            Some(n) if !self.chance(3) => n,
            _ => NodeId(90 + self.rng.below(3)),
        }
    }

    /// A task id: mostly one in the state, sometimes one collected or never made.
    fn any_task(&mut self, s: &ClusterState) -> TaskId {
        let n = s.tasks().len();
        if n > 0 && !self.chance(5) {
            let i = self.rng.below(n as u64) as usize;
            if let Some(id) = s.tasks().keys().nth(i) {
                return *id;
            }
        }
        TaskId(self.rng.below(self.generated + 5))
    }

    /// Attempts assigned or running now (`queued` ones included).
    fn live(&self, s: &ClusterState) -> Vec<TaskRef> {
        let mut out = Vec::new();
        for n in s.nodes().values() {
            for t in n.tasks.iter().chain(n.queued.iter()) {
                if let Some(task) = s.task(*t) {
                    out.push(TaskRef {
                        task: *t,
                        node: n.id,
                        attempt: task.status.attempt,
                    });
                }
            }
        }
        out
    }

    /// A past attempt of some task (stale now, or the current one by chance).
    fn old_attempt(&mut self, s: &ClusterState) -> Option<TaskRef> {
        let t = self.any_task(s);
        let task = s.task(t)?;
        let past: Vec<(u32, NodeId)> = task.attempt_nodes.iter().map(|(a, n)| (*a, *n)).collect();
        let (attempt, node) = self.pick(&past)?;
        Some(TaskRef {
            task: t,
            node,
            attempt,
        })
    }

    /// A live attempt mostly; sometimes a stale one or garbage.
    fn some_attempt(&mut self, s: &ClusterState) -> TaskRef {
        let live = self.live(s);
        match self.rng.below(10) {
            0..=6 => {
                if let Some(r) = self.pick(&live) {
                    return r;
                }
            }
            7 | 8 => {
                if let Some(r) = self.old_attempt(s) {
                    return r;
                }
            }
            _ => {}
        }
        TaskRef {
            task: self.any_task(s),
            node: self.any_node(s),
            attempt: self.rng.below(4) as u32,
        }
    }

    fn capacity(&mut self) -> NodeResources {
        let gpus = match self.rng.below(3) {
            0 => 0,
            _ => self.rng.range(1, 4),
        };
        let model = self.pick(&MODELS).unwrap_or("A10");
        let mut engines = BTreeMap::new();
        if self.chance(25) {
            engines.insert(EngineKind::Npu, self.rng.range(1, 2) as u32);
        }
        NodeResources {
            cpu_milli: self.rng.range(4, 16) * 1000,
            mem_mib: self.rng.range(4, 64) * 1024,
            gpus: (0..gpus)
                .map(|_| GpuDevice {
                    model: model.into(),
                    free_milli: 1000,
                    emulated: true,
                })
                .collect(),
            engines,
        }
    }

    fn register(&mut self, s: &ClusterState) -> Command {
        // At most five slaves: later registrations are re-registrations.
        let reuse = self.keys >= 5 || (self.keys > 0 && self.chance(40));
        let key = if reuse {
            self.rng.range(1, self.keys)
        } else {
            self.keys += 1;
            self.keys
        };
        let known = s.nodes().values().find(|n| n.key == key).map(|n| {
            (
                n.id,
                n.capacity.clone(),
                n.partitions.clone(),
                n.labels.clone(),
            )
        });
        let node = match (&known, self.rng.below(4)) {
            (Some((id, ..)), 0 | 1) => Some(*id),
            (_, 2) => Some(self.any_node(s)),
            _ => None,
        };
        let keep = known.is_some() && self.chance(60);
        let (capacity, partitions, labels) = match known {
            Some((_, c, p, l)) if keep => (c, p, l),
            _ => {
                let partitions = match self.rng.below(4) {
                    0 => vec!["default".to_string(), "p1".to_string()],
                    1 => vec!["p1".to_string()],
                    _ => Vec::new(),
                };
                let mut labels = BTreeMap::new();
                if self.chance(30) {
                    let pool = self.pick(&["single", "multi"]).unwrap_or("single");
                    labels.insert(GPU_POOL_LABEL.to_string(), pool.to_string());
                }
                (self.capacity(), partitions, labels)
            }
        };
        Command::RegisterNode {
            key,
            node,
            name: format!("n{key}"),
            addr: format!("127.0.0.1:{}", 7000 + key),
            capacity,
            labels,
            partitions,
        }
    }

    fn spec(&mut self, s: &ClusterState) -> JobSpec {
        let gpu = match self.rng.below(10) {
            0..=5 => GpuRequest::none(),
            6 | 7 => GpuRequest::whole(self.rng.range(1, 2) as u32),
            8 => GpuRequest::fraction(self.rng.range(1, 3) as u32 * 250),
            _ => GpuRequest {
                count: 1,
                milli: 1000,
                models: vec![self.pick(&MODELS).unwrap_or("A10").to_string()],
            },
        };
        let search = !gpu.is_none() && self.chance(40);
        let cpu_milli = if search {
            self.rng.range(1, 4) * 1000
        } else {
            self.rng.range(1, 16) * 500
        };
        let mut engines = BTreeMap::new();
        if self.chance(5) {
            engines.insert(EngineKind::Npu, 1);
        }
        let nodes = if self.chance(8) {
            let n = self.any_node(s);
            vec![format!("node-{}", n.0)]
        } else {
            Vec::new()
        };
        let mut spec = JobSpec {
            name: "job".into(),
            user: self.pick(&USERS).unwrap_or("u0").into(),
            partition: match self.rng.below(10) {
                0 => "p1".into(),
                1 if self.chance(30) => "p2".into(),
                _ => String::new(),
            },
            resources: ResourceRequest {
                cpu_milli,
                mem_mib: self.rng.range(1, 16) * 256,
                gpu,
                engines,
            },
            count: match self.rng.below(10) {
                0 => 6,
                _ => self.rng.range(1, 3) as u32,
            },
            command: vec!["true".into()],
            no_preempt: self.chance(5),
            nodes,
            retries: self.rng.below(3) as u32,
            backoff_ms: if self.chance(50) {
                0
            } else {
                self.rng.range(1, 20) * 100
            },
            timeout_ms: self.chance(20).then(|| self.rng.range(1, 30) * 1000),
            cpu_search: search.then(|| CpuSearchSpec {
                class: TaskClass::ALL[self.rng.below(4) as usize],
                pipelined: false,
                heavy_weights: false,
                cpu_heavy: false,
            }),
            ..Default::default()
        };
        match self.rng.below(40) {
            0 => spec.count = 0,
            1 => spec.resources.cpu_milli = 0,
            2 => spec.command.clear(),
            _ => {}
        }
        spec
    }

    fn priority_config(&mut self) -> PriorityConfig {
        let mut groups = BTreeMap::new();
        groups.insert("g".to_string(), vec!["u2".to_string(), "u3".to_string()]);
        let mut entries = Vec::new();
        for who in [
            Principal::User("u0".into()),
            Principal::User("u1".into()),
            Principal::Group("g".into()),
        ] {
            if self.chance(25) {
                continue;
            }
            let limit = |r: &mut Self, unit: u64| r.chance(60).then(|| r.rng.range(1, 12) * unit);
            let quota = Quota {
                cpu_milli: limit(self, 2000),
                mem_mib: limit(self, 1024),
                gpu_milli: limit(self, 500),
            };
            entries.push(PriorityEntry {
                who,
                partition: self
                    .pick(&["default", "default", "p1"])
                    .unwrap_or("default")
                    .into(),
                priority: self.rng.range(0, 10) as i64,
                quota,
            });
        }
        PriorityConfig {
            version: 0,
            base_priority: self.rng.below(2) as i64,
            protect_min_priority: self.chance(50).then(|| self.rng.range(1, 8) as i64),
            groups,
            entries,
            shares: Default::default(),
        }
    }

    /// A plan of random, stale or invalid decisions.
    /// A submission with the placements the real scheduler gives its tasks on a copy of
    /// the state with the job applied (as a leader plans an idle submit): fresh, so it
    /// must apply whole.
    fn placed_submit(
        &mut self,
        s: &ClusterState,
        spec: JobSpec,
        sched: &mut IndexedScheduler,
    ) -> Command {
        let mut copy = s.clone();
        let env = CommandEnvelope {
            at_ms: self.now,
            request: None,
            command: Command::SubmitJob { spec: spec.clone() },
        };
        let tasks = match copy.apply(copy.last_index() + 1, env) {
            Outcome::Submitted { tasks, .. } => tasks,
            _ => return Command::SubmitJob { spec },
        };
        let plan = sched.plan_at(&copy, self.now);
        let touched: Vec<NodeId> = plan.assignments.iter().map(|a| a.node).collect();
        // The tentative use is re-read whatever the entry does (the executor frees the
        // plan slot the same way).
        sched.nodes_changed(s, &touched);
        let place: Vec<PlaceNew> = plan
            .assignments
            .iter()
            .filter_map(|a| PlaceNew::of(a, &tasks))
            .collect();
        self.fresh = place.len() == plan.assignments.len();
        Command::SubmitPlaced {
            spec,
            place,
            queue_depth: plan.queue_depth,
        }
    }

    /// A submission with random placements: indices out of the job, repeated, on unknown,
    /// down or full nodes.
    fn bogus_placed_submit(&mut self, s: &ClusterState, spec: JobSpec) -> Command {
        let count = u64::from(spec.count);
        let place = (0..self.rng.range(0, 4))
            .map(|_| PlaceNew {
                index: self.rng.below(count + 2) as u32,
                node: self.any_node(s),
                queued: self.chance(30),
                engine: self.chance(20).then_some(EngineKind::Cpu),
                borrowed: self.chance(10),
            })
            .collect();
        Command::SubmitPlaced {
            spec,
            place,
            queue_depth: self.rng.below(4) as u32,
        }
    }

    fn bogus_plan(&mut self, s: &ClusterState) -> Plan {
        let mut plan = Plan {
            queue_depth: self.rng.below(4) as u32,
            ..Default::default()
        };
        let pending: Vec<TaskId> = s.pending().iter().copied().collect();
        for _ in 0..self.rng.range(0, 4) {
            let task = match self.pick(&pending) {
                Some(t) if self.chance(80) => t,
                _ => self.any_task(s),
            };
            plan.assignments.push(Assign {
                task,
                node: self.any_node(s),
                queued: self.chance(30),
                // S0.2: program tasks book an engine unit of the kind they are granted.
                engine: match self.rng.below(6) {
                    0 => Some(EngineKind::Cpu),
                    1 => Some(EngineKind::Gpu),
                    2 => Some(EngineKind::Npu),
                    _ => None,
                },
                borrowed: self.chance(10),
            });
        }
        for _ in 0..self.rng.below(3) {
            let node = self.any_node(s);
            let on: Vec<TaskRef> = self
                .live(s)
                .into_iter()
                .filter(|r| r.node == node || self.rng.below(10) == 0)
                .collect();
            let mut victims = Vec::new();
            for _ in 0..self.rng.range(1, 3) {
                if let Some(r) = self.pick(&on) {
                    victims.push(r);
                }
            }
            if self.chance(10) {
                if let Some(first) = victims.first().copied() {
                    victims.push(first); // the same victim twice
                }
            }
            let preemptor = match self.pick(&pending) {
                Some(t) if self.chance(85) => t,
                _ => self.any_task(s),
            };
            plan.preempt.push(Preemption {
                preemptor,
                node,
                victims,
                take_back: self.chance(30),
            });
        }
        plan
    }

    /// A report about `r` a slave could send.
    fn report(&mut self, r: TaskRef) -> Command {
        match self.rng.below(12) {
            0..=3 => Command::TaskStarted {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            },
            4..=8 => Command::TaskFinished {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
                exit_code: match self.rng.below(5) {
                    0 => 1,
                    1 => -9,
                    _ => 0,
                },
                reason: match self.rng.below(8) {
                    0 => Some(TaskReason::Oom),
                    1 => Some(TaskReason::CannotStart),
                    _ => None,
                },
            },
            9 => Command::TaskLost {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            },
            10 => Command::TaskReports {
                node: r.node,
                reports: vec![
                    TaskReport::Started {
                        task: r.task,
                        attempt: r.attempt,
                    },
                    TaskReport::Finished {
                        task: r.task,
                        attempt: r.attempt,
                        exit_code: 0,
                        reason: self.chance(30).then_some(TaskReason::Lost),
                        reason_detail: None,
                        usage: None,
                    },
                ],
            },
            _ => Command::RecordCalls {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
                summary: CallSummary::default(),
            },
        }
    }

    /// Issue 54's group commit: several nodes' batches (a node may come twice) in one entry.
    fn grouped(&mut self, s: &ClusterState) -> Command {
        let groups = (0..self.rng.range(1, 4))
            .filter_map(|_| match self.batch(s) {
                Command::TaskReports { node, reports } => Some(NodeReports { node, reports }),
                _ => None,
            })
            .collect();
        Command::GroupedTaskReports { groups }
    }

    /// A batch of reports from one node: its live attempts and stale ones, in any order.
    fn batch(&mut self, s: &ClusterState) -> Command {
        let node = self.any_node(s);
        let mut reports = Vec::new();
        for _ in 0..self.rng.range(1, 5) {
            let r = self.some_attempt(s);
            reports.push(match self.rng.below(6) {
                0 | 1 => TaskReport::Started {
                    task: r.task,
                    attempt: r.attempt,
                },
                5 => TaskReport::WantsStart {
                    task: r.task,
                    attempt: r.attempt,
                },
                2 | 3 => TaskReport::Finished {
                    task: r.task,
                    attempt: r.attempt,
                    exit_code: self.rng.below(2) as i32,
                    reason: self.chance(20).then_some(TaskReason::Lost),
                    reason_detail: None,
                    usage: None,
                },
                _ => TaskReport::Compressed {
                    task: r.task,
                    attempt: r.attempt,
                    cpu_milli: self.rng.range(1, 8) * 250,
                    gpu_task: self.any_task(s),
                },
            });
        }
        Command::TaskReports { node, reports }
    }

    /// A stopping (preempted) attempt's end, as its slave reports it.
    fn stopping_report(&mut self, s: &ClusterState) -> Option<Command> {
        let stopping: Vec<TaskRef> = s
            .nodes()
            .values()
            .flat_map(|n| {
                n.stopping.iter().map(|s| TaskRef {
                    task: s.task,
                    node: n.id,
                    attempt: s.attempt,
                })
            })
            .collect();
        let r = self.pick(&stopping)?;
        Some(if self.chance(80) {
            Command::TaskFinished {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
                exit_code: -15,
                reason: Some(TaskReason::Preempted),
            }
        } else {
            Command::TaskLost {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            }
        })
    }

    /// One random command (with its request id, if any), generated from the state now.
    fn generate(
        &mut self,
        s: &ClusterState,
        sched: &mut IndexedScheduler,
    ) -> (Command, Option<ClientRequestId>) {
        let nodes = s.nodes().len();
        if nodes < 2 || (nodes < 5 && self.chance(2)) {
            return (self.register(s), None);
        }
        // Small states keep every step's snapshot check cheap: collect what finished.
        if s.tasks().len() > MAX_TASKS && self.chance(20) {
            return (
                Command::GcJobs {
                    jobs_finished_before_ms: Some(self.now),
                    requests_before_ms: Some(self.now.saturating_sub(10_000)),
                    keyed_requests_before_ms: None,
                },
                None,
            );
        }
        let roll = self.rng.below(1000);
        let command = match roll {
            0..=19 => self.register(s),
            20..=44 => Command::NodeDown {
                node: self.any_node(s),
            },
            45..=74 => Command::NodeUp {
                node: self.any_node(s),
            },
            75..=169 => {
                let open = s.tasks().len() - self.model_finals(s);
                if open > MAX_OPEN {
                    // Keep the work moving: cancel one of the jobs still open.
                    let open_jobs: Vec<JobId> = s
                        .jobs()
                        .values()
                        .filter(|j| j.open > 0)
                        .map(|j| j.id)
                        .collect();
                    match self.pick(&open_jobs) {
                        Some(job) => Command::CancelJob { job },
                        None => Command::LeaderBarrier {
                            master: 3,
                            accounting: None,
                        },
                    }
                } else {
                    let spec = self.spec(s);
                    let c = match self.rng.below(10) {
                        0..=2 => self.placed_submit(s, spec, sched),
                        3 => self.bogus_placed_submit(s, spec),
                        _ => Command::SubmitJob { spec },
                    };
                    return self.with_request(c);
                }
            }
            170..=184 => {
                let job = JobId(self.rng.below(self.generated / 4 + 3));
                return self.with_request(Command::CancelJob { job });
            }
            185..=199 => Command::CancelTask {
                task: self.any_task(s),
            },
            200..=339 => {
                let plan = sched.plan_at(s, self.now);
                self.fresh = true;
                Command::ApplyPlan(plan)
            }
            340..=359 => {
                // Planned now, applied later (a leader that lost its term, a slow round).
                let plan = sched.plan_at(s, self.now);
                let touched: Vec<NodeId> = plan
                    .assignments
                    .iter()
                    .map(|a| a.node)
                    .chain(plan.preempt.iter().map(|p| p.node))
                    .collect();
                sched.nodes_changed(s, &touched);
                self.stale.push(plan);
                match self.stale.len() {
                    n if n > 3 => Command::ApplyPlan(self.stale.remove(0)),
                    _ => Command::LeaderBarrier {
                        master: 1,
                        accounting: None,
                    },
                }
            }
            360..=384 => Command::ApplyPlan(self.bogus_plan(s)),
            385..=399 => {
                let open = s.tasks().len() - self.model_finals(s);
                return self.batch_command(s, open);
            }
            400..=519 => {
                // Deliver a report from the outbox, in any order, maybe twice.
                if self.outbox.is_empty() {
                    let r = self.some_attempt(s);
                    self.report(r)
                } else {
                    let i = self.rng.below(self.outbox.len() as u64) as usize;
                    let c = self.outbox.swap_remove(i);
                    if self.chance(10) {
                        self.outbox.push(c.clone());
                    }
                    c
                }
            }
            520..=629 => {
                let r = self.some_attempt(s);
                self.report(r)
            }
            630..=669 => match self.stopping_report(s) {
                Some(c) => c,
                None => self.batch(s),
            },
            670..=692 => self.batch(s),
            693..=699 => self.grouped(s),
            700..=719 => {
                let c = self.pick(&self.sent.iter().cloned().collect::<Vec<_>>());
                c.unwrap_or(Command::LeaderBarrier {
                    master: 2,
                    accounting: None,
                })
            }
            720..=739 => {
                let due = s.timeouts_due(self.now);
                let r = match self.pick(&due) {
                    Some(r) => r,
                    None => self.some_attempt(s),
                };
                Command::TimeoutTask {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                }
            }
            740..=759 => self.steal(s),
            760..=769 => self.promote_ask(s),
            770..=799 => {
                let r = self.some_attempt(s);
                Command::SetTaskCpus {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                    cpu_milli: self.rng.below(9) * 1000,
                }
            }
            800..=829 => self.compress(s),
            830..=839 => Command::RecordCpuConfig {
                task: self.any_task(s),
                class: TaskClass::ALL[self.rng.below(4) as usize],
                cpu_milli: self.rng.below(5) * 1000,
            },
            840..=874 => Command::GcJobs {
                jobs_finished_before_ms: self
                    .chance(80)
                    .then(|| self.now.saturating_sub(self.rng.below(5_000))),
                requests_before_ms: self
                    .chance(60)
                    .then(|| self.now.saturating_sub(self.rng.below(20_000))),
                keyed_requests_before_ms: None,
            },
            875..=894 => Command::DrainNode {
                node: self.any_node(s),
                deadline_ms: self.chance(60).then(|| self.now + self.rng.below(10_000)),
            },
            895..=914 => Command::UndrainNode {
                node: self.any_node(s),
            },
            915..=929 => {
                let due = s.drains_due(self.now);
                let node = match self.pick(&due) {
                    Some(n) => n,
                    None => self.any_node(s),
                };
                Command::RequeueDrained { node }
            }
            930..=944 => Command::SetPriorityConfig {
                config: self.priority_config(),
            },
            945..=954 => Command::LeaderBarrier {
                master: self.rng.below(3),
                accounting: None,
            },
            955..=964 => Command::Bench {
                client: self.rng.below(2),
                seq: self.rng.below(100),
                record: self.chance(50),
                payload: Default::default(),
            },
            970..=974 => self.acl_command(s),
            965..=969 => Command::RecordProfile {
                node: self.any_node(s),
                engines: vec![EngineDecl {
                    kind: EngineKind::Npu,
                    count: 1,
                    emulated: true,
                }],
                table: Default::default(),
            },
            _ => {
                // A retried client request (or a different command under a used id).
                match self.pick(&self.requests.clone()) {
                    Some((id, c)) => {
                        let c = if self.chance(80) {
                            c
                        } else {
                            self.spec_command(s)
                        };
                        return (c, Some(id));
                    }
                    None => Command::LeaderBarrier {
                        master: 0,
                        accounting: None,
                    },
                }
            }
        };
        if matches!(
            command,
            Command::TaskStarted { .. }
                | Command::TaskFinished { .. }
                | Command::TaskLost { .. }
                | Command::TaskReports { .. }
                | Command::GroupedTaskReports { .. }
        ) {
            self.sent.push_back(command.clone());
            if self.sent.len() > 64 {
                self.sent.pop_front();
            }
        }
        (command, None)
    }

    /// Tasks in a final state now.
    fn model_finals(&self, s: &ClusterState) -> usize {
        s.tasks()
            .values()
            .filter(|t| t.status.state.is_final())
            .count()
    }

    /// A token created (sometimes as the bootstrap, sometimes under a used accessor) or
    /// revoked (a known accessor or an unknown one).
    fn acl_command(&mut self, s: &ClusterState) -> Command {
        let known: Vec<String> = s.acl().tokens.keys().cloned().collect();
        if self.chance(40) {
            let accessor = match self.pick(&known) {
                Some(a) if self.chance(80) => a,
                _ => format!("{:x}", self.rng.below(64)),
            };
            return Command::RevokeToken { accessor };
        }
        let roles = [TokenRole::User, TokenRole::Operator, TokenRole::Admin];
        Command::CreateToken {
            token: TokenRecord {
                accessor: format!("{:x}", self.rng.below(64)),
                user: format!("u{}", self.rng.below(4)),
                role: roles[self.rng.below(3) as usize],
                salt: "00".into(),
                hash: "11".into(),
                created_ms: 0,
                expires_ms: self.chance(50).then(|| self.now + self.rng.below(10_000)),
            },
            bootstrap: self.chance(20),
        }
    }

    fn spec_command(&mut self, s: &ClusterState) -> Command {
        Command::SubmitJob { spec: self.spec(s) }
    }

    fn with_request(&mut self, c: Command) -> (Command, Option<ClientRequestId>) {
        if self.chance(50) {
            return (c, None);
        }
        self.next_request += 1;
        let id = ClientRequestId(self.next_request);
        self.requests.push((id, c.clone()));
        if self.requests.len() > 32 {
            self.requests.remove(0);
        }
        (c, Some(id))
    }

    fn steal(&mut self, s: &ClusterState) -> Command {
        let thieves: Vec<NodeId> = s
            .nodes()
            .values()
            .filter(|n| n.takes_work() && n.queued.is_empty())
            .map(|n| n.id)
            .collect();
        if let Some(thief) = self.pick(&thieves) {
            if let Some(p) = steal::pick_victim(s, thief, &BTreeSet::new()) {
                if self.chance(85) {
                    return Command::StealTask {
                        task: p.task,
                        attempt: p.attempt,
                        from: p.from,
                        to: thief,
                    };
                }
            }
        }
        // A queued attempt to a random thief, or garbage.
        let queued: Vec<TaskRef> = s
            .nodes()
            .values()
            .flat_map(|n| {
                n.queued.iter().filter_map(|t| {
                    s.task(*t).map(|task| TaskRef {
                        task: *t,
                        node: n.id,
                        attempt: task.status.attempt,
                    })
                })
            })
            .collect();
        let r = match self.pick(&queued) {
            Some(r) if self.chance(70) => r,
            _ => self.some_attempt(s),
        };
        Command::StealTask {
            task: r.task,
            attempt: r.attempt,
            from: r.node,
            to: self.any_node(s),
        }
    }

    /// S0.3: a slave's batch asking to start queued tasks, as its link sends it: often after
    /// the end of one of its running tasks (whose cores the asks want), its queued attempts
    /// in queue order, now and then one stale or from another node.
    fn promote_ask(&mut self, s: &ClusterState) -> Command {
        let with_queue: Vec<NodeId> = s
            .nodes()
            .values()
            .filter(|n| !n.queued.is_empty())
            .map(|n| n.id)
            .collect();
        let Some(node) = self.pick(&with_queue) else {
            return self.batch(s);
        };
        let mut reports = Vec::new();
        let running: Vec<TaskRef> = self
            .live(s)
            .into_iter()
            .filter(|r| r.node == node && s.nodes()[&node].tasks.contains(&r.task))
            .collect();
        if self.chance(60) {
            if let Some(r) = self.pick(&running) {
                reports.push(TaskReport::Finished {
                    task: r.task,
                    attempt: r.attempt,
                    exit_code: self.rng.below(2) as i32,
                    reason: None,
                    reason_detail: None,
                    usage: None,
                });
            }
        }
        for t in s.nodes()[&node].queued.clone() {
            let attempt = s.task(t).map_or(0, |t| t.status.attempt);
            if self.chance(80) {
                reports.push(TaskReport::WantsStart { task: t, attempt });
            }
        }
        if self.chance(20) {
            let r = self.some_attempt(s);
            reports.push(TaskReport::WantsStart {
                task: r.task,
                attempt: r.attempt,
            });
        }
        Command::TaskReports { node, reports }
    }

    fn compress(&mut self, s: &ClusterState) -> Command {
        let r = self.some_attempt(s);
        let old = s.task_cpu_milli(r.task).unwrap_or(2000);
        let cpu_milli = match self.rng.below(4) {
            0 => self.rng.below(old + 1000),
            _ => (old / 2).max(1),
        };
        // A GPU task on the same node, mostly.
        let gpu_tasks: Vec<TaskId> = s
            .node(r.node)
            .map(|n| {
                n.tasks
                    .iter()
                    .filter(|t| {
                        s.task(**t)
                            .and_then(|t| s.job_resources(t.job))
                            .is_some_and(|r| !r.gpu.is_none())
                    })
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        let gpu_task = match self.pick(&gpu_tasks) {
            Some(t) if self.chance(80) => t,
            _ => self.any_task(s),
        };
        Command::CompressTask {
            node: r.node,
            task: r.task,
            attempt: r.attempt,
            cpu_milli,
            gpu_task,
        }
    }
}
