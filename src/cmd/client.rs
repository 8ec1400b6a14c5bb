//! Client commands: submit, cancel, status, jobs, tasks, nodes.
//!
//! Requests go to the masters in `--masters` order; a follower's `NotLeader` answer sends the
//! client to the leader it names; unreachable masters and elections are retried until a
//! deadline. A submit keeps one client request id across retries, so it applies at most once.

use anyhow::{anyhow, bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, Message};
use hetsched_common::wire::Connection;
use hetsched_common::{ClientRequestId, GpuRequest, JobId, JobSpec, ResourceRequest};
use std::time::{Duration, Instant};

/// Arguments of `hetsched submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Job name (default: the program's name).
    #[arg(long)]
    pub name: Option<String>,
    /// User (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Partition.
    #[arg(long, default_value = "default")]
    pub partition: String,
    /// CPU cores per task (fractions allowed: 0.5).
    #[arg(long, default_value_t = 1.0)]
    pub cpus: f64,
    /// Memory per task, MiB.
    #[arg(long, default_value_t = 128)]
    pub mem: u64,
    /// GPUs per task: a whole number, or a fraction of one GPU (0.5).
    #[arg(long, default_value_t = 0.0)]
    pub gpus: f64,
    /// Number of tasks.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Print {"job_id": ...} as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// The command each task runs.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Arguments of `hetsched cancel`.
#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// Job id.
    pub job: u64,
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

/// Arguments of `hetsched jobs|nodes`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    read: ReadFlags,
}

/// Arguments of `hetsched jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Show only this job (`5` or `job-5`); exits 4 when there is no such job, or when it
    /// finished and was garbage-collected.
    #[arg(value_name = "JOB", value_parser = parse_job_id)]
    pub job: Option<u64>,
    #[command(flatten)]
    read: ReadFlags,
}

/// Parses a job id: `5` or `job-5` (CONTRACT.md, ids).
pub fn parse_job_id(s: &str) -> Result<u64, String> {
    s.strip_prefix("job-")
        .unwrap_or(s)
        .parse()
        .map_err(|_| format!("{s:?} is not a job id (5 or job-5)"))
}

/// An error answer from the masters, kept typed so that the exit code can follow
/// CONTRACT.md (4 not found, 2 bad input, 5 unavailable).
#[derive(Debug)]
pub struct ServerError {
    /// What kind of error the master reported.
    pub kind: ErrorKind,
    /// Its message.
    pub message: String,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerError {}

impl ServerError {
    /// The process exit code for this error (CONTRACT.md).
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ErrorKind::NotFound => 4,
            ErrorKind::Invalid | ErrorKind::Malformed | ErrorKind::TooLarge => 2,
            ErrorKind::Forbidden => 3,
            ErrorKind::Unavailable | ErrorKind::Unknown | ErrorKind::NotLeader { .. } => 5,
            ErrorKind::Busy => 5,
            _ => 1,
        }
    }
}

/// Arguments of `hetsched tasks`.
#[derive(clap::Args, Debug)]
pub struct TasksArgs {
    /// Only this job's tasks.
    #[arg(long)]
    pub job: Option<u64>,
    #[command(flatten)]
    read: ReadFlags,
}

/// How long a client command keeps retrying (elections, restarts) before giving up.
fn deadline() -> Duration {
    std::env::var("HETSCHED_CLIENT_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(15))
}

/// Sends `req` to the cluster, following the leader. With `local`, asks only the first master.
pub async fn call(
    masters: &[String],
    req: ClientRequest,
    local: bool,
) -> anyhow::Result<ClientResponse> {
    if masters.is_empty() {
        bail!("no masters given: use --masters HOST:PORT,... or HETSCHED_MASTERS");
    }
    for m in masters {
        hetsched_common::parse_host_port(m)?;
    }
    let start = Instant::now();
    let limit = deadline();
    let mut next = 0usize;
    let mut redirect: Option<String> = None;
    let mut last_err = anyhow!("no master answered");
    let mut backoff = Duration::from_millis(50);
    loop {
        let addr = match redirect.take() {
            Some(a) => a,
            None => {
                let a = masters[next % masters.len()].clone();
                next += 1;
                a
            }
        };
        let attempt = async {
            let conn = Connection::connect(&addr, Duration::from_secs(1)).await?;
            conn.call(Message::Client(req.clone()), Duration::from_secs(10))
                .await
        };
        match attempt.await {
            Ok(Message::ClientReply(r)) => return Ok(r),
            Ok(Message::Error(e)) => match e.kind {
                ErrorKind::NotLeader { leader_addr, .. } if !local => {
                    tracing::debug!(%addr, ?leader_addr, "not the leader");
                    redirect = leader_addr.filter(|a| *a != addr);
                    last_err = anyhow!("{}", e.message);
                }
                ErrorKind::Unknown | ErrorKind::Unavailable | ErrorKind::NotLeader { .. } => {
                    last_err = anyhow!("{}", e.message);
                }
                kind => {
                    return Err(ServerError {
                        kind,
                        message: e.message,
                    }
                    .into())
                }
            },
            Ok(other) => bail!("unexpected answer from {addr}: {other:?}"),
            Err(e) => last_err = anyhow!(e),
        }
        if local {
            return Err(last_err);
        }
        if start.elapsed() > limit {
            return Err(ServerError {
                kind: ErrorKind::Unavailable,
                message: format!("no leader answered within {limit:?}: {last_err:#}"),
            }
            .into());
        }
        if redirect.is_none() && next.is_multiple_of(masters.len()) {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
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

/// Builds a job spec from the submit flags.
pub fn spec_from(a: &SubmitArgs) -> anyhow::Result<JobSpec> {
    if !(a.cpus > 0.0 && a.cpus.is_finite()) {
        bail!("--cpus must be a positive number");
    }
    if !(a.gpus >= 0.0 && a.gpus.is_finite()) {
        bail!("--gpus must be zero or a positive number");
    }
    let gpu = if a.gpus == 0.0 {
        GpuRequest::none()
    } else if a.gpus < 1.0 {
        GpuRequest::fraction((a.gpus * 1000.0).round() as u32)
    } else if a.gpus.fract() == 0.0 {
        GpuRequest::whole(a.gpus as u32)
    } else {
        bail!(
            "--gpus must be a whole number or a fraction below 1 (got {})",
            a.gpus
        );
    };
    let name = a.name.clone().unwrap_or_else(|| {
        std::path::Path::new(&a.command[0])
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| a.command[0].clone())
    });
    let spec = JobSpec {
        name,
        user: a
            .user
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "anonymous".into()),
        partition: a.partition.clone(),
        resources: ResourceRequest {
            cpu_milli: (a.cpus * 1000.0).round() as u64,
            mem_mib: a.mem,
            gpu,
            engines: Default::default(),
        },
        count: a.count,
        command: a.command.clone(),
        env: Default::default(),
    };
    spec.validate()?;
    Ok(spec)
}

/// `submit`.
pub fn submit(masters: &[String], a: SubmitArgs) -> anyhow::Result<()> {
    let spec = spec_from(&a)?;
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
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// `cancel`.
pub fn cancel(masters: &[String], a: CancelArgs) -> anyhow::Result<()> {
    let req = ClientRequest::Cancel {
        request: request_id(),
        job: JobId(a.job),
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Cancelled { job, tasks } => {
            if a.json {
                super::print_json(&serde_json::json!({ "job_id": job, "cancelled": tasks }))
            } else {
                println!("cancelled {tasks} task(s) of {job}");
                Ok(())
            }
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// `status`.
pub fn status(masters: &[String], a: StatusArgs) -> anyhow::Result<()> {
    let a = a.read;
    let stale = a.stale();
    match block_on(call(masters, ClientRequest::Status { stale }, a.local))?? {
        ClientResponse::Status(s) => {
            if a.json {
                return super::print_json(&s);
            }
            println!(
                "master {} ({}), leader {}, term {}, applied {}, state {}{}",
                s.master_id.0,
                s.role,
                s.leader.map_or("none".to_string(), |l| format!(
                    "{} at {}",
                    l.0,
                    s.leader_addr.clone().unwrap_or_default()
                )),
                s.term,
                s.applied_index,
                s.state_hash,
                if s.stale { " (stale read)" } else { "" }
            );
            println!(
                "nodes: {} up, {} down; jobs: {}",
                s.nodes.up, s.nodes.down, s.jobs
            );
            let counts: Vec<String> = s.tasks.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("tasks: {}", counts.join(", "));
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// `jobs`.
pub fn jobs(masters: &[String], a: JobsArgs) -> anyhow::Result<()> {
    let job = a.job.map(JobId);
    let a = a.read;
    let stale = a.stale();
    match block_on(call(masters, ClientRequest::Jobs { stale, job }, a.local))?? {
        ClientResponse::Jobs(jobs) => {
            if a.json {
                return super::print_json(&jobs);
            }
            println!(
                "{:<8} {:<16} {:<10} {:<10} {:>6}  states",
                "ID", "NAME", "USER", "STATE", "TASKS"
            );
            for j in jobs {
                let states: Vec<String> = j
                    .task_states
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                println!(
                    "{:<8} {:<16} {:<10} {:<10} {:>6}  {}",
                    j.id.0,
                    j.name,
                    j.user,
                    j.state,
                    j.tasks,
                    states.join(" ")
                );
            }
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// `tasks`.
pub fn tasks(masters: &[String], a: TasksArgs) -> anyhow::Result<()> {
    let job = a.job.map(JobId);
    let a = a.read;
    let stale = a.stale();
    let req = ClientRequest::Tasks { stale, job };
    match block_on(call(masters, req, a.local))?? {
        ClientResponse::Tasks(tasks) => {
            if a.json {
                return super::print_json(&tasks);
            }
            println!(
                "{:<8} {:<6} {:<6} {:<10} {:<6} {:>7}  EXIT",
                "ID", "JOB", "INDEX", "STATE", "NODE", "ATTEMPT"
            );
            for t in tasks {
                println!(
                    "{:<8} {:<6} {:<6} {:<10} {:<6} {:>7}  {}",
                    t.id.0,
                    t.job_id.0,
                    t.index,
                    t.state,
                    t.node.map_or("-".into(), |n| n.0.to_string()),
                    t.attempt,
                    t.exit_code.map_or("-".into(), |c| c.to_string())
                );
            }
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
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
            println!(
                "{:<6} {:<20} {:<22} {:<5} {:>11} {:>13} {:>6}  TASKS",
                "ID", "NAME", "ADDR", "STATE", "CPU(free)", "MEM MiB(free)", "GPUS"
            );
            for n in nodes {
                let gpus = if n.capacity.gpus.is_empty() {
                    "-".to_string()
                } else if n.gpus_emulated {
                    format!("{} (emulated)", n.capacity.gpus.len())
                } else {
                    n.capacity.gpus.len().to_string()
                };
                println!(
                    "{:<6} {:<20} {:<22} {:<5} {:>11} {:>13} {:>6}  {}",
                    n.id.0,
                    n.name,
                    n.addr,
                    n.state,
                    format!(
                        "{:.1}/{:.1}",
                        n.free.cpu_milli as f64 / 1000.0,
                        n.capacity.cpu_milli as f64 / 1000.0
                    ),
                    format!("{}/{}", n.free.mem_mib, n.capacity.mem_mib),
                    gpus,
                    n.tasks
                );
            }
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
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
                    println!(
                        "{:<6} {:<22} {:<8} {:<7} MATCH",
                        "ID", "ADDR", "ROLE", "LEADER"
                    );
                    for m in ms {
                        println!(
                            "{:<6} {:<22} {:<8} {:<7} {}",
                            m.id.0,
                            m.addr.unwrap_or_else(|| "?".into()),
                            if m.voter { "voter" } else { "learner" },
                            if m.leader { "yes" } else { "" },
                            m.match_index.map_or("-".into(), |i| i.to_string())
                        );
                    }
                    return Ok(());
                }
                other => bail!("unexpected answer: {other:?}"),
            }
        }
        Some(MembersAction::Add { id, addr }) => {
            hetsched_common::parse_host_port(addr)?;
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
        other => bail!("unexpected answer: {other:?}"),
    }
}
