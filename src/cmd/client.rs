//! Client commands: submit, cancel, status, jobs, tasks, nodes, members.
//!
//! Requests go to the masters in `--masters` order; a follower's `NotLeader` answer sends the
//! client to the leader it names; unreachable masters and elections are retried until a
//! deadline (`HETSCHED_CLIENT_TIMEOUT_MS`, default 15 s), after which the command exits 5. A
//! submit keeps one client request id across retries, so it applies at most once. Every
//! error carries its exit code ([`super::exit`]).

use super::exit;
use super::table;
use anyhow::{anyhow, Context};
use hetsched_common::jobfile::{self, JobFile};
use hetsched_common::leader::{LeaderClient, LeaderError, LeaderOptions};
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, ListFilter, Message};
use hetsched_common::{ClientRequestId, JobId, JobSpec, TaskId};
use std::time::Duration;

/// Arguments of `hetsched submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Job spec file (TOML or JSON; see README "Job spec files"). Flags override its fields.
    #[arg(value_name = "FILE")]
    pub file: Option<String>,
    /// Job name (default: the program's name).
    #[arg(long)]
    pub name: Option<String>,
    /// User (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Partition [default: default].
    #[arg(long)]
    pub partition: Option<String>,
    /// CPU cores per task (fractions allowed: 0.5) [default: 1].
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Memory per task, MiB [default: 128].
    #[arg(long)]
    pub mem: Option<u64>,
    /// GPUs per task: a whole number, or a fraction of one GPU (0.5) [default: 0].
    #[arg(long)]
    pub gpus: Option<f64>,
    /// Acceptable GPU model (e.g. T4).
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Option<String>,
    /// Number of tasks [default: 1].
    #[arg(long)]
    pub count: Option<u32>,
    /// Extra environment for every task (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Run only on these nodes (names or ids).
    #[arg(long, value_delimiter = ',', value_name = "NAME_OR_ID,...")]
    pub nodes: Option<Vec<String>>,
    /// Re-run a failed task up to N more times.
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,
    /// First delay before a re-run (doubling, capped at 5m), e.g. 5s.
    #[arg(long, value_name = "DURATION")]
    pub backoff: Option<String>,
    /// Longest one attempt may run (then stopped, reason "timeout"), e.g. 1h.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Print {"job_id": ..., "tasks": N} as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Never make this job's tasks preemption victims (S1). Accepted only for users whose
    /// priority is at least the configuration's `protect_min_priority`.
    #[arg(long)]
    pub no_preempt: bool,
    /// Change nothing: print the priority each task would get, where the next scheduling
    /// round would place it, and what it would preempt.
    #[arg(long)]
    pub dry_run: bool,
    /// An API program (TOML, `[[call]]` tables) each task runs instead of a command: each
    /// call runs on the best available engine of the task's node (see `hetsched calls`).
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    pub program: Option<std::path::PathBuf>,
    /// S3.2, GPU tasks: the task's class. Its best CPU count is searched while it runs
    /// (starting from the class's recorded best, else --cpus) and recorded for the class.
    #[arg(long, value_name = "image|speech|nlp|other", value_parser = parse_class)]
    pub class: Option<hetsched_common::TaskClass>,
    /// S3.2 hint (needs --class): the task pipelines its input; the search starts one CPU
    /// lower.
    #[arg(long)]
    pub pipelined: bool,
    /// S3.2 hint (needs --class): the model's weights are heavy; the search starts one CPU
    /// lower.
    #[arg(long)]
    pub heavy_weights: bool,
    /// S3.2 hint (needs --class): the task's CPU side is heavy; the search starts one CPU
    /// higher.
    #[arg(long)]
    pub cpu_heavy: bool,
    /// The command each task runs (overrides the file's `command`).
    #[arg(last = true, value_name = "CMD", conflicts_with = "program")]
    pub command: Vec<String>,
}

/// Arguments of `hetsched cancel`.
#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// The job (`5`, `job-5`); `task-17` cancels one task.
    #[arg(value_name = "JOB", required_unless_present = "task")]
    pub job: Option<String>,
    /// Cancel only this task (`17`, `task-17`).
    #[arg(long, value_name = "ID", conflicts_with = "job")]
    pub task: Option<TaskId>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// How a read may be answered, and how it is printed (shared by every read command).
#[derive(clap::Args, Debug)]
pub struct ReadFlags {
    /// Answer from the addressed (first) master's own applied state, no redirect (implies --stale).
    #[arg(long)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long)]
    pub stale: bool,
    /// Print JSON (one line).
    #[arg(long)]
    pub json: bool,
}

impl ReadFlags {
    /// Whether a non-linearizable answer is acceptable.
    pub fn stale(&self) -> bool {
        self.stale || self.local
    }
}

/// Arguments of `hetsched status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    read: ReadFlags,
}

/// Arguments of `hetsched nodes`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    read: ReadFlags,
}

/// Filters shared by `jobs` and `tasks`.
#[derive(clap::Args, Debug)]
pub struct FilterFlags {
    /// Only this state (jobs: pending, running, succeeded, failed, cancelled; tasks also
    /// assigned).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this user's.
    #[arg(long)]
    pub user: Option<String>,
    /// At most N (newest first).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

/// Arguments of `hetsched jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Only this job (`5`, `job-5`).
    #[arg(value_name = "JOB")]
    pub id: Option<JobId>,
    /// Only this job (same as JOB).
    #[arg(long, value_name = "JOB", conflicts_with = "id")]
    pub job: Option<JobId>,
    #[command(flatten)]
    filter: FilterFlags,
    #[command(flatten)]
    read: ReadFlags,
}

/// Arguments of `hetsched tasks`.
#[derive(clap::Args, Debug)]
pub struct TasksArgs {
    /// Only this job's tasks (`5`, `job-5`).
    #[arg(long)]
    pub job: Option<JobId>,
    #[command(flatten)]
    filter: FilterFlags,
    #[command(flatten)]
    read: ReadFlags,
}

/// How long a client command keeps retrying (elections, restarts) before giving up.
pub fn deadline() -> Duration {
    std::env::var("HETSCHED_CLIENT_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(15))
}

/// The error a master's answer maps to, with its exit code.
fn answer_error(kind: &ErrorKind, message: &str) -> anyhow::Error {
    match kind {
        ErrorKind::NotFound => exit::not_found(message),
        ErrorKind::Invalid | ErrorKind::Malformed | ErrorKind::TooLarge => exit::bad_input(message),
        ErrorKind::Unavailable
        | ErrorKind::Unknown
        | ErrorKind::NotLeader { .. }
        | ErrorKind::WrongVersion
        | ErrorKind::Busy => exit::unavailable(message),
        // Permission denied (CONTRACT.md exit 3): an admin request on the cluster port.
        ErrorKind::Forbidden => exit::forbidden(message),
        ErrorKind::Unsupported | ErrorKind::UnknownNode | ErrorKind::Internal => {
            anyhow!("{message}")
        }
    }
}

/// Sends `req` to the cluster, following the leader. With `local`, asks only the first master.
/// Gives up within the client timeout with an "unavailable" error (exit 5).
pub async fn call(
    masters: &[String],
    req: ClientRequest,
    local: bool,
) -> anyhow::Result<ClientResponse> {
    if masters.is_empty() {
        return Err(exit::bad_input(
            "no masters given: use --masters HOST:PORT,... or HETSCHED_MASTERS",
        ));
    }
    for m in masters {
        hetsched_common::parse_host_port(m).map_err(|e| exit::bad_input(e.to_string()))?;
    }
    let limit = deadline();
    // No single connect or call outlasts the client timeout.
    let options = LeaderOptions {
        connect_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(10),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..LeaderOptions::default()
    };
    let msg = Message::Client(req);
    let (client, answer) = if local {
        let left = limit.max(Duration::from_millis(50));
        let mut client = LeaderClient::new(vec![masters[0].clone()]).with_options(LeaderOptions {
            connect_timeout: left.min(options.connect_timeout),
            call_timeout: left.min(options.call_timeout),
            max_redirects: 0,
            ..options
        });
        let answer = client.attempt(msg).await;
        (client, answer)
    } else {
        let mut client = LeaderClient::new(masters.to_vec()).with_options(options);
        let answer = client.request(msg, limit).await;
        (client, answer)
    };
    match answer {
        Ok(Message::ClientReply(r)) => Ok(r),
        Ok(other) => Err(anyhow!(LeaderError::unexpected(client.target(), &other))),
        Err(LeaderError::Refused { kind, message, .. }) => Err(answer_error(&kind, &message)),
        Err(LeaderError::Deadline { deadline, last }) => Err(exit::unavailable(format!(
            "no leader answered within {deadline:?} (HETSCHED_CLIENT_TIMEOUT_MS): {last}"
        ))),
        Err(e) => Err(exit::unavailable(e.to_string())),
    }
}

/// A short description of an unexpected answer.
pub fn short<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Runs a future on a fresh single-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(rt.block_on(f))
}

/// A random client request id.
pub fn request_id() -> ClientRequestId {
    let seed = hetsched_common::rng::seed_from_env("HETSCHED_NO_SUCH_VAR")
        ^ (std::process::id() as u64) << 32;
    ClientRequestId(hetsched_common::rng::SplitMix64::new(seed).next_u64())
}

/// Reads and parses a spec file; every failure is bad input (exit 2) naming the file.
pub fn read_job_file(path: &str) -> anyhow::Result<JobFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| exit::bad_input(format!("cannot read job spec file {path}: {e}")))?;
    jobfile::parse_job_file(path, &text).map_err(|e| exit::bad_input(e.to_string()))
}

fn default_user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "anonymous".into())
}

/// Builds a job spec from an optional spec file and the submit flags (flags win).
pub fn spec_from(a: &SubmitArgs) -> anyhow::Result<JobSpec> {
    let mut f = match &a.file {
        Some(path) => read_job_file(path)?,
        None => JobFile::default(),
    };
    let bad = |flag: &str, why: String| exit::bad_input(format!("--{flag}: {why}"));
    if let Some(v) = &a.name {
        f.name = Some(v.clone());
    }
    if let Some(v) = &a.user {
        f.user = Some(v.clone());
    }
    if let Some(v) = &a.partition {
        f.partition = Some(v.clone());
    }
    if let Some(v) = a.cpus {
        f.resources.cpus = Some(jobfile::check_cpus(v).map_err(|e| bad("cpus", e))?);
    }
    if let Some(v) = a.mem {
        f.resources.mem = Some(v);
    }
    if let Some(v) = a.gpus {
        jobfile::gpu_request(v).map_err(|e| bad("gpus", e))?;
        f.resources.gpus = Some(v);
    }
    if let Some(v) = &a.gpu_model {
        f.resources.gpu_model = Some(v.clone());
    }
    if let Some(v) = a.count {
        f.count = Some(v);
    }
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| bad("env", format!("{kv:?} is not KEY=VALUE")))?;
        f.env.insert(k.to_string(), v.to_string());
    }
    if let Some(v) = &a.nodes {
        f.nodes = Some(v.clone());
    }
    if let Some(v) = a.retries {
        f.retries = Some(v);
    }
    if let Some(v) = &a.backoff {
        f.backoff = Some(jobfile::parse_duration_ms(v).map_err(|e| bad("backoff", e))?);
    }
    if let Some(v) = &a.timeout {
        f.timeout = Some(jobfile::parse_duration_ms(v).map_err(|e| bad("timeout", e))?);
    }
    if !a.command.is_empty() {
        f.command = Some(a.command.clone());
    }
    if let Some(c) = a.class {
        f.class = Some(c);
    }
    f.pipelined |= a.pipelined;
    f.heavy_weights |= a.heavy_weights;
    f.cpu_heavy |= a.cpu_heavy;
    // An API program (S0): `--program FILE`, else the spec file's `program = "prog.toml"`
    // (relative to the spec file).
    let program_path = match (&a.program, &f.program, &a.file) {
        (Some(p), _, _) => Some(p.clone()),
        (None, Some(p), Some(file)) => Some(
            std::path::Path::new(file)
                .parent()
                .unwrap_or(std::path::Path::new(""))
                .join(p),
        ),
        (None, Some(p), None) => Some(std::path::PathBuf::from(p)),
        (None, None, _) => None,
    };
    if let Some(path) = program_path {
        if !a.command.is_empty() || f.command.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(exit::bad_input(
                "a job runs either a command or a program (--program), not both",
            ));
        }
        let program = hetsched_common::program::read_program(&path)
            .map_err(|e| exit::bad_input(e.to_string()))?;
        if f.name.is_none() {
            f.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        return f
            .to_spec_with(&default_user(), Some(program))
            .map_err(|e| exit::bad_input(e.to_string()))
            .map(|mut spec| {
                spec.no_preempt |= a.no_preempt;
                spec
            });
    }
    if f.command.as_ref().is_none_or(|c| c.is_empty()) {
        return Err(exit::bad_input(match &a.file {
            Some(path) => {
                format!("{path}: no command: give `command = [...]` in the file or -- CMD...")
            }
            None => {
                "nothing to run: give a job spec FILE or -- CMD... (see hetsched submit --help)"
                    .to_string()
            }
        }));
    }
    f.to_spec(&default_user())
        .map_err(|e| exit::bad_input(e.to_string()))
        .map(|mut spec| {
            spec.no_preempt |= a.no_preempt;
            spec
        })
}

/// `--class`: `image`, `speech`, `nlp` or `other`.
fn parse_class(s: &str) -> Result<hetsched_common::TaskClass, String> {
    s.parse()
}

/// `submit`.
pub fn submit(masters: &[String], a: SubmitArgs) -> anyhow::Result<()> {
    let spec = spec_from(&a)?;
    if a.dry_run {
        return super::config::dry_run(masters, spec, a.json);
    }
    let req = ClientRequest::Submit {
        request: request_id(),
        spec,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Submitted { job, tasks } => {
            if a.json {
                super::print_json(&serde_json::json!({ "job_id": job, "tasks": tasks.len() }))
            } else {
                println!("submitted {job} with {} task(s)", tasks.len());
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// What `cancel` was asked to cancel.
enum CancelTarget {
    Job(JobId),
    Task(TaskId),
}

fn cancel_target(a: &CancelArgs) -> anyhow::Result<CancelTarget> {
    match (&a.job, a.task) {
        (_, Some(t)) => Ok(CancelTarget::Task(t)),
        (Some(s), None) if s.trim().starts_with("task-") => s
            .parse::<TaskId>()
            .map(CancelTarget::Task)
            .map_err(|e| exit::bad_input(e.to_string())),
        (Some(s), None) => s
            .parse::<JobId>()
            .map(CancelTarget::Job)
            .map_err(|e| exit::bad_input(e.to_string())),
        (None, None) => Err(exit::bad_input("give a JOB or --task ID")),
    }
}

/// `cancel`.
pub fn cancel(masters: &[String], a: CancelArgs) -> anyhow::Result<()> {
    let req = match cancel_target(&a)? {
        CancelTarget::Job(job) => ClientRequest::Cancel {
            request: request_id(),
            job,
        },
        CancelTarget::Task(task) => ClientRequest::CancelTask {
            request: request_id(),
            task,
        },
    };
    let task = match &req {
        ClientRequest::CancelTask { task, .. } => Some(*task),
        _ => None,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Cancelled { job, tasks } => {
            if a.json {
                let mut v = serde_json::json!({ "job_id": job, "cancelled": tasks });
                if let Some(t) = task {
                    v["task_id"] = serde_json::json!(t);
                }
                super::print_json(&v)
            } else {
                match task {
                    Some(t) if tasks == 0 => println!("{t} had already ended; nothing cancelled"),
                    Some(t) => println!("cancelled {t} of {job}"),
                    None => println!("cancelled {tasks} task(s) of {job}"),
                }
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `status`: a human summary (masters, leader, term, nodes, tasks by state), or the
/// answering master's full status as JSON.
pub fn status(masters: &[String], a: StatusArgs) -> anyhow::Result<()> {
    let a = a.read;
    let stale = a.stale();
    let (st, members) = block_on(async {
        let st = call(masters, ClientRequest::Status { stale }, a.local).await?;
        let members = if a.json {
            None
        } else {
            call(masters, ClientRequest::Members { stale: true }, a.local)
                .await
                .ok()
        };
        anyhow::Ok((st, members))
    })??;
    let s = match st {
        ClientResponse::Status(s) => s,
        other => return Err(anyhow!("unexpected answer: {}", short(&other))),
    };
    if a.json {
        return super::print_json(&s);
    }
    if let Some(ClientResponse::Members(ms)) = members {
        let list: Vec<String> = ms
            .iter()
            .map(|m| {
                format!(
                    "{} {}{}",
                    m.id.0,
                    m.addr.clone().unwrap_or_else(|| "?".into()),
                    if m.leader { " (leader)" } else { "" }
                )
            })
            .collect();
        println!("masters:  {} — {}", ms.len(), list.join(", "));
    }
    println!(
        "leader:   {}, term {}",
        s.leader.map_or("none".to_string(), |l| format!(
            "master {} at {}",
            l.0,
            s.leader_addr.clone().unwrap_or_else(|| "?".into())
        )),
        s.term
    );
    println!(
        "answered: master {} ({}), applied index {}, state {}{}",
        s.master_id.0,
        s.role,
        s.applied_index,
        s.state_hash,
        if s.stale { " (stale read)" } else { "" }
    );
    println!(
        "nodes:    {} up, {} down, {} draining",
        s.nodes.up, s.nodes.down, s.nodes.draining
    );
    println!("jobs:     {}", s.jobs);
    // In life-cycle order, then anything newer.
    let order = [
        "pending",
        "assigned",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ];
    let mut counts: Vec<String> = order
        .iter()
        .filter_map(|k| s.tasks.get(*k).map(|v| format!("{v} {k}")))
        .collect();
    counts.extend(
        s.tasks
            .iter()
            .filter(|(k, _)| !order.contains(&k.as_str()))
            .map(|(k, v)| format!("{v} {k}")),
    );
    println!("tasks:    {}", counts.join(", "));
    Ok(())
}

fn list_filter(f: &FilterFlags, job: Option<JobId>) -> ListFilter {
    ListFilter {
        job,
        state: f.state.clone(),
        user: f.user.clone(),
        limit: f.limit,
    }
}

/// `jobs`.
pub fn jobs(masters: &[String], a: JobsArgs) -> anyhow::Result<()> {
    let filter = list_filter(&a.filter, a.id.or(a.job));
    let read = a.read;
    let stale = read.stale();
    let req = ClientRequest::Jobs { stale, filter };
    match block_on(call(masters, req, read.local))?? {
        ClientResponse::Jobs(jobs) => {
            if read.json {
                return super::print_json(&jobs);
            }
            let mut t = table::new(&["ID", "NAME", "USER", "STATE", "TASKS", "TASK STATES"]);
            for j in jobs {
                let states: Vec<String> = j
                    .task_states
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                t.add_row(vec![
                    j.id.to_string(),
                    j.name,
                    j.user,
                    j.state,
                    j.tasks.to_string(),
                    states.join(" "),
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `tasks`.
pub fn tasks(masters: &[String], a: TasksArgs) -> anyhow::Result<()> {
    let filter = list_filter(&a.filter, a.job);
    let read = a.read;
    let stale = read.stale();
    let req = ClientRequest::Tasks {
        stale,
        job: None,
        filter,
    };
    match block_on(call(masters, req, read.local))?? {
        ClientResponse::Tasks(tasks) => {
            if read.json {
                return super::print_json(&tasks);
            }
            let mut t = table::new(&[
                "ID", "JOB", "INDEX", "USER", "STATE", "NODE", "ATTEMPT", "EXIT", "REASON", "CPUS",
            ]);
            for x in tasks {
                // S3: the current cores, with what changed them live.
                let cpus = match (x.compressed, x.cpu_search.as_deref()) {
                    (true, _) => format!("{} (compressed)", x.cpus),
                    (false, Some(phase)) => format!("{} (search {phase})", x.cpus),
                    (false, None) => x.cpus.to_string(),
                };
                t.add_row(vec![
                    x.id.to_string(),
                    x.job_id.to_string(),
                    x.index.to_string(),
                    x.user,
                    x.state.to_string(),
                    x.node.map_or("-".into(), |n| n.to_string()),
                    x.attempt.to_string(),
                    x.exit_code.map_or("-".into(), |c| c.to_string()),
                    x.reason.map_or("-".into(), |r| r.to_string()),
                    cpus,
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `nodes`.
pub fn nodes(masters: &[String], a: ListArgs) -> anyhow::Result<()> {
    let a = a.read;
    let stale = a.stale();
    match block_on(call(masters, ClientRequest::Nodes { stale }, a.local))?? {
        ClientResponse::Nodes(nodes) => {
            if a.json {
                return super::print_json(&nodes);
            }
            let mut t = table::new(&[
                "ID",
                "NAME",
                "ADDR",
                "STATE",
                "CPU (free/total)",
                "MEM MiB (free/total)",
                "GPUS",
                "GPU POOL",
                "TASKS",
                "QUEUED",
                "STEALS (in/out)",
                "ENGINES (free/count)",
                "PROBES (gpu, membw)",
            ]);
            for n in nodes {
                let gpus = if n.capacity.gpus.is_empty() {
                    "-".to_string()
                } else if n.gpus_emulated {
                    format!("{} EMULATED", n.capacity.gpus.len())
                } else {
                    n.capacity.gpus.len().to_string()
                };
                let state = if n.draining {
                    format!("{} (draining)", n.state)
                } else {
                    n.state.clone()
                };
                t.add_row(vec![
                    n.id.to_string(),
                    n.name,
                    n.addr,
                    state,
                    format!(
                        "{:.1}/{:.1}",
                        n.free.cpu_milli as f64 / 1000.0,
                        n.capacity.cpu_milli as f64 / 1000.0
                    ),
                    format!("{}/{}", n.free.mem_mib, n.capacity.mem_mib),
                    gpus,
                    n.gpu_pool.unwrap_or_else(|| "-".into()),
                    n.tasks.to_string(),
                    n.queued.to_string(),
                    format!("{}/{}", n.steals_in, n.steals_out),
                    engines_text(&n.engines),
                    probes_text(&n.probes),
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// A node's probes as `EMULATED, resctrl` (emulated ones in capitals, CONTRACT.md).
fn probes_text(p: &hetsched_common::protocol::ProbesInfo) -> String {
    let show = |name: &str| {
        if name == "emulated" {
            "EMULATED".to_string()
        } else {
            name.to_string()
        }
    };
    format!("{}, {}", show(&p.gpu), show(&p.membw))
}

/// The engines of a node beyond its CPU, as `gpu 1/2 EMULATED, npu 2/2` (`-`: none).
fn engines_text(engines: &[hetsched_common::protocol::EngineInfo]) -> String {
    let listed: Vec<String> = engines
        .iter()
        .filter(|e| e.kind != hetsched_common::EngineKind::Cpu)
        .map(|e| {
            let emulated = if e.emulated { " EMULATED" } else { "" };
            format!("{} {}/{}{emulated}", e.kind, e.free, e.count)
        })
        .collect();
    if listed.is_empty() {
        "-".into()
    } else {
        listed.join(", ")
    }
}

/// Arguments of `hetsched members`.
#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    /// What to do (default: list).
    #[command(subcommand)]
    pub action: Option<MembersAction>,
    /// Answer from the addressed (first) master's own view, no redirect (implies --stale).
    #[arg(long, global = true)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long, global = true)]
    pub stale: bool,
    /// Print one JSON line.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `hetsched members` actions.
#[derive(clap::Subcommand, Debug)]
pub enum MembersAction {
    /// Add a master (start it first with `hetsched master --join`).
    Add {
        /// Its id (≥ 1, not used by another master).
        id: u64,
        /// Its cluster address.
        #[arg(value_name = "HOST:PORT")]
        addr: String,
    },
    /// Remove a master (removing the leader hands leadership over first).
    Remove {
        /// Its id.
        id: u64,
    },
    /// Hand leadership to another master.
    TransferLeader {
        /// Its id.
        id: u64,
    },
}

/// `members`.
pub fn members(masters: &[String], a: MembersArgs) -> anyhow::Result<()> {
    use hetsched_common::MasterId;
    let (req, what) = match &a.action {
        None => {
            let stale = a.stale || a.local;
            match block_on(call(masters, ClientRequest::Members { stale }, a.local))?? {
                ClientResponse::Members(ms) => {
                    if a.json {
                        return super::print_json(&ms);
                    }
                    let mut t = table::new(&["ID", "ADDR", "ROLE", "LEADER", "MATCH"]);
                    for m in ms {
                        t.add_row(vec![
                            m.id.0.to_string(),
                            m.addr.unwrap_or_else(|| "?".into()),
                            if m.voter { "voter" } else { "learner" }.to_string(),
                            if m.leader { "yes" } else { "" }.to_string(),
                            m.match_index.map_or("-".into(), |i| i.to_string()),
                        ]);
                    }
                    return table::print(&t);
                }
                other => return Err(anyhow!("unexpected answer: {}", short(&other))),
            }
        }
        Some(MembersAction::Add { id, addr }) => {
            hetsched_common::parse_host_port(addr).map_err(|e| exit::bad_input(e.to_string()))?;
            (
                ClientRequest::AddMember {
                    id: MasterId(*id),
                    addr: addr.clone(),
                },
                format!("added master {id} at {addr}"),
            )
        }
        Some(MembersAction::Remove { id }) => (
            ClientRequest::RemoveMember { id: MasterId(*id) },
            format!("removed master {id}"),
        ),
        Some(MembersAction::TransferLeader { id }) => (
            ClientRequest::TransferLeader { id: MasterId(*id) },
            format!("master {id} now leads"),
        ),
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Done => {
            if a.json {
                super::print_json(&serde_json::json!({ "ok": true, "message": what }))
            } else {
                println!("{what}");
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}
