//! `hetsched chaos run`: starts a local cluster of real processes (job GC off, admin listeners
//! on), drives a seeded workload of command tasks that append `TASK ATTEMPT` to a side-effect
//! file, injects a seeded schedule of faults (kill -9 / restart, SIGSTOP / SIGCONT, Raft
//! partitions and delays through the admin port's transport faults), heals, lets the cluster
//! settle, and hands the recorded history and final state to the checker in `hetsched-chaos`.
//! Exit 0: no violation; 1: violations (the run directory is kept and the replay command
//! printed); 2: bad arguments.

use super::client::{block_on, call};
use super::exit;
use super::local::{kill_tasks_under, LocalCluster, SlaveSpec};
use anyhow::Context;
use hetsched_chaos::history::{parse_side_effects, Event, FinalState, FinalTask, MasterView};
use hetsched_chaos::report::{Report, TimelineEntry};
use hetsched_chaos::{check, FaultKind, PlannedFault, Scenario};
use hetsched_common::protocol::{BugSpec, ClientRequest, ClientResponse, FaultSpec, ListFilter};
use hetsched_common::rng::SplitMix64;
use hetsched_common::{ClientRequestId, JobSpec, MasterId, ResourceRequest};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `hetsched chaos` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ChaosCommand {
    /// Run a scenario against a fresh local cluster and check the history.
    Run(RunArgs),
    /// List the built-in scenarios.
    Scenarios,
}

/// Arguments of `hetsched chaos run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// A built-in scenario name (see `hetsched chaos scenarios`) or a scenario TOML file.
    #[arg(long, value_name = "NAME|PATH")]
    pub scenario: String,
    /// Seed of the fault schedule and the workload (default: from the clock, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long faults are injected (`40s`).
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How long every task has to finish after heal (`60s`).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// Run directory (default: a fresh one under the system temp dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the run directory also when the run is clean.
    #[arg(long)]
    pub keep: bool,
    /// Switch on a deliberate bug in every master (admin port) to see the checker catch it:
    /// `ack-before-commit` (acknowledge submits that never commit: `acked-lost`).
    #[arg(long, value_name = "BUG", value_parser = ["ack-before-commit"])]
    pub bug: Option<String>,
    /// Print the report as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `chaos` subcommand.
pub fn run(c: ChaosCommand) -> anyhow::Result<()> {
    match c {
        ChaosCommand::Scenarios => {
            for (name, _) in hetsched_chaos::scenario::BUILTIN {
                let s = Scenario::builtin(name)
                    .context("built-in scenario")?
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("{name:<18} {}", s.description);
            }
            Ok(())
        }
        ChaosCommand::Run(a) => run_scenario(a),
    }
}

fn load_scenario(arg: &str) -> anyhow::Result<Scenario> {
    if let Some(s) = Scenario::builtin(arg) {
        return s.map_err(|e| exit::bad_input(e.to_string()));
    }
    let path = Path::new(arg);
    let text = std::fs::read_to_string(path).map_err(|_| {
        exit::bad_input(
            hetsched_chaos::ScenarioError::Unknown(arg.to_string(), Scenario::builtin_names())
                .to_string(),
        )
    })?;
    Scenario::parse(arg, &text).map_err(|e| exit::bad_input(e.to_string()))
}

/// The shared, timestamped history of one run.
#[derive(Clone)]
struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
    timeline: Arc<Mutex<Vec<TimelineEntry>>>,
}

impl Recorder {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    fn push(&self, e: Event) {
        if let Ok(mut v) = self.events.lock() {
            v.push(e);
        }
    }
    fn note(&self, event: String) {
        let t_ms = self.now_ms();
        tracing::info!("{event}");
        self.push(Event::Fault {
            t_ms,
            fault: event.clone(),
        });
        if let Ok(mut v) = self.timeline.lock() {
            v.push(TimelineEntry { t_ms, event });
        }
    }
}

/// What an injected fault changed, to undo at heal.
enum Undo {
    Restart(Target),
    Cont(Target),
    ClearFaults,
    Nothing,
}

#[derive(Clone, Copy, Debug)]
enum Target {
    Master(usize),
    Slave(usize),
}

struct Nemesis {
    cluster: LocalCluster,
}

impl Nemesis {
    fn proc_mut(&mut self, t: Target) -> &mut super::local::LocalProc {
        match t {
            Target::Master(i) => &mut self.cluster.masters[i],
            Target::Slave(i) => &mut self.cluster.slaves[i],
        }
    }
    fn name(&self, t: Target) -> String {
        match t {
            Target::Master(i) => self.cluster.masters[i].name.clone(),
            Target::Slave(i) => self.cluster.slaves[i].name.clone(),
        }
    }
    fn signal(&mut self, t: Target, sig: nix::sys::signal::Signal) {
        if let Some(pid) = self.proc_mut(t).pid() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
    async fn set_faults(&self, master: usize, spec: FaultSpec) {
        let addr = [self.cluster.admin_addrs[master].clone()];
        let req = call(&addr, ClientRequest::SetFaults(spec), true);
        match tokio::time::timeout(Duration::from_secs(2), req).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("set faults on master-{}: {e}", master + 1),
            Err(_) => tracing::warn!("set faults on master-{}: no answer in 2 s", master + 1),
        }
    }
    async fn clear_faults(&self) {
        for i in 0..self.cluster.masters.len() {
            self.set_faults(i, FaultSpec::default()).await;
        }
    }

    /// Injects one fault; returns what it did and how to undo it.
    async fn inject(&mut self, f: &PlannedFault, leader: Option<usize>) -> (String, Undo) {
        use nix::sys::signal::Signal;
        let n_masters = self.cluster.masters.len();
        let followers: Vec<usize> = (0..n_masters).filter(|i| Some(*i) != leader).collect();
        let pick = |v: &[usize]| v.get((f.pick % v.len().max(1) as u64) as usize).copied();
        let leader_or_any = leader.unwrap_or((f.pick % n_masters as u64) as usize);
        let slave = (f.pick % self.cluster.slaves.len() as u64) as usize;
        let kind = f.kind.name();
        match f.kind {
            FaultKind::KillLeader | FaultKind::KillFollower => {
                let m = if f.kind == FaultKind::KillLeader {
                    Some(leader_or_any)
                } else {
                    pick(&followers)
                };
                let Some(m) = m else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.cluster.masters[m].kill9();
                (
                    format!("{kind}: kill -9 master-{}", m + 1),
                    Undo::Restart(Target::Master(m)),
                )
            }
            FaultKind::KillSlave => {
                self.cluster.slaves[slave].kill9();
                let t = Target::Slave(slave);
                (
                    format!("{kind}: kill -9 {}", self.name(t)),
                    Undo::Restart(t),
                )
            }
            FaultKind::PauseFollower | FaultKind::PauseLeader | FaultKind::PauseSlave => {
                let t = match f.kind {
                    FaultKind::PauseLeader => Some(Target::Master(leader_or_any)),
                    FaultKind::PauseFollower => pick(&followers).map(Target::Master),
                    _ => Some(Target::Slave(slave)),
                };
                let Some(t) = t else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.signal(t, Signal::SIGSTOP);
                (format!("{kind}: SIGSTOP {}", self.name(t)), Undo::Cont(t))
            }
            FaultKind::PartitionLeader | FaultKind::PartitionMinority => {
                let m = if f.kind == FaultKind::PartitionLeader {
                    Some(leader_or_any)
                } else {
                    pick(&followers)
                };
                let Some(m) = m else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.isolate(m, f.pick).await;
                (
                    format!("{kind}: master-{} cut from every other master", m + 1),
                    Undo::ClearFaults,
                )
            }
            FaultKind::PartitionLink => {
                if n_masters < 2 {
                    return (format!("{kind}: no target"), Undo::Nothing);
                }
                let a = (f.pick % n_masters as u64) as usize;
                let b = (a + 1 + (f.pick / 7 % (n_masters as u64 - 1)) as usize) % n_masters;
                for (from, to) in [(a, b), (b, a)] {
                    let spec = FaultSpec {
                        seed: f.pick,
                        cut: vec![MasterId(to as u64 + 1)],
                        ..Default::default()
                    };
                    self.set_faults(from, spec).await;
                }
                (
                    format!("{kind}: link master-{} <-> master-{} cut", a + 1, b + 1),
                    Undo::ClearFaults,
                )
            }
            FaultKind::Delay => {
                let delay_ms = 20 + f.pick % 80;
                for m in 0..n_masters {
                    let spec = FaultSpec {
                        seed: f.pick,
                        delay_ms,
                        ..Default::default()
                    };
                    self.set_faults(m, spec).await;
                }
                (
                    format!("{kind}: {delay_ms} ms on every Raft message"),
                    Undo::ClearFaults,
                )
            }
            FaultKind::RollingRestart => {
                for m in 0..n_masters {
                    self.cluster.masters[m].kill9();
                    if let Err(e) = self.cluster.masters[m].restart() {
                        tracing::warn!("restart master-{}: {e}", m + 1);
                    }
                    wait_leader(&self.cluster.master_addrs, Duration::from_secs(20)).await;
                }
                (
                    format!("{kind}: each of {n_masters} masters killed and restarted"),
                    Undo::Nothing,
                )
            }
        }
    }

    async fn isolate(&self, m: usize, seed: u64) {
        let n = self.cluster.masters.len();
        self.set_faults(
            m,
            FaultSpec {
                seed,
                isolated: true,
                ..Default::default()
            },
        )
        .await;
        for o in (0..n).filter(|o| *o != m) {
            self.set_faults(
                o,
                FaultSpec {
                    seed,
                    cut: vec![MasterId(m as u64 + 1)],
                    ..Default::default()
                },
            )
            .await;
        }
    }

    async fn undo(&mut self, u: Undo) -> Option<String> {
        match u {
            Undo::Restart(t) => {
                let name = self.name(t);
                if let Err(e) = self.proc_mut(t).restart() {
                    tracing::warn!("restart {name}: {e}");
                }
                Some(format!("heal: restart {name}"))
            }
            Undo::Cont(t) => {
                self.signal(t, nix::sys::signal::Signal::SIGCONT);
                Some(format!("heal: SIGCONT {}", self.name(t)))
            }
            Undo::ClearFaults => {
                self.clear_faults().await;
                Some("heal: transport faults cleared".into())
            }
            Undo::Nothing => None,
        }
    }
}

/// One master's own status, or `None` if it does not answer within 1.5 s (killed, paused).
async fn status_of(addr: &str) -> Option<hetsched_common::protocol::StatusInfo> {
    let addrs = [addr.to_string()];
    let req = call(&addrs, ClientRequest::Status { stale: true }, true);
    match tokio::time::timeout(Duration::from_millis(1500), req).await {
        Ok(Ok(ClientResponse::Status(s))) => Some(s),
        _ => None,
    }
}

/// `call`, bounded by `limit` (a stalled call must not hold up the nemesis).
async fn call_within(
    masters: &[String],
    req: ClientRequest,
    limit: Duration,
) -> Option<ClientResponse> {
    match tokio::time::timeout(limit, call(masters, req, false)).await {
        Ok(Ok(r)) => Some(r),
        _ => None,
    }
}

/// The current leader's index, as any master answering says.
async fn leader_index(masters: &[String]) -> Option<usize> {
    for addr in masters {
        if let Some(s) = status_of(addr).await {
            if let Some(l) = s.leader {
                return (l.0 as usize).checked_sub(1).filter(|i| *i < masters.len());
            }
        }
    }
    None
}

async fn wait_leader(masters: &[String], limit: Duration) -> Option<usize> {
    let end = Instant::now() + limit;
    loop {
        if let Some(l) = leader_index(masters).await {
            return Some(l);
        }
        if Instant::now() > end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Samples every master's view (leadership claims) and the leader's tasks and node usage.
async fn observe(masters: &[String], rec: &Recorder, last: &mut BTreeMap<u64, (String, u32)>) {
    for addr in masters {
        if let Some(s) = status_of(addr).await {
            if s.role == "leader" {
                rec.push(Event::Leader {
                    t_ms: rec.now_ms(),
                    master: s.master_id.0,
                    term: s.term,
                });
            }
        }
    }
    let tasks_req = ClientRequest::Tasks {
        stale: false,
        job: None,
        filter: ListFilter::default(),
    };
    let limit = Duration::from_secs(3);
    if let Some(ClientResponse::Tasks(tasks)) = call_within(masters, tasks_req, limit).await {
        for t in tasks {
            let state = task_state(&t.state);
            let now = (state.clone(), t.attempt);
            if last.get(&t.id.0) != Some(&now) {
                rec.push(Event::Task {
                    t_ms: rec.now_ms(),
                    task: t.id.0,
                    job: t.job_id.0,
                    state,
                    attempt: t.attempt,
                });
                last.insert(t.id.0, now);
            }
        }
    }
    if let Some(ClientResponse::Nodes(nodes)) =
        call_within(masters, ClientRequest::Nodes { stale: false }, limit).await
    {
        for n in nodes {
            rec.push(Event::Usage {
                t_ms: rec.now_ms(),
                node: n.id.0,
                cpu_milli_used: n.capacity.cpu_milli.saturating_sub(n.free.cpu_milli),
                cpu_milli_capacity: n.capacity.cpu_milli,
            });
        }
    }
}

fn task_state(s: &hetsched_common::TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// One seeded job of the workload.
fn workload_job(rng: &mut SplitMix64, sc: &Scenario, effects: &Path, n: u64) -> JobSpec {
    let count = 1 + rng.below(u64::from(sc.max_tasks_per_job)) as u32;
    let users = ["alice", "bob", "carol"];
    let user = users[rng.below(users.len() as u64) as usize];
    let secs = sc.task_time.as_secs_f64();
    let script = format!(
        "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> '{}'; sleep {secs:.2}",
        effects.display()
    );
    JobSpec {
        name: format!("chaos-{n}"),
        user: user.into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: 250 + 250 * rng.below(4),
            mem_mib: 32,
            ..Default::default()
        },
        count,
        command: vec!["sh".into(), "-c".into(), script],
        ..Default::default()
    }
}

async fn submit(masters: Vec<String>, rec: Recorder, op: u64, request: u64, spec: JobSpec) {
    rec.push(Event::Invoke {
        t_ms: rec.now_ms(),
        op,
        what: format!("submit {} count={}", spec.name, spec.count),
    });
    let req = ClientRequest::Submit {
        request: ClientRequestId(request),
        spec,
    };
    match call(&masters, req, false).await {
        Ok(ClientResponse::Submitted { job, tasks }) => rec.push(Event::Ack {
            t_ms: rec.now_ms(),
            op,
            job: job.0,
            tasks: tasks.iter().map(|t| t.0).collect(),
        }),
        Ok(other) => rec.push(Event::Fail {
            t_ms: rec.now_ms(),
            op,
            error: super::client::short(&other),
        }),
        Err(e) => rec.push(Event::Fail {
            t_ms: rec.now_ms(),
            op,
            error: e.to_string(),
        }),
    }
}

async fn final_tasks(masters: &[String]) -> anyhow::Result<Vec<FinalTask>> {
    match call(
        masters,
        ClientRequest::Tasks {
            stale: false,
            job: None,
            filter: ListFilter::default(),
        },
        false,
    )
    .await?
    {
        ClientResponse::Tasks(t) => Ok(t
            .into_iter()
            .map(|t| FinalTask {
                task: t.id.0,
                job: t.job_id.0,
                state: task_state(&t.state),
                attempt: t.attempt,
            })
            .collect()),
        other => anyhow::bail!("unexpected answer: {}", super::client::short(&other)),
    }
}

/// Each master's applied index and hash, once they agree on the index (or `limit` passes).
async fn master_views(masters: &[String], limit: Duration) -> Vec<MasterView> {
    let end = Instant::now() + limit;
    loop {
        let mut views = Vec::new();
        for addr in masters {
            if let Some(s) = status_of(addr).await {
                views.push(MasterView {
                    master: s.master_id.0,
                    applied_index: s.applied_index,
                    state_hash: s.state_hash,
                });
            }
        }
        let agreed = views.len() == masters.len()
            && views
                .windows(2)
                .all(|w| w[0].applied_index == w[1].applied_index);
        if agreed || Instant::now() > end {
            return views;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn run_scenario(a: RunArgs) -> anyhow::Result<()> {
    let sc = load_scenario(&a.scenario)?;
    if a.duration.is_zero() {
        return Err(exit::bad_input("--duration: must be greater than 0"));
    }
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
        "chaos {}: seed {seed}, run directory {}",
        sc.name,
        dir.display()
    );
    // Client calls give up sooner than the default, so that a call stalled by a fault does not
    // hold up the nemesis; set before any thread exists.
    if std::env::var_os("HETSCHED_CLIENT_TIMEOUT_MS").is_none() {
        std::env::set_var("HETSCHED_CLIENT_TIMEOUT_MS", "8000");
    }
    let report = block_on(drive(&a, &sc, seed, &dir))??;
    kill_tasks_under(&dir);
    let replay = format!(
        "hetsched chaos run --scenario {} --seed {seed} --duration {}",
        a.scenario,
        humantime::format_duration(a.duration)
    );
    if a.json {
        super::print_json(&report)?;
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

async fn drive(a: &RunArgs, sc: &Scenario, seed: u64, dir: &Path) -> anyhow::Result<Report> {
    let effects = dir.join("side-effects.txt");
    std::fs::write(&effects, b"").context("cannot create the side-effect file")?;
    let slaves: Vec<SlaveSpec> = (0..sc.slaves)
        .map(|_| SlaveSpec {
            cpus: sc.slave_cpus,
            mem_mib: 4096,
            gpus: 0,
            extra_args: Vec::new(),
        })
        .collect();
    let cluster = LocalCluster::start_with(
        dir,
        sc.masters,
        &["--job-gc-after".to_string(), "off".to_string()],
        &slaves,
    )?;
    let masters = cluster.master_addrs.clone();
    let mut nemesis = Nemesis { cluster };
    let rec = Recorder {
        start: Instant::now(),
        events: Arc::new(Mutex::new(Vec::new())),
        timeline: Arc::new(Mutex::new(Vec::new())),
    };
    if wait_leader(&masters, Duration::from_secs(60))
        .await
        .is_none()
    {
        anyhow::bail!("no leader within 60 s (logs in {})", dir.display());
    }
    // Every slave registered.
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(ClientResponse::Nodes(n)) =
            call(&masters, ClientRequest::Nodes { stale: false }, false).await
        {
            if n.len() as u32 >= sc.slaves {
                break;
            }
        }
        if Instant::now() > end {
            anyhow::bail!("the slaves did not register within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(bug) = &a.bug {
        let spec = BugSpec {
            ack_before_commit: bug == "ack-before-commit",
        };
        for admin in &nemesis.cluster.admin_addrs {
            call(
                std::slice::from_ref(admin),
                ClientRequest::SetBugs(spec.clone()),
                true,
            )
            .await
            .with_context(|| format!("cannot switch on the deliberate bug at {admin}"))?;
        }
        rec.note(format!("deliberate bug switched on: {bug}"));
    }
    let schedule = sc.schedule(seed, a.duration);
    rec.note(format!(
        "start: {} masters, {} slaves, {} faults planned",
        sc.masters,
        sc.slaves,
        schedule.len()
    ));
    let start = Instant::now();
    let mut wl_rng = SplitMix64::new(seed ^ 0x3017_0ad5);
    let gap = Duration::from_secs_f64(1.0 / sc.jobs_per_s);
    let mut next_submit = Duration::ZERO;
    let mut ops = 0u64;
    let mut submits = Vec::new();
    let mut pending: Vec<(Duration, Undo)> = Vec::new();
    let mut planned = schedule.into_iter().peekable();
    let mut faults_injected = 0u64;
    let mut last_seen = BTreeMap::new();
    let mut next_observe = Duration::ZERO;
    let progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    while start.elapsed() < a.duration {
        let now = start.elapsed();
        while next_submit <= now {
            ops += 1;
            let spec = workload_job(&mut wl_rng, sc, &dir.join("side-effects.txt"), ops);
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
            let leader = leader_index(&masters).await;
            let (what, undo) = nemesis.inject(&f, leader).await;
            faults_injected += 1;
            rec.note(what);
            pending.push((Duration::from_millis(f.at_ms + f.hold_ms), undo));
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
            observe(&masters, &rec, &mut last_seen).await;
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
    for s in submits {
        let _ = s.await;
    }
    // Settle: every acknowledged task finished.
    let settle_end = Instant::now() + a.settle;
    let mut tasks = Vec::new();
    loop {
        observe(&masters, &rec, &mut last_seen).await;
        let done = match final_tasks(&masters).await {
            Ok(t) => {
                tasks = t;
                tasks
                    .iter()
                    .all(|t| matches!(t.state.as_str(), "succeeded" | "failed" | "cancelled"))
            }
            Err(_) => false,
        };
        if done || Instant::now() > settle_end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    rec.note("settled".into());
    let views = master_views(&masters, Duration::from_secs(20)).await;
    // Tasks outlive their slaves by design: stop the run's before reading the side effects.
    kill_tasks_under(dir);
    let text = std::fs::read_to_string(&effects).unwrap_or_default();
    let side_effects =
        parse_side_effects(&text).map_err(|e| anyhow::anyhow!("{}: {e}", effects.display()))?;
    let end = FinalState {
        tasks,
        masters: views,
        side_effects,
        settle_s: a.settle.as_secs(),
    };
    let events = rec.events.lock().map(|v| v.clone()).unwrap_or_default();
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
    let timeline = rec.timeline.lock().map(|v| v.clone()).unwrap_or_default();
    drop(nemesis);
    Ok(Report {
        scenario: sc.name.clone(),
        seed,
        duration_s: a.duration.as_secs_f64(),
        faults_injected,
        ops,
        tasks_completed,
        violations,
        timeline,
        run_dir: dir.display().to_string(),
    })
}
