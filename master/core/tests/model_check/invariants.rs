//! The model checker's invariants: what must hold of a `ClusterState` after every applied
//! command, each recomputed from the tasks, jobs and nodes themselves rather than read from
//! what `apply` keeps derived. Every check returns the violations it finds (never panics),
//! tagged by [`Check`], so that the broken-variant tests can show each one fires on a
//! hand-corrupted state.
//!
//! [`Model`] is the checker's memory across steps: the attempts and final states it saw, and
//! every submission `apply` acknowledged.

use hetsched_common::priority::Principal;
use hetsched_common::{Attempt, EngineKind, JobId, NodeId, TaskId, TaskState};
use hetsched_master_core::state::{
    engine_count, fnv1a64, partition_of, Booking, ClusterState, Command, Outcome, Task,
};
use std::collections::{BTreeMap, BTreeSet};

/// Which invariant a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// A node holds more than its capacity, or its free vector exceeds its capacity, or
    /// more of its engine units are booked than it has (S0.2).
    Capacity,
    /// A node's free vector is not capacity minus what it holds (tasks assigned or running
    /// there, stopping attempts, compression holds).
    Free,
    /// Where tasks are: the pending set, nodes' task sets and queues, stopping attempts,
    /// compression holds and awaiting preemptors agree with the tasks' own status.
    Membership,
    /// A task's attempt went down.
    Attempts,
    /// A task in a final state changed state (ran again) or vanished while not final.
    FinalRan,
    /// An acknowledged submission is neither in the jobs nor collected after it finished.
    Submissions,
    /// A derived count disagrees with a recomputation (a job's open tasks, its finish).
    Derived,
    /// S1 admission: priorities and quota holdings of newly admitted tasks.
    Quota,
    /// Snapshot → restore does not give back the same state and state hash.
    RoundTrip,
    /// A command answered `Rejected` / `Ignored` (or a plan that placed and preempted nothing)
    /// changed the state anyway.
    Unchanged,
    /// An outcome disagrees with the state it left (accepted attempts, preempted victims).
    Outcome,
    /// `apply` panicked.
    Panic,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub check: Check,
    /// What exactly.
    pub what: String,
}

fn v(check: Check, what: String) -> Violation {
    Violation { check, what }
}

/// What the checker remembers between steps.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Last attempt seen of each task still in the state.
    attempts: BTreeMap<TaskId, Attempt>,
    /// Tasks seen in a final state, and that state.
    finals: BTreeMap<TaskId, TaskState>,
    /// Acknowledged submissions still in the state: job → its tasks.
    acknowledged: BTreeMap<JobId, Vec<TaskId>>,
    /// Acknowledged jobs seen collected (ids are never reused).
    collected: BTreeSet<JobId>,
}

impl Model {
    /// Records what an outcome acknowledged.
    pub fn observe(&mut self, outcome: &Outcome) {
        if let Outcome::Submitted { job, tasks } | Outcome::SubmittedPlaced { job, tasks, .. } =
            outcome
        {
            if !self.collected.contains(job) {
                self.acknowledged.insert(*job, tasks.clone());
            }
        }
    }

    /// Pretends `job` was acknowledged with `tasks` (for the broken-variant tests).
    pub fn acknowledge(&mut self, job: JobId, tasks: Vec<TaskId>) {
        self.acknowledged.insert(job, tasks);
    }
}

/// Every per-state check, updating `model`.
pub fn check_all(s: &ClusterState, model: &mut Model) -> Vec<Violation> {
    check_state(s, model, true)
}

/// Every per-state check, the snapshot round trip only when `round_trip` (it costs more than
/// all the others together), updating `model`.
pub fn check_state(s: &ClusterState, model: &mut Model, round_trip: bool) -> Vec<Violation> {
    let mut out = check_resources(s);
    out.extend(check_membership(s));
    out.extend(check_derived(s));
    out.extend(check_history(s, model));
    out.extend(check_submissions(s, model));
    if round_trip {
        out.extend(check_round_trip(s));
    }
    out
}

/// What a node holds by dimension, recomputed.
#[derive(Default)]
struct Held {
    cpu: u128,
    mem: u128,
    engines: BTreeMap<EngineKind, u128>,
    gpus: BTreeMap<u32, u128>,
}

impl Held {
    fn add(&mut self, s: &ClusterState, job: JobId, cpu: Option<u64>, gpus: &[(u32, u32)]) {
        let Some(j) = s.job(job) else { return };
        let r = &j.spec.resources;
        self.cpu += u128::from(cpu.unwrap_or(r.cpu_milli));
        self.mem += u128::from(r.mem_mib);
        for (k, n) in &r.engines {
            *self.engines.entry(*k).or_default() += u128::from(*n);
        }
        for (dev, share) in gpus {
            *self.gpus.entry(*dev).or_default() += u128::from(*share);
        }
    }
}

/// No node over capacity; every node's free vector equals capacity minus what it holds.
pub fn check_resources(s: &ClusterState) -> Vec<Violation> {
    let mut out = Vec::new();
    for n in s.nodes().values() {
        let mut h = Held::default();
        // S0.2: engine units booked by the tasks and stopping attempts here, by kind.
        let mut booked: BTreeMap<EngineKind, u32> = BTreeMap::new();
        let mut book = |h: &mut Held, b: Option<Booking>| {
            if let Some(b) = b {
                *booked.entry(b.kind).or_default() += 1;
                if b.extra && !matches!(b.kind, EngineKind::Cpu | EngineKind::Gpu) {
                    *h.engines.entry(b.kind).or_default() += 1;
                }
            }
        };
        for st in &n.stopping {
            book(&mut h, st.booked);
        }
        for tid in &n.tasks {
            if let Some(t) = s.task(*tid) {
                book(&mut h, t.booked);
            }
        }
        for k in EngineKind::ALL {
            let count = engine_count(&n.capacity, k);
            let have = n.booked.get(&k).copied().unwrap_or(0);
            if have > count {
                out.push(v(
                    Check::Capacity,
                    format!("{}: {have} {k} engine units booked of {count}", n.id),
                ));
            }
            let recount = booked.get(&k).copied().unwrap_or(0);
            if have != recount {
                out.push(v(
                    Check::Free,
                    format!(
                        "{}: {have} {k} units counted booked, its tasks book {recount}",
                        n.id
                    ),
                ));
            }
        }
        for tid in &n.tasks {
            match s.task(*tid) {
                Some(t) if s.job(t.job).is_some() => h.add(s, t.job, t.cpu_milli, &t.gpus),
                _ => out.push(v(
                    Check::Free,
                    format!("{} holds {tid}, whose task or job is gone", n.id),
                )),
            }
        }
        for st in &n.stopping {
            if s.job(st.job).is_none() {
                out.push(v(
                    Check::Free,
                    format!(
                        "{} holds stopping {}#{} of {}, which is gone: its resources can never return",
                        n.id, st.task, st.attempt, st.job
                    ),
                ));
            }
            h.add(s, st.job, st.cpu_milli, &st.gpus);
        }
        h.cpu += n
            .compress_reserves
            .iter()
            .map(|r| u128::from(r.cpu_milli))
            .sum::<u128>();
        let (cap, free) = (&n.capacity, &n.free);
        let mut dims: Vec<(String, u128, u128, u128)> = vec![
            (
                "cpu".into(),
                cap.cpu_milli.into(),
                free.cpu_milli.into(),
                h.cpu,
            ),
            ("mem".into(), cap.mem_mib.into(), free.mem_mib.into(), h.mem),
        ];
        let kinds: BTreeSet<EngineKind> = cap
            .engines
            .keys()
            .chain(free.engines.keys())
            .chain(h.engines.keys())
            .copied()
            .collect();
        for k in kinds {
            let get = |m: &BTreeMap<EngineKind, u32>| u128::from(m.get(&k).copied().unwrap_or(0));
            dims.push((
                format!("{k}"),
                get(&cap.engines),
                get(&free.engines),
                h.engines.get(&k).copied().unwrap_or(0),
            ));
        }
        if cap.gpus.len() != free.gpus.len() {
            out.push(v(
                Check::Free,
                format!(
                    "{}: {} GPUs free of {} in capacity",
                    n.id,
                    free.gpus.len(),
                    cap.gpus.len()
                ),
            ));
        }
        for (dev, share) in &h.gpus {
            if *dev as usize >= cap.gpus.len() {
                out.push(v(
                    Check::Capacity,
                    format!("{} holds {share}/1000 of GPU {dev}, which it lacks", n.id),
                ));
            }
        }
        for (i, c) in cap.gpus.iter().enumerate() {
            let f = free.gpus.get(i).map_or(0, |d| u128::from(d.free_milli));
            let held = h.gpus.get(&(i as u32)).copied().unwrap_or(0);
            dims.push((format!("gpu{i}"), c.free_milli.into(), f, held));
        }
        for (dim, cap, free, held) in dims {
            if held > cap {
                out.push(v(
                    Check::Capacity,
                    format!("{} holds {held} of {cap} {dim}", n.id),
                ));
            }
            if free > cap {
                out.push(v(
                    Check::Capacity,
                    format!("{} has {free} {dim} free of {cap}", n.id),
                ));
            }
            if free + held != cap {
                out.push(v(
                    Check::Free,
                    format!(
                        "{}: {dim} free {free} + held {held} != capacity {cap} (tasks {:?}, stopping {:?}, queued {:?})",
                        n.id,
                        n.tasks,
                        n.stopping.iter().map(|s| (s.task, s.attempt)).collect::<Vec<_>>(),
                        n.queued
                    ),
                ));
            }
        }
    }
    out
}

fn on_node(t: &Task) -> bool {
    matches!(t.status.state, TaskState::Assigned | TaskState::Running)
}

/// The pending set, node task sets and queues, stopping attempts, compression holds and
/// awaiting preemptors agree with the tasks' status.
pub fn check_membership(s: &ClusterState) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut bad = |what: String| out.push(v(Check::Membership, what));
    for tid in s.pending() {
        if s.task(*tid).is_none() {
            bad(format!("pending {tid} is not a task"));
        }
    }
    let mut placed: BTreeMap<TaskId, NodeId> = BTreeMap::new();
    let mut stopping: BTreeSet<(TaskId, Attempt)> = BTreeSet::new();
    for n in s.nodes().values() {
        let queued: BTreeSet<TaskId> = n.queued.iter().copied().collect();
        if queued.len() != n.queued.len() {
            bad(format!("{} queues a task twice: {:?}", n.id, n.queued));
        }
        for tid in n.tasks.iter().chain(queued.iter()) {
            if n.tasks.contains(tid) && queued.contains(tid) {
                bad(format!("{tid} is both held and queued on {}", n.id));
            }
            if let Some(other) = placed.insert(*tid, n.id) {
                if other != n.id {
                    bad(format!("{tid} is on {other} and on {}", n.id));
                }
            }
            match s.task(*tid) {
                None => bad(format!("{} holds {tid}, which is not a task", n.id)),
                Some(t) if !on_node(t) || t.status.node != Some(n.id) => bad(format!(
                    "{} holds {tid}, which is {} on {:?}",
                    n.id, t.status.state, t.status.node
                )),
                Some(t) if queued.contains(tid) && !t.gpus.is_empty() => {
                    bad(format!("queued {tid} on {} holds GPUs {:?}", n.id, t.gpus))
                }
                Some(_) => {}
            }
        }
        for st in &n.stopping {
            if !stopping.insert((st.task, st.attempt)) {
                bad(format!("stopping {}#{} listed twice", st.task, st.attempt));
            }
            match s.task(st.task) {
                None => bad(format!("stopping {} on {} is not a task", st.task, n.id)),
                // Preempted: back to pending at that attempt; the next assignment is + 1.
                Some(t)
                    if t.status.attempt < st.attempt
                        || (t.status.attempt == st.attempt && on_node(t)) =>
                {
                    bad(format!(
                        "stopping {}#{} on {} but the task is {} at attempt {}",
                        st.task, st.attempt, n.id, t.status.state, t.status.attempt
                    ))
                }
                Some(_) => {}
            }
        }
        for r in &n.compress_reserves {
            let holder =
                n.tasks.contains(&r.gpu_task) || n.stopping.iter().any(|st| st.task == r.gpu_task);
            if !holder {
                bad(format!(
                    "{} holds {} millicores for {}, which is no longer there",
                    n.id, r.cpu_milli, r.gpu_task
                ));
            }
        }
    }
    for t in s.tasks().values() {
        let pending = s.pending().contains(&t.id);
        if (t.status.state == TaskState::Pending) != pending {
            bad(format!(
                "{} is {} but {}in the pending set",
                t.id,
                t.status.state,
                if pending { "" } else { "not " }
            ));
        }
        if on_node(t) {
            match t.status.node {
                Some(node) if placed.get(&t.id) == Some(&node) => {}
                node => bad(format!(
                    "{} is {} on {node:?} but no node holds or queues it",
                    t.id, t.status.state
                )),
            }
            if t.status.node.is_some()
                && t.attempt_nodes.get(&t.status.attempt) != t.status.node.as_ref()
            {
                bad(format!(
                    "{}'s attempt {} is not recorded on its node",
                    t.id, t.status.attempt
                ));
            }
        } else {
            if placed.contains_key(&t.id) {
                bad(format!(
                    "{} is {} but still on a node",
                    t.id, t.status.state
                ));
            }
            if !t.gpus.is_empty() {
                bad(format!(
                    "{} is {} but holds GPUs {:?}",
                    t.id, t.status.state, t.gpus
                ));
            }
        }
        if t.attempt_nodes
            .keys()
            .next_back()
            .is_some_and(|a| *a > t.status.attempt)
        {
            bad(format!(
                "{} recorded an attempt beyond {}",
                t.id, t.status.attempt
            ));
        }
        match s.job(t.job) {
            None => bad(format!("{} belongs to missing {}", t.id, t.job)),
            Some(j) if j.tasks.get(t.index as usize) != Some(&t.id) => {
                bad(format!("{} is not task {} of {}", t.id, t.index, t.job))
            }
            Some(_) => {}
        }
    }
    for (pre, (node, _)) in s.awaiting() {
        match s.task(*pre) {
            Some(t) if t.status.state == TaskState::Pending => {}
            Some(t) => bad(format!(
                "{pre} awaits room on {node} but is {}",
                t.status.state
            )),
            None => bad(format!("{pre} awaits room on {node} but is not a task")),
        }
    }
    out
}

/// Jobs' open-task counts and finish times agree with their tasks.
pub fn check_derived(s: &ClusterState) -> Vec<Violation> {
    let mut out = Vec::new();
    for j in s.jobs().values() {
        let mut open = 0u32;
        for tid in &j.tasks {
            match s.task(*tid) {
                Some(t) if !t.status.state.is_final() => open += 1,
                Some(_) => {}
                None => out.push(v(
                    Check::Derived,
                    format!("{} lists {tid}, which is not a task", j.id),
                )),
            }
        }
        if j.open != open {
            out.push(v(
                Check::Derived,
                format!("{} counts {} open tasks, recomputed {open}", j.id, j.open),
            ));
        }
        if (open == 0) != j.finished_ms.is_some() {
            out.push(v(
                Check::Derived,
                format!(
                    "{} has {open} open tasks and finished_ms {:?}",
                    j.id, j.finished_ms
                ),
            ));
        }
    }
    out
}

/// Attempts only grow; a final task stays as it ended; a task leaves the state only final.
pub fn check_history(s: &ClusterState, model: &mut Model) -> Vec<Violation> {
    let mut out = Vec::new();
    let gone: Vec<TaskId> = model
        .attempts
        .keys()
        .filter(|t| s.task(**t).is_none())
        .copied()
        .collect();
    for t in gone {
        model.attempts.remove(&t);
        if model.finals.remove(&t).is_none() {
            out.push(v(
                Check::FinalRan,
                format!("{t} left the state without reaching a final state"),
            ));
        }
        if !s.task_was_collected(t) {
            out.push(v(
                Check::FinalRan,
                format!("{t} vanished and is not collected"),
            ));
        }
    }
    for t in s.tasks().values() {
        let a = t.status.attempt;
        if let Some(prev) = model.attempts.insert(t.id, a) {
            if a < prev {
                out.push(v(
                    Check::Attempts,
                    format!("{} went from attempt {prev} back to {a}", t.id),
                ));
            }
        }
        if let Some(was) = model.finals.get(&t.id) {
            if t.status.state != *was {
                out.push(v(
                    Check::FinalRan,
                    format!("{} ended {was} but is now {}", t.id, t.status.state),
                ));
            }
        } else if t.status.state.is_final() {
            model.finals.insert(t.id, t.status.state);
        }
    }
    out
}

/// Every acknowledged submission is in the jobs with all its tasks, or was collected after
/// it finished.
pub fn check_submissions(s: &ClusterState, model: &mut Model) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut collected = Vec::new();
    for (job, tasks) in &model.acknowledged {
        match s.job(*job) {
            Some(j) => {
                if j.tasks != *tasks {
                    out.push(v(
                        Check::Submissions,
                        format!(
                            "{job} was acknowledged with {tasks:?}, now lists {:?}",
                            j.tasks
                        ),
                    ));
                }
                for t in tasks {
                    if s.task(*t).is_none() {
                        out.push(v(
                            Check::Submissions,
                            format!("{t} of acknowledged {job} is missing"),
                        ));
                    }
                }
            }
            None => {
                let finished = tasks
                    .iter()
                    .all(|t| model.finals.contains_key(t) || !model.attempts.contains_key(t));
                if !s.job_was_collected(*job) || !tasks.iter().all(|t| s.task_was_collected(*t)) {
                    out.push(v(
                        Check::Submissions,
                        format!("acknowledged {job} is gone and not reported collected"),
                    ));
                } else if !finished {
                    out.push(v(
                        Check::Submissions,
                        format!("acknowledged {job} was collected before it finished"),
                    ));
                }
                collected.push(*job);
            }
        }
    }
    for j in collected {
        model.acknowledged.remove(&j);
        model.collected.insert(j);
    }
    out
}

/// Snapshot → restore gives the same state (derived parts included) and the same hash.
pub fn check_round_trip(s: &ClusterState) -> Vec<Violation> {
    let bytes = s.to_bytes();
    // `state_hash` is FNV-1a of exactly these bytes.
    let hash = fnv1a64(&bytes);
    match ClusterState::from_bytes(&bytes) {
        Err(e) => vec![v(
            Check::RoundTrip,
            format!("snapshot does not restore: {e}"),
        )],
        // Equal states serialise alike, so their hashes agree: only a difference is hashed.
        Ok(r) if r == *s => Vec::new(),
        Ok(r) => {
            let restored = r.state_hash();
            let what = if restored != hash {
                format!("state hash {hash:#x} restores as {restored:#x}")
            } else {
                "the restored state differs from the snapshotted one in its derived parts".into()
            };
            vec![v(Check::RoundTrip, what)]
        }
    }
}

/// S1 admission of a job just submitted: each task holds its user's quota at the entry's
/// priority or holds none at the base priority, those holding it come first, and what every
/// principal holds stays within its quota.
pub fn check_admission(s: &ClusterState, outcome: &Outcome) -> Vec<Violation> {
    let (Outcome::Submitted { job, tasks } | Outcome::SubmittedPlaced { job, tasks, .. }) = outcome
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // A retried request answers with the first outcome: only a job applied now was admitted now.
    let Some(j) = s.job(*job).filter(|j| j.submitted_index == s.last_index()) else {
        return out;
    };
    let cfg = s.priority();
    let partition = partition_of(&j.spec);
    let entry = cfg.resolve(&j.spec.user, partition);
    let mut base_seen = false;
    for tid in tasks {
        let Some(t) = s.task(*tid) else { continue };
        match (&t.quota, &entry) {
            (Some(who), Some(e)) if who == e.who && t.priority == e.priority && !base_seen => {}
            (None, _) if t.priority == cfg.base_priority => base_seen = true,
            _ => out.push(v(
                Check::Quota,
                format!(
                    "{tid} admitted at priority {} holding {:?} (entry {:?}, base {})",
                    t.priority,
                    t.quota,
                    entry.as_ref().map(|e| (e.who, e.priority)),
                    cfg.base_priority
                ),
            )),
        }
    }
    let holders: BTreeSet<&Principal> = tasks
        .iter()
        .filter_map(|t| s.task(*t).and_then(|t| t.quota.as_ref()))
        .collect();
    for who in holders {
        let Some(e) = entry.as_ref().filter(|e| e.who == who) else {
            continue;
        };
        let (mut cpu, mut mem, mut gpu) = (0u64, 0u64, 0u64);
        for t in s.tasks().values() {
            if t.status.state.is_final() || t.quota.as_ref() != Some(who) {
                continue;
            }
            let Some(tj) = s
                .job(t.job)
                .filter(|tj| partition_of(&tj.spec) == partition)
            else {
                continue;
            };
            cpu += tj.spec.resources.cpu_milli;
            mem += tj.spec.resources.mem_mib;
            gpu += tj.spec.resources.gpu.total_milli();
        }
        let over = |limit: Option<u64>, used: u64| limit.is_some_and(|l| used > l);
        if over(e.quota.cpu_milli, cpu)
            || over(e.quota.mem_mib, mem)
            || over(e.quota.gpu_milli, gpu)
        {
            out.push(v(
                Check::Quota,
                format!(
                    "{who} holds cpu {cpu} mem {mem} gpu {gpu} in {partition:?}, over {:?}",
                    e.quota
                ),
            ));
        }
    }
    out
}

/// Whether a command may legitimately change the state while answering `Ignored`.
fn ignored_may_change(c: &Command) -> bool {
    matches!(
        c,
        Command::Bench { .. } | Command::SetPriorityConfig { .. } | Command::RecordProfile { .. }
    )
}

/// The replicated parts a refused command must leave alone.
fn same_parts(a: &ClusterState, b: &ClusterState) -> Option<&'static str> {
    if a.nodes() != b.nodes() {
        return Some("nodes");
    }
    if a.tasks() != b.tasks() {
        return Some("tasks");
    }
    if a.jobs() != b.jobs() {
        return Some("jobs");
    }
    if a.pending() != b.pending() {
        return Some("pending set");
    }
    if a.awaiting() != b.awaiting() {
        return Some("awaiting preemptors");
    }
    if a.cpu_history() != b.cpu_history() || a.priority() != b.priority() {
        return Some("cpu history or priority");
    }
    None
}

/// A refused or ignored command changed nothing; an outcome agrees with the state it left.
pub fn check_step(
    before: &ClusterState,
    after: &ClusterState,
    command: &Command,
    outcome: &Outcome,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let refused = match outcome {
        Outcome::Rejected(_) => true,
        Outcome::Ignored(_) => !ignored_may_change(command),
        Outcome::PlanApplied {
            accepted,
            preempted,
            ..
        } => accepted.is_empty() && preempted.is_empty(),
        _ => false,
    };
    if refused {
        if let Some(what) = same_parts(before, after) {
            out.push(v(
                Check::Unchanged,
                format!("{outcome:?} but the {what} changed"),
            ));
        }
    }
    if let (
        Command::SubmitPlaced { place, .. },
        Outcome::SubmittedPlaced {
            job,
            tasks,
            accepted,
            rejected,
        },
    ) = (command, outcome)
    {
        // Each placement is accepted or refused, and only the job's own tasks are placed.
        if accepted.len() + *rejected as usize != place.len() {
            out.push(v(
                Check::Outcome,
                format!(
                    "{} accepted and {rejected} refused of {} placements",
                    accepted.len(),
                    place.len()
                ),
            ));
        }
        for r in accepted {
            let ok = tasks.contains(&r.task)
                && after.task(r.task).is_some_and(|t| {
                    t.job == *job
                        && t.status.node == Some(r.node)
                        && t.status.attempt == r.attempt
                        && t.status.state == TaskState::Assigned
                });
            if !ok {
                out.push(v(
                    Check::Outcome,
                    format!("placed {r:?} is not an assigned task of {job}"),
                ));
            }
        }
        // Tasks that existed before are left alone.
        for (id, t) in before.tasks() {
            if after.task(*id) != Some(t) {
                out.push(v(
                    Check::Outcome,
                    format!("{id} changed though the submission was of {job}"),
                ));
            }
        }
    }
    if let (
        Command::ApplyPlan(plan),
        Outcome::PlanApplied {
            accepted,
            rejected,
            preempted,
        },
    ) = (command, outcome)
    {
        // Each assignment is accepted or refused; each preemption preempts or is refused.
        let refusable = plan.preempt.len() + plan.assignments.len();
        if accepted.len() + *rejected as usize > refusable {
            out.push(v(
                Check::Outcome,
                format!(
                    "{} accepted and {rejected} refused of {refusable} decisions",
                    accepted.len()
                ),
            ));
        }
        for r in accepted {
            let ok = after.task(r.task).is_some_and(|t| {
                t.status.node == Some(r.node)
                    && t.status.attempt == r.attempt
                    && t.status.state == TaskState::Assigned
            });
            if !ok {
                out.push(v(
                    Check::Outcome,
                    format!("accepted {r:?} is not in the state"),
                ));
            }
        }
        for r in preempted {
            let stopping = after.node(r.node).is_some_and(|n| {
                n.stopping
                    .iter()
                    .any(|s| s.task == r.task && s.attempt == r.attempt)
            });
            if !stopping {
                out.push(v(
                    Check::Outcome,
                    format!("preempted {r:?} is not stopping"),
                ));
            }
        }
        // Only the placed and the preempted tasks may change.
        let touched: BTreeSet<TaskId> = accepted
            .iter()
            .chain(preempted.iter())
            .map(|r| r.task)
            .collect();
        for (id, t) in after.tasks() {
            if !touched.contains(id) && before.task(*id) != Some(t) {
                out.push(v(
                    Check::Outcome,
                    format!("{id} changed though the plan neither placed nor preempted it"),
                ));
            }
        }
    }
    out
}
