//! The simulator: the master's real [`ClusterState`] and a real [`Scheduler`] on a virtual
//! clock, with emulated slaves — no network, no Raft, no threads.
//!
//! Everything goes through the entry points the leader uses: commands in
//! [`CommandEnvelope`]s (the virtual clock in `at_ms`) applied with [`ClusterState::apply`]
//! at consecutive log indexes, [`Scheduler::nodes_changed`] with the nodes each entry touched,
//! and [`Scheduler::plan`] for each scheduling round. An emulated slave starts a task as soon
//! as its assignment applies (`TaskStarted`) and finishes it after its duration
//! (`TaskFinished`).
//!
//! ```text
//!  pods (ordered) ──▶ events (time, finishes before arrivals) ──▶ SubmitJob / TaskFinished
//!                                                                   │ apply + nodes_changed
//!                       TaskStarted ◀── accepted ◀── ApplyPlan ◀── plan ◀┘ (until empty)
//! ```
//!
//! Pure and deterministic: no I/O and no clock (the CLI times a run and fills `sim_ms`); the
//! same input, policy and seed give the same [`RunReport`].
//!
//! Queueing is pluggable: a policy name is `<queueing>-<placement>` and [`Queueing`] builds
//! the scheduler; `fifo` is the master's own behaviour (pending tasks in submission order,
//! each placed if something fits, the rest wait); `drf` orders users by dominant share in
//! one queue and `pipeline` runs every S3 stage (`sched::multiqueue`).

mod fair;
pub mod gen;
mod input;
pub mod plot;
pub mod scenario;

use crate::sched::index::PolicyKind;
use crate::sched::multiqueue::{Ordering, ReserveHistory};
use crate::sched::{IndexedScheduler, ParallelConfig, Scheduler};
use crate::state::{command_nodes, touched_nodes, ClusterState, Command, CommandEnvelope, Outcome};
use hetsched_common::{JobSpec, TaskId};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Errors of the simulator's inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A policy name that is not `<queueing>-<placement>`.
    #[error(
        "unknown policy {0:?}: expected [QUEUEING-]PLACEMENT with QUEUEING one of fifo, drf, \
         pipeline and PLACEMENT one of least-fit, best-fit, first-fit, next-fit, random, frag"
    )]
    UnknownPolicy(String),
    /// Timed mode asked of a pod list without times.
    #[error("--mode timed needs the pod list's creation_time column")]
    NoTimes,
    /// Something else about the input.
    #[error("{0}")]
    Invalid(String),
}

/// How pending tasks are ordered and admitted before placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// Submission order; every pending task that fits is placed (the master's behaviour).
    Fifo,
    /// S3.5: one queue, users in DRF order (then submission).
    Drf,
    /// S3 all stages: `cpu`/`gpu-single`/`gpu-multi` queues (GPU queues first), DRF within
    /// each, reserved CPU pools on GPU nodes with borrowing and take-back.
    Pipeline,
}

impl Queueing {
    /// Every queueing discipline.
    pub const ALL: [Queueing; 3] = [Queueing::Fifo, Queueing::Drf, Queueing::Pipeline];

    /// The name in policy names.
    pub fn name(self) -> &'static str {
        match self {
            Queueing::Fifo => "fifo",
            Queueing::Drf => "drf",
            Queueing::Pipeline => "pipeline",
        }
    }

    /// The scheduler for this discipline with `placement` (seeded with `seed`); `preempt`
    /// false: no preemption or take-back.
    pub fn build(self, placement: PolicyKind, seed: u64, preempt: bool) -> Box<dyn Scheduler> {
        self.build_with(placement, seed, preempt, ParallelConfig::default())
    }

    /// [`build`](Self::build) with S4.7 parallel selection split as `parallel` (groups are
    /// part of the input: one group decides as before).
    pub fn build_with(
        self,
        placement: PolicyKind,
        seed: u64,
        preempt: bool,
        parallel: ParallelConfig,
    ) -> Box<dyn Scheduler> {
        let mut s = IndexedScheduler::new(placement, seed).with_parallel(parallel);
        if !preempt {
            s = s.with_preemption(crate::sched::preemption::PreemptionConfig {
                max_per_plan: 0,
                ..Default::default()
            });
        }
        match self {
            Queueing::Fifo => Box::new(s),
            Queueing::Drf => Box::new(s.with_ordering(Ordering::Drf)),
            Queueing::Pipeline => Box::new(
                s.with_ordering(Ordering::Pipeline)
                    .with_reserved_pools(ReserveHistory::default()),
            ),
        }
    }
}

/// A policy as the CLI names it: `<queueing>-<placement>`, or a bare placement (`fifo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyName {
    /// The name as given (echoed in reports).
    pub given: String,
    /// Queueing discipline.
    pub queueing: Queueing,
    /// Node selection.
    pub placement: PolicyKind,
    /// S1 preemption (and S3 take-back) on; a `-nopreempt` suffix turns it off.
    pub preempt: bool,
}

impl std::str::FromStr for PolicyName {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        let given = s.trim().to_string();
        let lower = given.to_ascii_lowercase();
        let (lower, preempt) = match lower.strip_suffix("-nopreempt") {
            Some(l) => (l.to_string(), false),
            None => (lower, true),
        };
        let (queueing, rest) = Queueing::ALL
            .into_iter()
            .find_map(|q| {
                lower
                    .strip_prefix(q.name())
                    .and_then(|r| r.strip_prefix('-'))
                    .map(|r| (q, r))
            })
            .unwrap_or((Queueing::Fifo, lower.as_str()));
        let placement: PolicyKind = rest
            .parse()
            .map_err(|_| SimError::UnknownPolicy(given.clone()))?;
        Ok(Self {
            given,
            queueing,
            placement,
            preempt,
        })
    }
}

/// Replay modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Place in order, never release; record the first failure, then go on through the list
    /// once counting what else still fits (the FGD paper's measure).
    ArrivalOnly,
    /// Arrivals at their times, queueing when nothing fits, running for their durations.
    Timed,
}

impl std::str::FromStr for Mode {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "arrival-only" => Ok(Mode::ArrivalOnly),
            "timed" => Ok(Mode::Timed),
            _ => Err(SimError::Invalid(format!(
                "unknown mode {s:?}: expected arrival-only or timed"
            ))),
        }
    }
}

pub use input::{ordered, tasks_from_trace, Order, SimNode, SimTask};

/// What one run measured. `None` (JSON `null`) where the mode does not give a figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// The policy name as given.
    pub policy: String,
    /// Tasks that started.
    pub placed: u64,
    /// Tasks that never started (arrival-only: did not fit on arrival).
    pub failed: u64,
    /// Arrival-only: position (0-based, in the replay order) of the first task that fit
    /// nowhere.
    pub first_failure_index: Option<u64>,
    /// Arrival-only: fraction of the cluster's GPU thousandths unallocated at that moment.
    pub unallocated_gpu_share_at_first_failure: Option<f64>,
    /// Fraction of GPU thousandths allocated at the end (timed: right after the last
    /// arrival was handled).
    pub gpu_allocated_share_at_end: f64,
    /// Timed: mean wait from arrival to start of tasks without GPUs, seconds.
    pub cpu_queue_mean_s: Option<f64>,
    /// Timed: mean wait of GPU tasks, seconds.
    pub gpu_queue_mean_s: Option<f64>,
    /// Timed: 95th percentile wait of GPU tasks, seconds.
    pub gpu_queue_p95_s: Option<f64>,
    /// Timed: mean wait of each user's GPU tasks, seconds (issue 53; empty in
    /// arrival-only mode).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_queue_mean_s_by_user: BTreeMap<String, f64>,
    /// Preemptions the plans asked for.
    pub preemptions: u64,
    /// Wall-clock time of the run, ms (filled by the caller; the core reads no clock).
    pub sim_ms: u64,
    /// Allocated GPU share after each arrival (for plots; not in JSON).
    #[serde(skip)]
    pub curve: Vec<f64>,
    /// Every start, in the order the plans made them: the decisions themselves, so that a
    /// change meant to keep them (a refactoring of the stages) can be checked against a
    /// recorded run (`tests/sim_decisions.rs`); not in JSON.
    #[serde(skip)]
    pub starts: Vec<(TaskId, hetsched_common::NodeId)>,
}

/// The state, the scheduler and the log index, driven like the leader drives them.
struct Driver {
    state: ClusterState,
    sched: Box<dyn Scheduler>,
    index: u64,
    now_ms: u64,
    preemptions: u64,
    /// Attempts stopped by preemption (their emulated slaves reported them stopped).
    stopped: Vec<crate::state::TaskRef>,
    /// Every start so far ([`RunReport::starts`]).
    starts: Vec<(TaskId, hetsched_common::NodeId)>,
    /// Issue 53: fair share, when on.
    fair: Option<fair::FairShare>,
}

impl Driver {
    fn apply(&mut self, command: Command) -> Outcome {
        self.index += 1;
        let pre = command_nodes(&command);
        let o = self.state.apply(
            self.index,
            CommandEnvelope {
                at_ms: self.now_ms,
                request: None,
                command,
            },
        );
        let touched = touched_nodes(pre, &o);
        self.sched.nodes_changed(&self.state, &touched);
        o
    }

    /// Scheduling rounds until a plan is empty or places nothing; every accepted assignment
    /// is started by its emulated slave. Returns the started tasks.
    fn schedule(&mut self) -> Vec<(TaskId, hetsched_common::NodeId, u32)> {
        let mut started = Vec::new();
        // Rounds in a row that only stopped victims (bounds replanning after stops).
        let mut stop_rounds = 0;
        loop {
            if let Some(f) = &self.fair {
                self.sched
                    .set_fair_share(f.factors(&self.state, self.now_ms));
            }
            let plan = self.sched.plan(&self.state);
            if plan.is_empty() {
                break;
            }
            let Outcome::PlanApplied {
                accepted,
                preempted,
                ..
            } = self.apply(Command::ApplyPlan(plan))
            else {
                break;
            };
            self.preemptions += preempted.len() as u64;
            let stopped_now = !preempted.is_empty();
            // Each victim's emulated slave stops it at once and says so.
            for v in preempted {
                self.ended(v.task);
                self.apply(Command::TaskFinished {
                    node: v.node,
                    task: v.task,
                    attempt: v.attempt,
                    exit_code: -1,
                    reason: Some(hetsched_common::TaskReason::Preempted),
                });
                self.stopped.push(v);
            }
            if accepted.is_empty() {
                // Stopped victims free room: plan again (a preemptor places next round).
                if !stopped_now || stop_rounds >= 2 {
                    break;
                }
                stop_rounds += 1;
                continue;
            }
            stop_rounds = 0;
            for r in accepted {
                self.apply(Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                });
                if let Some(f) = &mut self.fair {
                    f.started(r.task, self.now_ms);
                }
                let milli = self
                    .state
                    .tasks()
                    .get(&r.task)
                    .map(|t| t.gpus.iter().map(|(_, m)| *m).sum())
                    .unwrap_or(0);
                self.starts.push((r.task, r.node));
                started.push((r.task, r.node, milli));
            }
        }
        started
    }

    /// `task`'s running attempt ends now: fair share charges its user.
    fn ended(&mut self, task: TaskId) {
        if let Some(f) = &mut self.fair {
            f.ended(&self.state, task, self.now_ms);
        }
    }

    fn submit(&mut self, t: &SimTask) -> Option<TaskId> {
        let spec = JobSpec {
            name: t.name.clone(),
            user: t.user.clone(),
            partition: t.partition.clone(),
            resources: t.request.clone(),
            count: 1,
            command: vec!["sim".into()],
            ..Default::default()
        };
        match self.apply(Command::SubmitJob { spec }) {
            Outcome::Submitted { tasks, .. } => tasks.first().copied(),
            _ => None,
        }
    }
}

fn start(nodes: &[SimNode], policy: &PolicyName, setup: &Setup, seed: u64) -> Driver {
    let mut d = Driver {
        state: ClusterState::new(),
        sched: policy
            .queueing
            .build_with(policy.placement, seed, policy.preempt, setup.parallel),
        index: 0,
        now_ms: 0,
        preemptions: 0,
        stopped: Vec::new(),
        starts: Vec::new(),
        fair: setup.fairshare_half_life_ms.map(fair::FairShare::new),
    };
    if let Some(config) = &setup.priorities {
        d.apply(Command::SetPriorityConfig {
            config: config.clone(),
        });
    }
    for (i, n) in nodes.iter().enumerate() {
        d.apply(Command::RegisterNode {
            key: i as u64 + 1,
            node: None,
            name: n.name.clone(),
            addr: String::new(),
            capacity: n.resources.clone(),
            labels: Default::default(),
            partitions: n.partitions.clone(),
        });
    }
    d.sched.reset(&d.state);
    d
}

fn total_gpu_milli(nodes: &[SimNode]) -> u64 {
    nodes.iter().map(|n| n.resources.gpu_free_milli()).sum()
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64
    }
}

/// What a run starts from besides nodes and tasks (a scenario's S1 settings).
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// The priority configuration applied before anything else (`None`: the default).
    pub priorities: Option<hetsched_common::priority::PriorityConfig>,
    /// S4.7 parallel selection (`--placement-groups`, `--placement-threads`; default one
    /// group on one thread: the decisions of before).
    pub parallel: ParallelConfig,
    /// Issue 53: fair share's half-life on the virtual clock (`--fairshare-half-life`;
    /// `None`, the default: off, the decisions of before).
    pub fairshare_half_life_ms: Option<u64>,
}

/// Runs `tasks` on `nodes` under `policy` in `mode`; `progress` is called with the number
/// of arrivals handled so far.
pub fn run(
    nodes: &[SimNode],
    tasks: &[SimTask],
    policy: &PolicyName,
    mode: Mode,
    seed: u64,
    progress: &mut dyn FnMut(usize),
) -> RunReport {
    run_with(
        nodes,
        tasks,
        policy,
        mode,
        seed,
        &Setup::default(),
        progress,
    )
}

/// [`run`] from `setup`.
pub fn run_with(
    nodes: &[SimNode],
    tasks: &[SimTask],
    policy: &PolicyName,
    mode: Mode,
    seed: u64,
    setup: &Setup,
    progress: &mut dyn FnMut(usize),
) -> RunReport {
    match mode {
        Mode::ArrivalOnly => arrival_only(nodes, tasks, policy, setup, seed, progress),
        Mode::Timed => timed(nodes, tasks, policy, setup, seed, progress),
    }
}

fn arrival_only(
    nodes: &[SimNode],
    tasks: &[SimTask],
    policy: &PolicyName,
    setup: &Setup,
    seed: u64,
    progress: &mut dyn FnMut(usize),
) -> RunReport {
    let mut d = start(nodes, policy, setup, seed);
    let total = total_gpu_milli(nodes);
    let (mut allocated, mut placed, mut failed) = (0u64, 0u64, 0u64);
    let mut first_failure = None;
    let mut curve = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        d.now_ms = i as u64;
        if let Some(id) = d.submit(t) {
            let started = d.schedule();
            for (_, _, milli) in &started {
                allocated += *milli as u64;
            }
            placed += started.len() as u64;
            if d.state.pending().contains(&id) {
                failed += 1;
                if first_failure.is_none() {
                    first_failure = Some((i as u64, 1.0 - share(allocated, total)));
                }
                if let Some(job) = d.state.tasks().get(&id).map(|t| t.job) {
                    d.apply(Command::CancelJob { job });
                }
            }
        } else {
            failed += 1;
        }
        curve.push(share(allocated, total));
        progress(i + 1);
    }
    RunReport {
        policy: policy.given.clone(),
        placed,
        failed,
        first_failure_index: first_failure.map(|f| f.0),
        unallocated_gpu_share_at_first_failure: first_failure.map(|f| f.1),
        gpu_allocated_share_at_end: share(allocated, total),
        cpu_queue_mean_s: None,
        gpu_queue_mean_s: None,
        gpu_queue_p95_s: None,
        gpu_queue_mean_s_by_user: BTreeMap::new(),
        preemptions: d.preemptions,
        sim_ms: 0,
        curve,
        starts: d.starts,
    }
}

/// Timed events, in (time, kind, sequence) order: finishes before arrivals at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Finish { task: TaskId, attempt: u32 },
    EndOfTrace,
    Arrive { task: usize },
}

/// A timed run's bookkeeping beside the driver: the event queue, what runs where, and the
/// waits and GPU share measured.
struct TimedRun<'a> {
    tasks: &'a [SimTask],
    events: BinaryHeap<Reverse<(u64, Event)>>,
    by_id: BTreeMap<TaskId, usize>,
    /// Running attempts: node, GPU thousandths, attempt.
    running: BTreeMap<TaskId, (hetsched_common::NodeId, u32, u32)>,
    started_once: std::collections::BTreeSet<TaskId>,
    waits_cpu: Vec<u64>,
    waits_gpu: Vec<u64>,
    /// GPU tasks' waits by user (issue 53: what fair share changes).
    waits_gpu_by_user: BTreeMap<String, Vec<u64>>,
    allocated: u64,
    placed: u64,
    /// The trace ended: tasks without a deletion time end as they start.
    ended: bool,
}

impl<'a> TimedRun<'a> {
    /// Every arrival queued, and the end of the trace: when its last task would have ended
    /// had it started on arrival.
    fn new(tasks: &'a [SimTask]) -> Self {
        let trace_end = tasks
            .iter()
            .map(|t| t.arrival_ms + t.duration_ms.unwrap_or(0))
            .max()
            .unwrap_or(0);
        let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
        for (i, t) in tasks.iter().enumerate() {
            events.push(Reverse((t.arrival_ms, Event::Arrive { task: i })));
        }
        events.push(Reverse((trace_end, Event::EndOfTrace)));
        Self {
            tasks,
            events,
            by_id: BTreeMap::new(),
            running: BTreeMap::new(),
            started_once: Default::default(),
            waits_cpu: Vec::new(),
            waits_gpu: Vec::new(),
            waits_gpu_by_user: BTreeMap::new(),
            allocated: 0,
            placed: 0,
            ended: false,
        }
    }

    /// The time of the next event.
    fn next_instant(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((t, _))| *t)
    }

    /// Takes every event at `now` into the driver; returns how many tasks arrived.
    fn take_events(&mut self, d: &mut Driver, now: u64) -> usize {
        let mut arrivals = 0;
        while let Some(Reverse((t, ev))) = self.events.peek().copied() {
            if t != now {
                break;
            }
            self.events.pop();
            match ev {
                Event::Finish { task, attempt } => self.finish(d, task, attempt),
                Event::EndOfTrace => self.end_of_trace(now),
                Event::Arrive { task } => {
                    arrivals += 1;
                    if let Some(id) = d.submit(&self.tasks[task]) {
                        self.by_id.insert(id, task);
                    }
                }
            }
        }
        arrivals
    }

    /// An attempt's end (stale when the attempt was preempted since).
    fn finish(&mut self, d: &mut Driver, task: TaskId, attempt: u32) {
        if self.running.get(&task).is_none_or(|r| r.2 != attempt) {
            return;
        }
        let Some((node, milli, _)) = self.running.remove(&task) else {
            return;
        };
        d.ended(task);
        d.apply(Command::TaskFinished {
            node,
            task,
            attempt,
            exit_code: 0,
            reason: None,
        });
        self.allocated -= milli as u64;
    }

    /// The trace ended: tasks without a deletion time run until now.
    fn end_of_trace(&mut self, now: u64) {
        self.ended = true;
        let open: Vec<TaskId> = self
            .running
            .keys()
            .filter(|id| {
                self.by_id
                    .get(id)
                    .is_some_and(|i| self.tasks[*i].duration_ms.is_none())
            })
            .copied()
            .collect();
        for task in open {
            let attempt = self.running.get(&task).map_or(0, |r| r.2);
            self.events
                .push(Reverse((now, Event::Finish { task, attempt })));
        }
    }

    /// Preempted attempts stopped (before any restart of theirs).
    fn stopped(&mut self, d: &mut Driver) {
        for v in std::mem::take(&mut d.stopped) {
            if self.running.get(&v.task).is_some_and(|r| r.2 == v.attempt) {
                if let Some((_, milli, _)) = self.running.remove(&v.task) {
                    self.allocated -= milli as u64;
                }
            }
        }
    }

    /// Attempts the plan at `now` started: held, their first wait counted, their end queued.
    fn started(
        &mut self,
        d: &Driver,
        now: u64,
        started: Vec<(TaskId, hetsched_common::NodeId, u32)>,
    ) {
        for (id, node, milli) in started {
            let Some(i) = self.by_id.get(&id).copied() else {
                continue;
            };
            let t = &self.tasks[i];
            let attempt = d.state.tasks().get(&id).map_or(0, |t| t.status.attempt);
            self.allocated += milli as u64;
            self.running.insert(id, (node, milli, attempt));
            // A restart after preemption waited already: its first wait counts.
            if self.started_once.insert(id) {
                self.placed += 1;
                let wait = now.saturating_sub(t.arrival_ms);
                if t.request.gpu.is_none() {
                    self.waits_cpu.push(wait);
                } else {
                    self.waits_gpu.push(wait);
                    let by_user = self.waits_gpu_by_user.entry(t.user.clone()).or_default();
                    by_user.push(wait);
                }
            }
            let end = match t.duration_ms {
                Some(dur) => Some(now + dur),
                None if self.ended => Some(now),
                None => None,
            };
            if let Some(end) = end {
                self.events
                    .push(Reverse((end, Event::Finish { task: id, attempt })));
            }
        }
    }
}

fn timed(
    nodes: &[SimNode],
    tasks: &[SimTask],
    policy: &PolicyName,
    setup: &Setup,
    seed: u64,
    progress: &mut dyn FnMut(usize),
) -> RunReport {
    let mut d = start(nodes, policy, setup, seed);
    let total = total_gpu_milli(nodes);
    let mut run = TimedRun::new(tasks);
    let mut arrived = 0usize;
    let mut at_last_arrival = 0.0;
    let mut curve = Vec::with_capacity(tasks.len());
    while let Some(now) = run.next_instant() {
        d.now_ms = now;
        let arrivals_now = run.take_events(&mut d, now);
        let started = d.schedule();
        run.stopped(&mut d);
        run.started(&d, now, started);
        for _ in 0..arrivals_now {
            arrived += 1;
            curve.push(share(run.allocated, total));
            progress(arrived);
        }
        if arrived == tasks.len() && arrivals_now > 0 {
            at_last_arrival = share(run.allocated, total);
        }
    }
    let mean_s = |v: &[u64]| {
        (!v.is_empty()).then(|| v.iter().map(|w| *w as f64).sum::<f64>() / v.len() as f64 / 1e3)
    };
    let p95_s = |v: &mut Vec<u64>| {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = ((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1] as f64 / 1e3)
    };
    let placed = run.placed;
    RunReport {
        policy: policy.given.clone(),
        placed,
        failed: tasks.len() as u64 - placed.min(tasks.len() as u64),
        first_failure_index: None,
        unallocated_gpu_share_at_first_failure: None,
        gpu_allocated_share_at_end: at_last_arrival,
        cpu_queue_mean_s: mean_s(&run.waits_cpu),
        gpu_queue_mean_s: mean_s(&run.waits_gpu),
        gpu_queue_p95_s: p95_s(&mut run.waits_gpu),
        gpu_queue_mean_s_by_user: run
            .waits_gpu_by_user
            .iter()
            .filter_map(|(u, w)| Some((u.clone(), mean_s(w)?)))
            .collect(),
        preemptions: d.preemptions,
        sim_ms: 0,
        curve,
        starts: d.starts,
    }
}

#[cfg(test)]
mod tests;
