//! One chaos run from start to report: the run directory, the masters, the loop that submits
//! the workload and injects the planned faults while sampling the history, heal, settle, the
//! replay of every master's committed log, the check, and the printed report.

use super::super::client::{block_on, call, short};
use super::super::exit;
use super::super::local::kill_tasks_under;
use super::args::RunArgs;
use super::nemesis::{Nemesis, Undo};
use super::observe::{
    acked_jobs, export_log, final_tasks, jobs_named, leader_index, master_views, observe,
    status_of, view_of, Recorder,
};
use super::setup::{attached_masters, local_masters, wait_ready};
use super::workload::{
    submit, submit_chain, submit_flow, workload_flow, workload_job, workload_priorities,
};
use anyhow::Context;
use hetsched_chaos::history::{parse_side_effects, FinalState, FinalTask};
use hetsched_chaos::replay::Replayed;
use hetsched_chaos::report::Report;
use hetsched_chaos::{check, Scenario};
use hetsched_common::protocol::{BugSpec, ClientRequest, ClientResponse};
use hetsched_common::rng::SplitMix64;
use hetsched_common::ClientRequestId;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// `hetsched chaos run`: checks the flags, runs the scenario, prints the report; an error
/// (exit 1) when the checker found violations.
pub(super) fn run_scenario(a: RunArgs) -> anyhow::Result<()> {
    let sc = a.checked_scenario()?;
    let seed = a.seed.unwrap_or_else(hetsched_common::rng::clock_seed);
    let fresh = a.data_dir.is_none();
    let dir = a.data_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "hetsched-chaos-{}-{seed}-{}",
            sc.name,
            std::process::id()
        ))
    });
    if fresh {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    eprintln!(
        "chaos {}: seed {seed}, run directory {}{}",
        sc.name,
        dir.display(),
        if a.attach {
            format!(", attached to {}", a.masters.join(","))
        } else if a.netns {
            ", processes in network namespaces (real partitions)".to_string()
        } else {
            String::new()
        }
    );
    // Client calls give up sooner than the default, so that a call stalled by a fault does not
    // hold up the nemesis; set before any thread exists.
    if std::env::var_os("HETSCHED_CLIENT_TIMEOUT_MS").is_none() {
        std::env::set_var("HETSCHED_CLIENT_TIMEOUT_MS", "8000");
    }
    // Ctrl-C drops the run: the local cluster stops (and with --netns its namespaces go).
    let interruptible = async {
        tokio::select! {
            r = drive(&a, &sc, seed, &dir) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!(
                "interrupted; the run directory is kept: {}",
                dir.display()
            )),
        }
    };
    let report = match block_on(interruptible)? {
        Ok(r) => r,
        Err(e) => {
            // Attached, a fresh run directory holds no cluster logs worth keeping.
            if a.attach && fresh {
                let _ = std::fs::remove_dir_all(&dir);
            }
            return Err(e);
        }
    };
    if !a.attach {
        kill_tasks_under(&dir);
    }
    let replay = a.replay_command(seed);
    if a.json {
        super::super::print_json(&report)?;
    } else {
        print!("{}", report.text(&replay));
        std::io::stdout().flush()?;
    }
    if report.violations.is_empty() {
        if fresh && !a.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    } else {
        eprintln!("run directory kept: {}", dir.display());
        eprintln!("replay: {replay}");
        Err(exit::no(format!(
            "{} violation(s) of the history checker",
            report.violations.len()
        )))
    }
}

/// Switches the deliberate bug `bug` on in every master, through the admin ports.
async fn bug_on(admins: &[String], bug: &str) -> anyhow::Result<()> {
    let spec = BugSpec {
        ack_before_commit: bug == "ack-before-commit",
        skip_dependency_gate: bug == "skip-dependency-gate",
        ..BugSpec::default()
    };
    for admin in admins {
        call(
            std::slice::from_ref(admin),
            ClientRequest::SetBugs(spec.clone()),
            true,
        )
        .await
        .with_context(|| format!("cannot switch on the deliberate bug at {admin}"))?;
    }
    Ok(())
}

/// Switches every deliberate bug off in every master (5 s each; a warning where it fails).
async fn bug_off(admins: &[String]) {
    for admin in admins {
        let req = call(
            std::slice::from_ref(admin),
            ClientRequest::SetBugs(BugSpec::default()),
            true,
        );
        if !matches!(
            tokio::time::timeout(Duration::from_secs(5), req).await,
            Ok(Ok(_))
        ) {
            tracing::warn!("could not switch the deliberate bug off at {admin}");
        }
    }
}

/// Configures the workload's user priorities (a local run).
async fn set_priorities(
    masters: &[String],
    rec: &Recorder,
    wl_rng: &mut SplitMix64,
) -> anyhow::Result<()> {
    let req = ClientRequest::SetPriorityConfig {
        request: ClientRequestId(wl_rng.next_u64()),
        config: workload_priorities(),
    };
    match call(masters, req, false).await {
        Ok(ClientResponse::PriorityConfig(_)) => {
            rec.note("priorities: alice 10, bob 5, carol 0 (base)".into());
            Ok(())
        }
        Ok(other) => anyhow::bail!("cannot set the workload's priorities: {}", short(&other)),
        Err(e) => Err(e.context("cannot set the workload's priorities")),
    }
}

/// Polls until every task of `ours` (attached; local: every task) finished or `settle`
/// passed, sampling the history meanwhile; returns the last listing.
async fn settle(
    masters: &[String],
    rec: &Recorder,
    last_seen: &mut BTreeMap<u64, (String, u32)>,
    ours: Option<&BTreeSet<u64>>,
    settle: Duration,
) -> Vec<FinalTask> {
    let settle_end = Instant::now() + settle;
    let mut tasks = Vec::new();
    loop {
        observe(masters, rec, last_seen, ours).await;
        let done = match final_tasks(masters).await {
            Ok(mut t) => {
                if let Some(o) = ours {
                    t.retain(|t| o.contains(&t.job));
                }
                tasks = t;
                tasks
                    .iter()
                    .all(|t| matches!(t.state.as_str(), "succeeded" | "failed" | "cancelled"))
            }
            Err(_) => false,
        };
        if done || Instant::now() > settle_end {
            return tasks;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every master's committed log, replayed index by index (`over-commit`), and its state
/// hash compared with the master's own at the same index where they met.
async fn replay_logs(admins: &[String], rec: &Recorder) -> Vec<Replayed> {
    let mut replays = Vec::new();
    for (i, admin) in admins.iter().enumerate() {
        let id = i as u64 + 1;
        match export_log(admin, id).await {
            Ok(log) => {
                let view = status_of(admin).await.map(|s| view_of(&s));
                let r = hetsched_chaos::replay::replay(&log, view.as_ref());
                rec.note(format!(
                    "log of master-{id}: {} commands{} replayed to index {}",
                    r.commands,
                    if r.snapshots > 0 {
                        format!(" after {} snapshot(s)", r.snapshots)
                    } else {
                        String::new()
                    },
                    r.last_index
                ));
                replays.push(r);
            }
            Err(e) => rec.note(format!("log of master-{id}: not exported: {e}")),
        }
    }
    replays
}

async fn drive(a: &RunArgs, sc: &Scenario, seed: u64, dir: &Path) -> anyhow::Result<Report> {
    let effects = dir.join("side-effects.txt");
    std::fs::write(&effects, b"").context("cannot create the side-effect file")?;
    let m = if a.attach {
        attached_masters(&a.masters).await?
    } else {
        local_masters(sc, dir, a.netns).await?
    };
    let masters = m.client.clone();
    let mut nemesis = Nemesis {
        cluster: m.cluster,
        admin_addrs: m.admin,
    };
    let rec = Recorder::new();
    // Every slave registered (attached: at least one is up).
    let want_nodes = if a.attach { 1 } else { sc.slaves as usize };
    wait_ready(&masters, want_nodes, dir).await?;
    if let Some(bug) = &a.bug {
        bug_on(&nemesis.admin_addrs, bug).await?;
        rec.note(format!("deliberate bug switched on: {bug}"));
    }
    let mut wl_rng = SplitMix64::new(seed ^ 0x3017_0ad5);
    if a.attach {
        rec.note("attached: the cluster's priority configuration is left as it is".into());
    } else {
        set_priorities(&masters, &rec, &mut wl_rng).await?;
    }
    let schedule = sc.schedule(seed, a.duration);
    rec.note(format!(
        "start: {} masters, {} slaves, {} faults planned",
        nemesis.n_masters(),
        if a.attach {
            "attached".to_string()
        } else {
            sc.slaves.to_string()
        },
        schedule.len()
    ));
    // Job names carry a tag of this run (not of the seed: an attached cluster may see the
    // same seed twice).
    let tag = format!(
        "chaos-{:x}",
        hetsched_common::rng::clock_seed() & 0xffff_ffff
    );
    let start = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / sc.jobs_per_s);
    let mut next_submit = Duration::ZERO;
    let mut ops = 0u64;
    let mut submits = Vec::new();
    let mut pending: Vec<(Duration, Undo)> = Vec::new();
    let mut planned = schedule.into_iter().peekable();
    let mut faults_injected = 0u64;
    let mut faults_skipped = 0u64;
    let mut last_seen = BTreeMap::new();
    let mut next_observe = Duration::ZERO;
    let progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    while start.elapsed() < a.duration {
        let now = start.elapsed();
        while next_submit <= now {
            ops += 1;
            // Issue 51: drawn only where the scenario asks for chains, so that the seeds of
            // the others replay the same workload as before.
            let chain = sc.chain_share > 0.0
                && (wl_rng.below(1000) as f64) < sc.chain_share * 1000.0
                && sc.chain_length > 1;
            if chain {
                let first = ops;
                let mut specs = Vec::new();
                let mut requests = Vec::new();
                for k in 0..u64::from(sc.chain_length) {
                    specs.push(workload_job(&mut wl_rng, sc, &effects, &tag, first + k));
                    requests.push(wl_rng.next_u64());
                }
                ops += u64::from(sc.chain_length) - 1;
                submits.push(tokio::spawn(submit_chain(
                    masters.clone(),
                    rec.clone(),
                    first,
                    requests,
                    specs,
                )));
                next_submit += gap;
                continue;
            }
            // Issue 51: likewise drawn only where the scenario asks for flows.
            let flow = sc.flow_share > 0.0 && (wl_rng.below(1000) as f64) < sc.flow_share * 1000.0;
            if flow {
                let first = ops;
                let steps = u64::from(sc.flow_width) + 2;
                let specs = (0..steps)
                    .map(|k| workload_job(&mut wl_rng, sc, &effects, &tag, first + k))
                    .collect();
                let request = wl_rng.next_u64();
                ops += steps - 1;
                submits.push(tokio::spawn(submit_flow(
                    masters.clone(),
                    rec.clone(),
                    first,
                    request,
                    workload_flow(specs),
                )));
                next_submit += gap;
                continue;
            }
            let spec = workload_job(&mut wl_rng, sc, &effects, &tag, ops);
            let request = wl_rng.next_u64();
            submits.push(tokio::spawn(submit(
                masters.clone(),
                rec.clone(),
                ops,
                request,
                spec,
            )));
            next_submit += gap;
        }
        while planned
            .peek()
            .is_some_and(|f| Duration::from_millis(f.at_ms) <= now)
        {
            let Some(f) = planned.next() else { break };
            if a.attach && f.kind.is_process_fault() {
                faults_skipped += 1;
                rec.note(format!(
                    "{}: skipped (attached: process faults need a local cluster)",
                    f.kind.name()
                ));
                continue;
            }
            let leader = leader_index(&masters).await;
            match nemesis.inject(&f, leader).await {
                Ok((what, undo)) => {
                    faults_injected += 1;
                    rec.note(what);
                    pending.push((Duration::from_millis(f.at_ms + f.hold_ms), undo));
                }
                Err(why) => {
                    faults_skipped += 1;
                    rec.note(why);
                }
            }
        }
        let mut i = 0;
        while i < pending.len() {
            if pending[i].0 <= start.elapsed() {
                let (_, undo) = pending.remove(i);
                if let Some(what) = nemesis.undo(undo).await {
                    rec.note(what);
                }
            } else {
                i += 1;
            }
        }
        if next_observe <= now {
            let ours = a.attach.then(|| acked_jobs(&rec));
            observe(&masters, &rec, &mut last_seen, ours.as_ref()).await;
            next_observe = start.elapsed() + Duration::from_millis(1000);
        }
        if progress {
            eprint!(
                "\r[{:>4.0}/{:.0} s] {ops} ops, {faults_injected} faults   ",
                start.elapsed().as_secs_f64(),
                a.duration.as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if progress {
        eprintln!();
    }
    // Heal everything.
    for (_, undo) in pending.drain(..) {
        if let Some(what) = nemesis.undo(undo).await {
            rec.note(what);
        }
    }
    nemesis.clear_faults().await;
    rec.note("heal: every fault healed".into());
    if a.bug.is_some() {
        // An attached cluster outlives the run: it must not keep the deliberate bug.
        bug_off(&nemesis.admin_addrs).await;
        rec.note("deliberate bug switched off".into());
    }
    for s in submits {
        let _ = s.await;
    }
    // Attached: this run's jobs are those acknowledged and those named with its tag (a submit
    // whose answer was lost may still have created its job).
    let ours = if a.attach {
        let mut o = acked_jobs(&rec);
        o.extend(jobs_named(&masters, &format!("{tag}-")).await);
        Some(o)
    } else {
        None
    };
    // Settle: every acknowledged task finished.
    let tasks = settle(&masters, &rec, &mut last_seen, ours.as_ref(), a.settle).await;
    rec.note(format!(
        "settled: {} tasks, {} re-run (attempt > 1), {} preemptions",
        tasks.len(),
        tasks.iter().filter(|t| t.attempt > 1).count(),
        tasks.iter().map(|t| u64::from(t.preemptions)).sum::<u64>()
    ));
    let views = master_views(&masters, Duration::from_secs(20)).await;
    let replays = replay_logs(&nemesis.admin_addrs, &rec).await;
    // Tasks outlive their slaves by design: stop the run's before reading the side effects.
    if !a.attach {
        kill_tasks_under(dir);
    }
    let text = std::fs::read_to_string(&effects).unwrap_or_default();
    let side_effects =
        parse_side_effects(&text).map_err(|e| anyhow::anyhow!("{}: {e}", effects.display()))?;
    let end = FinalState {
        tasks,
        masters: views,
        side_effects,
        settle_s: a.settle.as_secs(),
        replays,
    };
    let events = rec.events();
    let violations = check(&events, &end);
    // The history and final state stay in the run directory.
    let mut hist = String::new();
    for e in &events {
        hist.push_str(&serde_json::to_string(e)?);
        hist.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), hist)?;
    std::fs::write(dir.join("final-state.json"), serde_json::to_string(&end)?)?;
    let tasks_completed = end.tasks.iter().filter(|t| t.state == "succeeded").count() as u64;
    let timeline = rec.timeline();
    drop(nemesis);
    Ok(Report {
        scenario: sc.name.clone(),
        seed,
        duration_s: a.duration.as_secs_f64(),
        faults_injected,
        faults_skipped,
        ops,
        tasks_completed,
        violations,
        timeline,
        run_dir: dir.display().to_string(),
    })
}
