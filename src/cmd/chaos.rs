//! `hetsched chaos run`: starts a local cluster of real processes (job GC off, admin listeners
//! on) — or, with `--attach --masters`, uses running masters through their admin listeners —
//! drives a seeded workload across users of different priorities (command tasks that append
//! `TASK ATTEMPT` to a side-effect file, and API programs), injects a seeded schedule of faults
//! (kill -9 / restart, SIGSTOP / SIGCONT, Raft partitions and delays through the admin port's
//! transport faults; attached: the request-based ones only), heals, lets the cluster settle,
//! exports every master's committed log through the admin port, and hands the recorded
//! history, final state and logs to the checker in `hetsched-chaos`.
//! Exit 0: no violation; 1: violations (the run directory is kept and the replay command
//! printed); 2: bad arguments (and `--netns` where network namespaces cannot be used).

use super::client::{block_on, call};
use super::exit;
use super::local::{kill_tasks_under, LocalCluster, SlaveSpec};
use anyhow::Context;
use hetsched_chaos::history::{parse_side_effects, Event, FinalState, FinalTask, MasterView};
use hetsched_chaos::replay::{LogItem, MasterLog};
use hetsched_chaos::report::{Report, TimelineEntry};
use hetsched_chaos::{check, FaultKind, PlannedFault, Scenario};
use hetsched_common::protocol::{BugSpec, ClientRequest, ClientResponse, FaultSpec, ListFilter};
use hetsched_common::rng::SplitMix64;
use hetsched_common::{ClientRequestId, JobSpec, MasterId, ResourceRequest};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `hetsched chaos` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ChaosCommand {
    /// Run a scenario against a fresh local cluster (or running masters: --attach) and check
    /// the history and every master's committed log.
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
    /// Use running masters (`--masters`) instead of starting a local cluster: the workload and
    /// the request-based faults (partitions, delays) only; process faults are skipped and
    /// counted in the report. The run directory must be readable by this tool and writable by
    /// the cluster's tasks at the same path (the side-effect file lives there).
    #[arg(long, requires = "masters")]
    pub attach: bool,
    /// With `--attach`: the masters' ADMIN addresses (`master --admin HOST:PORT`), every
    /// master of the cluster. Faults, the log export and the workload all go through them.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "HOST:PORT,...",
        requires = "attach"
    )]
    pub masters: Vec<String>,
    /// Real partitions between network namespaces made for the run (root, iproute2 and
    /// iptables). Exits 2 with the reason where they cannot be used.
    #[arg(long, conflicts_with = "attach")]
    pub netns: bool,
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
    /// The local cluster; `None` when attached to running masters.
    cluster: Option<LocalCluster>,
    /// Masters' admin addresses, master id order (index i is master i + 1).
    admin_addrs: Vec<String>,
}

impl Nemesis {
    fn proc_mut(&mut self, t: Target) -> Option<&mut super::local::LocalProc> {
        let c = self.cluster.as_mut()?;
        match t {
            Target::Master(i) => c.masters.get_mut(i),
            Target::Slave(i) => c.slaves.get_mut(i),
        }
    }
    fn name(&self, t: Target) -> String {
        match t {
            Target::Master(i) => format!("master-{}", i + 1),
            Target::Slave(i) => format!("slave-{}", i + 1),
        }
    }
    fn signal(&mut self, t: Target, sig: nix::sys::signal::Signal) {
        if let Some(pid) = self.proc_mut(t).and_then(|p| p.pid()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
    fn kill9(&mut self, t: Target) {
        if let Some(p) = self.proc_mut(t) {
            p.kill9();
        }
    }
    fn restart(&mut self, t: Target) {
        let name = self.name(t);
        if let Some(p) = self.proc_mut(t) {
            if let Err(e) = p.restart() {
                tracing::warn!("restart {name}: {e}");
            }
        }
    }
    fn n_masters(&self) -> usize {
        self.admin_addrs.len()
    }
    fn n_slaves(&self) -> usize {
        self.cluster.as_ref().map_or(0, |c| c.slaves.len())
    }
    async fn set_faults(&self, master: usize, spec: FaultSpec) {
        let addr = [self.admin_addrs[master].clone()];
        let req = call(&addr, ClientRequest::SetFaults(spec), true);
        match tokio::time::timeout(Duration::from_secs(2), req).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("set faults on master-{}: {e}", master + 1),
            Err(_) => tracing::warn!("set faults on master-{}: no answer in 2 s", master + 1),
        }
    }
    async fn clear_faults(&self) {
        for i in 0..self.n_masters() {
            self.set_faults(i, FaultSpec::default()).await;
        }
    }

    /// Injects one fault; returns what it did and how to undo it.
    async fn inject(&mut self, f: &PlannedFault, leader: Option<usize>) -> (String, Undo) {
        use nix::sys::signal::Signal;
        let n_masters = self.n_masters();
        let followers: Vec<usize> = (0..n_masters).filter(|i| Some(*i) != leader).collect();
        let pick = |v: &[usize]| v.get((f.pick % v.len().max(1) as u64) as usize).copied();
        let leader_or_any = leader.unwrap_or((f.pick % n_masters as u64) as usize);
        let slave = (f.pick % self.n_slaves().max(1) as u64) as usize;
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
                self.kill9(Target::Master(m));
                (
                    format!("{kind}: kill -9 master-{}", m + 1),
                    Undo::Restart(Target::Master(m)),
                )
            }
            FaultKind::KillSlave => {
                let t = Target::Slave(slave);
                self.kill9(t);
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
                    self.kill9(Target::Master(m));
                    self.restart(Target::Master(m));
                    wait_leader(&self.admin_addrs, Duration::from_secs(20)).await;
                }
                (
                    format!("{kind}: each of {n_masters} masters killed and restarted"),
                    Undo::Nothing,
                )
            }
        }
    }

    async fn isolate(&self, m: usize, seed: u64) {
        let n = self.n_masters();
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
                self.restart(t);
                Some(format!("heal: restart {}", self.name(t)))
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

/// Samples every master's view (leadership claims) and the leader's task listing; `ours`
/// (attached) keeps only the tasks of the jobs this run submitted.
async fn observe(
    masters: &[String],
    rec: &Recorder,
    last: &mut BTreeMap<u64, (String, u32)>,
    ours: Option<&BTreeSet<u64>>,
) {
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
            if ours.is_some_and(|o| !o.contains(&t.job_id.0)) {
                continue;
            }
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
}

/// Jobs this run's submits were acknowledged with.
fn acked_jobs(rec: &Recorder) -> BTreeSet<u64> {
    rec.events
        .lock()
        .map(|v| {
            v.iter()
                .filter_map(|e| match e {
                    Event::Ack { job, .. } => Some(*job),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Jobs whose name starts with `prefix` (this run's, including submits whose answer was lost).
async fn jobs_named(masters: &[String], prefix: &str) -> BTreeSet<u64> {
    let req = ClientRequest::Jobs {
        stale: false,
        filter: ListFilter::default(),
    };
    match call_within(masters, req, Duration::from_secs(10)).await {
        Some(ClientResponse::Jobs(jobs)) => jobs
            .into_iter()
            .filter(|j| j.name.starts_with(prefix))
            .map(|j| j.id.0)
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// Reads one master's whole applied log through its admin listener, page by page.
async fn export_log(admin: &str, master: u64) -> anyhow::Result<MasterLog> {
    let addr = [admin.to_string()];
    let mut from = 1u64;
    let mut items = Vec::new();
    // A bound on pages, so a master that never reaches the end cannot hold the run forever.
    for _ in 0..100_000 {
        let req = ClientRequest::ExportLog { from, max_bytes: 0 };
        let page = match tokio::time::timeout(Duration::from_secs(10), call(&addr, req, true)).await
        {
            Ok(Ok(ClientResponse::LogPage(p))) => p,
            Ok(Ok(other)) => anyhow::bail!("unexpected answer: {}", super::client::short(&other)),
            Ok(Err(e)) => return Err(e),
            Err(_) => anyhow::bail!("no answer within 10 s"),
        };
        if let Some(snap) = page.snapshot {
            items.push(LogItem::Snapshot {
                index: snap.index,
                state: snap.state.into_vec(),
            });
        }
        items.extend(page.entries.into_iter().map(|e| LogItem::Command {
            index: e.index,
            bytes: e.command.into_vec(),
        }));
        if page.next > page.applied {
            return Ok(MasterLog { master, items });
        }
        if page.next <= from {
            anyhow::bail!("the export did not move past index {from}");
        }
        from = page.next;
    }
    anyhow::bail!("more than 100000 pages")
}

fn task_state(s: &hetsched_common::TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The workload's users and the S1 priorities a local run configures for them (carol has no
/// entry: the base priority 0), so that alice's jobs may preempt bob's and carol's.
const USERS: [(&str, Option<i64>); 3] = [("alice", Some(10)), ("bob", Some(5)), ("carol", None)];

/// The priority configuration of a local run's workload.
fn workload_priorities() -> hetsched_common::priority::PriorityConfig {
    use hetsched_common::priority::{Principal, PriorityConfig, PriorityEntry, Quota};
    PriorityConfig {
        entries: USERS
            .iter()
            .filter_map(|(user, p)| {
                p.map(|priority| PriorityEntry {
                    who: Principal::User(user.to_string()),
                    partition: "default".into(),
                    priority,
                    quota: Quota::default(),
                })
            })
            .collect(),
        ..Default::default()
    }
}

/// One seeded job of the workload: a command job whose tasks append `TASK ATTEMPT` to the
/// side-effect file, or (a `program_share` of them) an API program of sha256 and sort calls.
/// Named `{tag}-{n}` so an attached run can tell its jobs from the cluster's others.
fn workload_job(rng: &mut SplitMix64, sc: &Scenario, effects: &Path, tag: &str, n: u64) -> JobSpec {
    let count = 1 + rng.below(u64::from(sc.max_tasks_per_job)) as u32;
    let user = USERS[rng.below(USERS.len() as u64) as usize].0;
    let cpu_milli = 250 + 250 * rng.below(4);
    // Draws in a fixed order whatever the job kind, so the seed replays the same workload.
    let program_draw = rng.below(1000);
    let data_seed = rng.next_u64();
    let mut spec = JobSpec {
        name: format!("{tag}-{n}"),
        user: user.into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli,
            mem_mib: 32,
            ..Default::default()
        },
        count,
        ..Default::default()
    };
    if (program_draw as f64) < sc.program_share * 1000.0 {
        use hetsched_common::program::{Api, ApiCall, Program};
        spec.program = Some(Program {
            calls: vec![
                ApiCall::new(Api::Sha256, 1 << 16, data_seed),
                ApiCall::new(Api::Sort, 1 << 12, data_seed),
            ],
        });
    } else {
        let secs = sc.task_time.as_secs_f64();
        let script = format!(
            "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> '{}'; sleep {secs:.2}",
            effects.display()
        );
        spec.command = vec!["sh".into(), "-c".into(), script];
    }
    spec
}

async fn submit(masters: Vec<String>, rec: Recorder, op: u64, request: u64, spec: JobSpec) {
    let program = spec.program.is_some();
    rec.push(Event::Invoke {
        t_ms: rec.now_ms(),
        op,
        what: format!(
            "submit {} user={} count={}{}",
            spec.name,
            spec.user,
            spec.count,
            if program { " program" } else { "" }
        ),
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
            program,
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
                preemptions: t.preemptions,
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
    if a.netns {
        return Err(exit::bad_input(netns_unavailable()));
    }
    if a.attach && a.masters.iter().all(|m| m.trim().is_empty()) {
        return Err(exit::bad_input(
            "--attach needs --masters with the masters' admin addresses (HOST:PORT,...)",
        ));
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
        "chaos {}: seed {seed}, run directory {}{}",
        sc.name,
        dir.display(),
        if a.attach {
            format!(", attached to {}", a.masters.join(","))
        } else {
            String::new()
        }
    );
    // Client calls give up sooner than the default, so that a call stalled by a fault does not
    // hold up the nemesis; set before any thread exists.
    if std::env::var_os("HETSCHED_CLIENT_TIMEOUT_MS").is_none() {
        std::env::set_var("HETSCHED_CLIENT_TIMEOUT_MS", "8000");
    }
    let report = match block_on(drive(&a, &sc, seed, &dir))? {
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
    let mut replay = format!(
        "hetsched chaos run --scenario {} --seed {seed} --duration {}",
        a.scenario,
        humantime::format_duration(a.duration)
    );
    if a.attach {
        replay.push_str(&format!(" --attach --masters {}", a.masters.join(",")));
    }
    if let Some(bug) = &a.bug {
        replay.push_str(&format!(" --bug {bug}"));
    }
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

/// Why `--netns` cannot be used here. Real partitions need root, `ip` (iproute2) and
/// `iptables`; even where they are present this build has no namespace driver yet (the plan
/// is in the README's chaos section), so the answer is always a reason.
fn netns_unavailable() -> String {
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    };
    let mut missing = Vec::new();
    // The owner of /proc/self is this process's effective user.
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if !root {
        missing.push("root".to_string());
    }
    for tool in ["ip", "iptables"] {
        if !on_path(tool) {
            missing.push(format!("`{tool}` on PATH"));
        }
    }
    if missing.is_empty() {
        "--netns: real partitions between network namespaces are not implemented in this build; \
         run without --netns (partitions go through the masters' admin ports)"
            .into()
    } else {
        format!(
            "--netns is not available on this machine: it needs {}; run without --netns \
             (partitions go through the masters' admin ports)",
            missing.join(", ")
        )
    }
}

/// The masters a run talks to: a fresh local cluster, or running ones (`--attach`).
struct Masters {
    /// The local cluster (`None` attached).
    cluster: Option<LocalCluster>,
    /// Where clients go: cluster addresses (local) or admin addresses (attached).
    client: Vec<String>,
    /// Admin addresses, index i is master i + 1.
    admin: Vec<String>,
}

async fn local_masters(sc: &Scenario, dir: &Path) -> anyhow::Result<Masters> {
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
    Ok(Masters {
        client: cluster.master_addrs.clone(),
        admin: cluster.admin_addrs.clone(),
        cluster: Some(cluster),
    })
}

/// Orders the attached masters' admin addresses by master id, which must run 1..=N: the fault
/// requests name masters by id and address them by position.
async fn attached_masters(addrs: &[String]) -> anyhow::Result<Masters> {
    let mut by_id = BTreeMap::new();
    // Masters that were just started may not listen yet: ask each for up to 15 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    for a in addrs {
        let s = loop {
            if let Some(s) = status_of(a).await {
                break s;
            }
            if Instant::now() > deadline {
                return Err(exit::unavailable(format!(
                    "--masters: {a} does not answer a status request (is it a master's admin \
                     listener, `master --admin HOST:PORT`?)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        if by_id.insert(s.master_id.0, a.clone()).is_some() {
            return Err(exit::bad_input(format!(
                "--masters: two addresses are master-{}",
                s.master_id.0
            )));
        }
    }
    let ids: Vec<u64> = by_id.keys().copied().collect();
    if ids != (1..=addrs.len() as u64).collect::<Vec<_>>() {
        return Err(exit::bad_input(format!(
            "--masters: give every master of the cluster, ids 1..={}; these are masters {ids:?}",
            addrs.len()
        )));
    }
    let admin: Vec<String> = by_id.into_values().collect();
    Ok(Masters {
        client: admin.clone(),
        admin,
        cluster: None,
    })
}

async fn drive(a: &RunArgs, sc: &Scenario, seed: u64, dir: &Path) -> anyhow::Result<Report> {
    let effects = dir.join("side-effects.txt");
    std::fs::write(&effects, b"").context("cannot create the side-effect file")?;
    let m = if a.attach {
        attached_masters(&a.masters).await?
    } else {
        local_masters(sc, dir).await?
    };
    let masters = m.client.clone();
    let mut nemesis = Nemesis {
        cluster: m.cluster,
        admin_addrs: m.admin,
    };
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
    // Every slave registered (attached: at least one is up).
    let want_nodes = if a.attach { 1 } else { sc.slaves as usize };
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(ClientResponse::Nodes(n)) =
            call(&masters, ClientRequest::Nodes { stale: false }, false).await
        {
            let up = n.iter().filter(|n| n.state == "up").count();
            if up >= want_nodes {
                break;
            }
        }
        if Instant::now() > end {
            anyhow::bail!("fewer than {want_nodes} slaves registered and up within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(bug) = &a.bug {
        let spec = BugSpec {
            ack_before_commit: bug == "ack-before-commit",
        };
        for admin in &nemesis.admin_addrs {
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
    let mut wl_rng = SplitMix64::new(seed ^ 0x3017_0ad5);
    if a.attach {
        rec.note("attached: the cluster's priority configuration is left as it is".into());
    } else {
        let req = ClientRequest::SetPriorityConfig {
            request: ClientRequestId(wl_rng.next_u64()),
            config: workload_priorities(),
        };
        match call(&masters, req, false).await {
            Ok(ClientResponse::PriorityConfig(_)) => {
                rec.note("priorities: alice 10, bob 5, carol 0 (base)".into())
            }
            Ok(other) => anyhow::bail!(
                "cannot set the workload's priorities: {}",
                super::client::short(&other)
            ),
            Err(e) => return Err(e.context("cannot set the workload's priorities")),
        }
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
        for admin in &nemesis.admin_addrs {
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
    let settle_end = Instant::now() + a.settle;
    let mut tasks = Vec::new();
    loop {
        observe(&masters, &rec, &mut last_seen, ours.as_ref()).await;
        let done = match final_tasks(&masters).await {
            Ok(mut t) => {
                if let Some(o) = &ours {
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
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    rec.note(format!(
        "settled: {} tasks, {} re-run (attempt > 1), {} preemptions",
        tasks.len(),
        tasks.iter().filter(|t| t.attempt > 1).count(),
        tasks.iter().map(|t| u64::from(t.preemptions)).sum::<u64>()
    ));
    let views = master_views(&masters, Duration::from_secs(20)).await;
    // Every master's committed log, replayed index by index (`over-commit`), and its state
    // hash compared with the master's own at the same index where they met.
    let mut replays = Vec::new();
    for (i, admin) in nemesis.admin_addrs.iter().enumerate() {
        let id = i as u64 + 1;
        match export_log(admin, id).await {
            Ok(log) => {
                let view = status_of(admin).await.map(|s| MasterView {
                    master: s.master_id.0,
                    applied_index: s.applied_index,
                    state_hash: s.state_hash,
                });
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
        faults_skipped,
        ops,
        tasks_completed,
        violations,
        timeline,
        run_dir: dir.display().to_string(),
    })
}
