//! The model checker's runner: applies generated commands (`gen.rs`) one by one with the
//! invariants of `invariants.rs` checked after every entry, keeps the real scheduler in step
//! as the leader does, replays concrete logs (regression tests, shrinking), and shrinks a
//! failing log to a short one that still fails (printed for a regression test).

use super::gen::Generator;
use super::invariants::{
    check_admission, check_derived, check_history, check_membership, check_resources,
    check_round_trip, check_state, check_step, check_submissions, Check, Model, Violation,
};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::multiqueue::{Ordering, ReserveHistory};
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::{
    command_nodes, touched_nodes, ClusterState, Command, CommandEnvelope, Outcome,
};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// How the real scheduler is configured for a run.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// GPU placement policy.
    pub policy: PolicyKind,
    /// S0.3 slave queue depth (0: none).
    pub queue_depth: u32,
    /// Queue order.
    pub ordering: Ordering,
    /// S3 reserved CPU pools with take-back.
    pub pools: bool,
}

impl Scenario {
    fn scheduler(&self, seed: u64) -> IndexedScheduler {
        let mut s = IndexedScheduler::new(self.policy, seed)
            .with_ordering(self.ordering)
            .with_queue_depth(self.queue_depth);
        if self.pools {
            s = s.with_reserved_pools(ReserveHistory::new(2000));
        }
        s
    }
}

/// Counters of a run, for the report.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Commands applied.
    pub commands: u64,
    /// Outcomes by kind.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Fresh plans of the real scheduler (each must apply whole).
    pub fresh_plans: u64,
    /// Preemptions applied.
    pub preempted: u64,
    /// Largest number of tasks in the state.
    pub max_tasks: usize,
}

impl Stats {
    /// Adds another run's counters.
    pub fn merge(&mut self, o: &Stats) {
        self.commands += o.commands;
        for (k, n) in &o.outcomes {
            *self.outcomes.entry(k).or_default() += n;
        }
        self.fresh_plans += o.fresh_plans;
        self.preempted += o.preempted;
        self.max_tasks = self.max_tasks.max(o.max_tasks);
    }
}

fn outcome_kind(o: &Outcome) -> &'static str {
    match o {
        Outcome::Registered { .. } => "registered",
        Outcome::Submitted { .. } => "submitted",
        Outcome::SubmittedPlaced { .. } => "submitted-placed",
        Outcome::Cancelled { .. } => "cancelled",
        Outcome::PlanApplied { .. } => "plan-applied",
        Outcome::TaskUpdated => "task-updated",
        Outcome::NodeDown { .. } => "node-down",
        Outcome::NodeUp { .. } => "node-up",
        Outcome::Ignored(_) => "ignored",
        Outcome::Rejected(_) => "rejected",
        Outcome::Collected { .. } => "collected",
        Outcome::DrainChanged { .. } => "drain-changed",
        Outcome::Drained { .. } => "drained",
        Outcome::CpusSet { .. } => "cpus-set",
        Outcome::Stolen { .. } => "stolen",
        Outcome::TimedOut { .. } => "timed-out",
        Outcome::BatchSubmitted { .. } => "batch-submitted",
        Outcome::BatchReplanned { .. } => "batch-replanned",
        Outcome::FlowSubmitted { .. } => "flow-submitted",
    }
}

/// A log that broke an invariant: where, and what.
#[derive(Debug)]
pub struct Failure {
    /// Index (1-based) of the entry after which the check failed.
    pub index: usize,
    /// What broke.
    pub violations: Vec<Violation>,
}

/// Which checks a step runs.
#[derive(Clone, Copy, Debug)]
enum Checks {
    /// All of them.
    All,
    /// All but the snapshot round trip.
    AllButRoundTrip,
    /// Only those that can report this (the shrinker replays many logs).
    Only(Check),
}

/// Applies one entry and checks it; `sched` (if any) is kept in step.
fn step_checked(
    state: &mut ClusterState,
    model: &mut Model,
    index: u64,
    env: CommandEnvelope,
    sched: Option<&mut IndexedScheduler>,
    checks: Checks,
) -> (Outcome, Vec<Violation>) {
    let before = state.clone();
    let command = env.command.clone();
    let pre = command_nodes(&command);
    let applied = catch_unwind(AssertUnwindSafe(|| state.apply(index, env)));
    let outcome = match applied {
        Ok(o) => o,
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let o = Outcome::Rejected("panicked".into());
            return (
                o,
                vec![Violation {
                    check: Check::Panic,
                    what: format!("apply panicked: {why}"),
                }],
            );
        }
    };
    model.observe(&outcome);
    let violations = match checks {
        Checks::All | Checks::AllButRoundTrip => {
            let mut v = check_step(&before, state, &command, &outcome);
            v.extend(check_admission(state, &outcome));
            v.extend(check_state(state, model, matches!(checks, Checks::All)));
            v
        }
        Checks::Only(c) => check_one(c, &before, state, model, &command, &outcome),
    };
    if let Some(s) = sched {
        s.nodes_changed(state, &touched_nodes(pre, &outcome));
    }
    (outcome, violations)
}

/// Only the checks that can report `check` (the shrinker replays many logs).
fn check_one(
    check: Check,
    before: &ClusterState,
    s: &ClusterState,
    model: &mut Model,
    command: &Command,
    outcome: &Outcome,
) -> Vec<Violation> {
    match check {
        Check::Capacity | Check::Free => check_resources(s),
        Check::Membership => check_membership(s),
        Check::Derived => check_derived(s),
        Check::Attempts | Check::FinalRan => check_history(s, model),
        Check::Submissions => {
            let mut v = check_history(s, model);
            v.extend(check_submissions(s, model));
            v
        }
        Check::RoundTrip => check_round_trip(s),
        Check::Quota => check_admission(s, outcome),
        Check::Unchanged | Check::Outcome => check_step(before, s, command, outcome),
        Check::Panic => Vec::new(),
    }
}

/// Replays a concrete log from an empty state with every check; the first failure.
pub fn replay(log: &[CommandEnvelope]) -> Result<ClusterState, Failure> {
    replay_checking(log, Checks::All)
}

/// Replays a concrete log from an empty state with `checks`; the first failure.
fn replay_checking(log: &[CommandEnvelope], checks: Checks) -> Result<ClusterState, Failure> {
    let mut state = ClusterState::new();
    let mut model = Model::default();
    for (i, env) in log.iter().enumerate() {
        let (_, violations) = step_checked(
            &mut state,
            &mut model,
            i as u64 + 1,
            env.clone(),
            None,
            checks,
        );
        if !violations.is_empty() {
            return Err(Failure {
                index: i + 1,
                violations,
            });
        }
    }
    Ok(state)
}

/// Cuts `log` (which fails with `check`) down to a short log that still fails with it:
/// chunks are dropped while the replay keeps failing that way, halving the chunk size down
/// to single entries; bounded by `budget` replays and two minutes.
pub fn shrink(mut log: Vec<CommandEnvelope>, check: Check, budget: usize) -> Vec<CommandEnvelope> {
    let started = std::time::Instant::now();
    let budget_left = |tries: usize| tries < budget && started.elapsed().as_secs() < 120;
    let fails = |l: &[CommandEnvelope]| match replay_checking(l, Checks::Only(check)) {
        Err(f) if f.violations.iter().any(|v| v.check == check) => Some(f.index),
        _ => None,
    };
    let mut tries = 0;
    if let Some(i) = fails(&log) {
        log.truncate(i);
    }
    let mut chunk = (log.len() / 2).max(1);
    loop {
        let mut start = 0;
        while start < log.len() && budget_left(tries) {
            let end = (start + chunk).min(log.len());
            let mut cand = log[..start].to_vec();
            cand.extend_from_slice(&log[end..]);
            tries += 1;
            match fails(&cand) {
                Some(i) => {
                    cand.truncate(i);
                    log = cand;
                }
                None => start += chunk,
            }
        }
        if chunk == 1 || !budget_left(tries) {
            break;
        }
        chunk /= 2;
    }
    log
}

/// One seeded run of the model checker.
pub struct Run {
    /// The seed.
    pub seed: u64,
    gen: Generator,
    state: ClusterState,
    model: Model,
    sched: IndexedScheduler,
    /// Every entry applied, for the shrinker.
    log: Vec<CommandEnvelope>,
    /// The snapshot round trip runs after every this many entries (the other checks after
    /// every entry).
    round_trip_every: u64,
    /// Counters.
    pub stats: Stats,
}

impl Run {
    /// A run from `seed` with the scheduler configured as `scenario`.
    pub fn new(seed: u64, scenario: Scenario) -> Self {
        Self {
            seed,
            gen: Generator::new(seed),
            state: ClusterState::new(),
            model: Model::default(),
            sched: scenario.scheduler(seed),
            log: Vec::new(),
            round_trip_every: 1,
            stats: Stats::default(),
        }
    }

    /// Checks the snapshot round trip only after every `n`-th entry (1: every entry).
    pub fn round_trip_every(mut self, n: u64) -> Self {
        self.round_trip_every = n.max(1);
        self
    }

    /// Runs `steps` commands; on a violation, shrinks the log and panics with the seed, the
    /// violations and the shrunk log.
    pub fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            let Ok(violations) = catch_unwind(AssertUnwindSafe(|| self.step())) else {
                panic!(
                    "model check seed {} panicked outside apply (the scheduler?) after {} entries",
                    self.seed,
                    self.log.len()
                )
            };
            if let Some(first) = violations.first() {
                let last = self.log.last().cloned();
                let shrunk = shrink(self.log.clone(), first.check, 3000);
                let lines: Vec<String> = shrunk
                    .iter()
                    .enumerate()
                    .map(|(i, e)| format!("{:>4} {:?}", i + 1, e))
                    .collect();
                let why = replay(&shrunk).err();
                panic!(
                    "model check seed {} (MODEL_CHECK_SEED={} to replay): after entry {} {:?}:\n{:#?}\n\nshrunk to {} entries, failing with {:#?}:\n{}",
                    self.seed,
                    self.seed,
                    self.log.len(),
                    last,
                    violations,
                    shrunk.len(),
                    why,
                    lines.join("\n")
                );
            }
        }
    }

    /// One generated entry, applied and checked; now and then the state is also swapped for
    /// its restored snapshot (as a follower that installed one) and the scheduler reset.
    fn step(&mut self) -> Vec<Violation> {
        let (command, request) = self.gen.next(&self.state, &mut self.sched);
        let fresh = self.gen.fresh;
        let env = CommandEnvelope {
            at_ms: self.gen.at_ms(),
            request,
            command,
        };
        self.log.push(env.clone());
        let index = self.log.len() as u64;
        let checks = if index.is_multiple_of(self.round_trip_every) {
            Checks::All
        } else {
            Checks::AllButRoundTrip
        };
        let (outcome, mut violations) = step_checked(
            &mut self.state,
            &mut self.model,
            index,
            env,
            Some(&mut self.sched),
            checks,
        );
        // A plan the real scheduler built on this very state applies whole: its placement
        // index and the state agree (every node whose free vector a command changed was
        // re-read).
        if let (
            true,
            Outcome::PlanApplied { rejected, .. } | Outcome::SubmittedPlaced { rejected, .. },
        ) = (fresh, &outcome)
        {
            self.stats.fresh_plans += 1;
            if *rejected > 0 {
                violations.push(Violation {
                    check: Check::Outcome,
                    what: format!("{rejected} decisions of a fresh scheduler plan were refused"),
                });
            }
        }
        self.stats.commands += 1;
        *self
            .stats
            .outcomes
            .entry(outcome_kind(&outcome))
            .or_default() += 1;
        self.stats.max_tasks = self.stats.max_tasks.max(self.state.tasks().len());
        if let Outcome::PlanApplied { preempted, .. } = &outcome {
            self.stats.preempted += preempted.len() as u64;
        }
        self.gen.observe(&outcome);
        if self.gen.restore_now() {
            if let Ok(s) = ClusterState::from_bytes(&self.state.to_bytes()) {
                self.state = s;
                self.sched.reset(&self.state);
            }
        }
        violations
    }
}
