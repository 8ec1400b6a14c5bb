//! `hetsched bench placement --placement-threads 1,2,...` — S4.7: whole plans of the
//! master's scheduler (`IndexedScheduler`, every stage of the chain) over a seeded random
//! cluster and backlog, with the placeable tasks dealt to `--placement-groups` groups and
//! their selection run on each thread count given, against one group on one thread (the
//! baseline, the same run).
//!
//! Each figure is the fastest of `ROUNDS` plans, each by a fresh scheduler (rebuilt from the
//! state, views included, before the clock starts) over the same state: one plan of every
//! pending task (`max_per_plan` lifted). Rates are per wall-clock second (the point is
//! several threads); the machines are shared, so compare ratios within one run.

use hetsched_common::{JobSpec, ResourceRequest};
use hetsched_master_core::sched::index::{workload, PolicyKind};
use hetsched_master_core::sched::{IndexedScheduler, ParallelConfig, Scheduler};
use hetsched_master_core::state::{ClusterState, Command, CommandEnvelope, Plan};
use std::time::{Duration, Instant};

/// Plans timed per configuration (the fastest counts).
const ROUNDS: usize = 3;
/// Tasks per submitted job (each job asks one request of the stream).
const PER_JOB: usize = 10;

/// What one configuration measured.
struct Figures {
    groups: u32,
    threads: u32,
    placed: usize,
    best: Duration,
    proposed: u64,
    taken: u64,
}

/// The state: `nodes` random nodes and `tasks` pending tasks from the seeded stream.
fn state(nodes: usize, tasks: usize, seed: u64) -> anyhow::Result<ClusterState> {
    let w = workload::random(nodes, tasks, seed);
    let mut s = ClusterState::new();
    let mut i = 0u64;
    let mut apply = |s: &mut ClusterState, command: Command| {
        i += 1;
        s.apply(
            i,
            CommandEnvelope {
                at_ms: 0,
                request: None,
                command,
            },
        )
    };
    for (id, cap) in &w.nodes {
        apply(
            &mut s,
            Command::RegisterNode {
                key: id.0,
                node: None,
                name: format!("n{}", id.0),
                addr: String::new(),
                capacity: cap.clone(),
                labels: Default::default(),
                partitions: Vec::new(),
            },
        );
    }
    anyhow::ensure!(!w.requests.is_empty(), "the stream asks nothing");
    let jobs = tasks.div_ceil(PER_JOB);
    for j in 0..jobs {
        let resources: ResourceRequest = w.requests[j % w.requests.len()].clone();
        let count = PER_JOB.min(tasks - j * PER_JOB) as u32;
        let spec = JobSpec {
            user: format!("u{}", j % 8),
            resources,
            count,
            command: vec!["true".into()],
            ..Default::default()
        };
        apply(&mut s, Command::SubmitJob { spec });
    }
    Ok(s)
}

/// The fastest of `ROUNDS` plans under `policy` split as `cfg`.
fn measure(s: &ClusterState, policy: PolicyKind, seed: u64, cfg: ParallelConfig) -> Figures {
    let mut best = Duration::MAX;
    let mut last: Option<(Plan, (u64, u64))> = None;
    for _ in 0..ROUNDS {
        let mut sched = IndexedScheduler::new(policy, seed).with_parallel(cfg);
        sched.max_per_plan = usize::MAX;
        sched.reset(s);
        let t0 = Instant::now();
        let plan = sched.plan(s);
        best = best.min(t0.elapsed());
        last = Some((plan, sched.proposals()));
    }
    let (plan, (proposed, taken)) = last.unwrap_or_default();
    Figures {
        groups: cfg.groups,
        threads: cfg.threads,
        placed: plan.assignments.len(),
        best,
        proposed,
        taken,
    }
}

/// Runs the plan benchmark: one group on one thread, then `groups` on each of `threads`.
pub fn run(
    nodes: usize,
    tasks: usize,
    policy: PolicyKind,
    seed: u64,
    threads: &[u32],
    groups: Option<u32>,
    json: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(nodes > 0, "--nodes must be at least 1");
    anyhow::ensure!(
        !threads.is_empty(),
        "--placement-threads needs at least one count"
    );
    let groups = groups.unwrap_or_else(|| threads.iter().copied().max().unwrap_or(1));
    eprintln!(
        "bench placement (plans): {nodes} nodes, {tasks} tasks, policy {policy}, seed {seed}, \
         {groups} groups on {threads:?} threads, {} cores available",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let s = state(nodes, tasks, seed)?;
    let base = measure(&s, policy, seed, ParallelConfig::default());
    let mut all = vec![base];
    for &t in threads {
        all.push(measure(
            &s,
            policy,
            seed,
            ParallelConfig { groups, threads: t },
        ));
    }
    let rate = |f: &Figures| f.placed as f64 / f.best.as_secs_f64().max(1e-9);
    let base_rate = rate(&all[0]);
    let rows: Vec<serde_json::Value> = all
        .iter()
        .map(|f| {
            let taken_share = match f.proposed {
                0 => 0.0,
                p => f.taken as f64 / p as f64,
            };
            eprintln!(
                "groups {} threads {}: placed {} in {:.3} s: {:.0}/s ({:.2}× one group); \
                 proposals {} taken {}",
                f.groups,
                f.threads,
                f.placed,
                f.best.as_secs_f64(),
                rate(f),
                rate(f) / base_rate,
                f.proposed,
                f.taken
            );
            serde_json::json!({
                "groups": f.groups,
                "threads": f.threads,
                "placed": f.placed,
                "plan_s": f.best.as_secs_f64(),
                "placements_per_sec": rate(f),
                "ratio": rate(f) / base_rate,
                "proposals": f.proposed,
                "proposals_taken_share": taken_share,
            })
        })
        .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({ "nodes": nodes, "tasks": tasks, "policy": policy.name(), "runs": rows })
        );
    } else {
        for f in &all {
            println!(
                "groups {} threads {}: {:.0} placements/s, {:.2}× one group, placed {}",
                f.groups,
                f.threads,
                rate(f),
                rate(f) / base_rate,
                f.placed
            );
        }
    }
    Ok(())
}
