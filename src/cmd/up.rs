//! `hetsched up` — a local cluster as child processes plus a demo workload.
//!
//! Starts `--masters` masters and `--slaves` slaves of this same binary on free loopback
//! ports (logs in the data dir), waits for a leader and for every slave, submits a small demo
//! workload (ending with a job that queues on the slaves so that one steals from another,
//! `up_steal`), shows a live progress line on stderr, and prints a summary. Ctrl-C or SIGTERM
//! (or the end of the demo) stops every child: SIGTERM, then SIGKILL after a grace period.
//! With `--netns` each process runs in its own network namespace on a private bridge
//! (`hetsched::local::netns`), removed at the end.

use super::client::{call, request_id};
use super::local::{ClusterSpec, LocalCluster, SlaveSpec};
use anyhow::{bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, StatusInfo};
use hetsched_common::{GpuRequest, JobSpec, ResourceRequest};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `hetsched up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of masters.
    #[arg(long, default_value_t = 3)]
    pub masters: u32,
    /// Number of slaves. They share the host: each gets the host's CPUs / --slaves and ¾ of
    /// its memory / --slaves (at least 2 CPUs and 2048 MiB, what the demo needs; see --slave-cpus, --slave-mem);
    /// the last one gets the host's real GPUs (a slave offers the first N devices, so they
    /// are not split), or two emulated GPUs on a host without any, and is the demo's
    /// GPU-engine slave.
    #[arg(long, default_value_t = 2)]
    pub slaves: u32,
    /// CPUs each slave declares (default: the host's CPUs / --slaves, at least 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub slave_cpus: Option<u32>,
    /// Memory each slave declares, MiB (default: ¾ of the host's memory / --slaves, at
    /// least 2048).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    pub slave_mem: Option<u64>,
    /// Data directory (default: a fresh directory under the system's temp dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the cluster running without the demo workload (Ctrl-C stops it).
    #[arg(long)]
    pub no_demo: bool,
    /// Give up on the demo after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Run each master and slave in its own network namespace, with its own address on a
    /// private bridge (10.213.K.0/24) that is removed at the end; needs root and `ip`.
    #[arg(long)]
    pub netns: bool,
    /// A directory every slave may read container images from (`slave --image-dir`,
    /// docs/guide/containers.md); repeatable.
    #[arg(long, value_name = "DIR")]
    pub image_dir: Vec<PathBuf>,
}

fn demo_jobs() -> Vec<JobSpec> {
    let job = |name: &str, count: u32, cpu_milli: u64, gpu: GpuRequest, script: &str| JobSpec {
        name: name.into(),
        user: "demo".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli,
            mem_mib: 64,
            gpu,
            engines: Default::default(),
        },
        count,
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    };
    vec![
        job(
            "hello",
            8,
            250,
            GpuRequest::none(),
            "echo \"hello from task $HETSCHED_TASK_ID (job $HETSCHED_JOB_ID, index $HETSCHED_TASK_INDEX)\"",
        ),
        job(
            "count",
            6,
            500,
            GpuRequest::none(),
            "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo $i",
        ),
        job(
            "gpu-share",
            2,
            250,
            GpuRequest::fraction(500),
            "echo \"task $HETSCHED_TASK_ID on half of GPU $HETSCHED_GPUS\"; sleep 0.2",
        ),
    ]
}

/// The GPU slave's engines in the demo: emulated GPUs run gemm 8× and sort 2× the CPU
/// kernel; real ones run gemm with the shipped plug-in (`deploy/plugins/gemm`, server
/// mode) where it is found beside this binary's source tree or at `HETSCHED_GEMM_PLUGIN`.
fn demo_engines(real_gpus: bool) -> String {
    if !real_gpus {
        return "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0, sort = 2.0 }\n"
            .into();
    }
    let plugin = std::env::var_os("HETSCHED_GEMM_PLUGIN")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            exe.ancestors()
                .map(|d| d.join("deploy/plugins/gemm"))
                .find(|p| p.is_file())
        });
    let mut text = "[[engine]]\nkind = \"gpu\"\n".to_string();
    if let Some(p) = plugin {
        text.push_str(&format!(
            "[[plugin]]\napi = \"gemm\"\nengine = \"gpu\"\nexec = {:?}\nmode = \"server\"\n",
            p.display().to_string()
        ));
    }
    text
}

/// The demo's API program: one call of each built-in API.
fn demo_program(gpu_slave: &str) -> JobSpec {
    use hetsched_common::program::{Api, ApiCall, Program};
    JobSpec {
        name: "program".into(),
        user: "demo".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: 500,
            mem_mib: 64,
            ..Default::default()
        },
        count: 1,
        program: Some(Program {
            calls: vec![
                ApiCall::new(Api::Gemm, 192, 1),
                ApiCall::new(Api::Sort, 1 << 16, 2),
                ApiCall::new(Api::Sha256, 1 << 20, 3),
                ApiCall::new(Api::Compress, 1 << 18, 4),
            ],
        }),
        nodes: vec![gpu_slave.to_string()],
        ..Default::default()
    }
}

/// Runs the local cluster.
pub fn run(a: Args) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    if a.masters == 0 || a.slaves == 0 {
        bail!("--masters and --slaves must be at least 1");
    }
    let dir = match &a.data_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("hetsched-up-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;

    // Sized from the host (super::up_size). The last slave has the GPUs — two emulated ones
    // on a host without any — so the demo's shared-GPU job has a home; they are also its
    // GPU engine for the demo programs. Every slave profiles its engines at start (the
    // default), so each has a selection table.
    let shares = super::up_size::size(
        super::up_size::this_host(),
        a.slaves,
        a.slave_cpus,
        a.slave_mem,
    );
    let real_gpus = shares.iter().any(|s| s.real_gpus);
    let engines_file = dir.join("engines.toml");
    std::fs::write(&engines_file, demo_engines(real_gpus))
        .with_context(|| format!("cannot write {}", engines_file.display()))?;
    let slaves: Vec<SlaveSpec> = shares
        .iter()
        .map(|s| SlaveSpec {
            cpus: s.cpus,
            mem_mib: s.mem_mib,
            gpus: s.gpus,
            extra_args: (s.gpus > 0)
                .then(|| ["--engines".to_string(), engines_file.display().to_string()])
                .into_iter()
                .flatten()
                .chain(
                    a.image_dir
                        .iter()
                        .flat_map(|d| ["--image-dir".to_string(), d.display().to_string()]),
                )
                .collect(),
        })
        .collect();
    // Ctrl-C and SIGTERM are caught from here on (also while the cluster starts), so the
    // cluster, and with --netns its namespaces, is always stopped and removed.
    let mut stop_signals = {
        use tokio::signal::unix::{signal, SignalKind};
        let _in_rt = rt.enter();
        (
            signal(SignalKind::interrupt()).context("cannot catch Ctrl-C")?,
            signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
        )
    };
    // Secured like a deployment: its own CA (kept with the data, reused on the next run),
    // the processes' certificates and the administrator's client certificate.
    let ca = dir.join("certs").join("ca");
    if !ca.join("ca.crt").exists() {
        hetsched::local::security::make_ca(&ca)?;
    }
    let spec = ClusterSpec {
        masters: a.masters,
        slaves,
        netns: a.netns,
        ca_dir: Some(ca),
        ..ClusterSpec::default()
    };
    let mut cluster = LocalCluster::launch(&dir, &spec)?;
    let addrs = cluster.master_addrs.clone();
    // An administrator token for the shell (and the dashboard), once a leader is elected.
    let token = match &cluster.client_certs {
        None => None,
        Some(_) => match rt.block_on(admin_token(&addrs)) {
            Ok(t) => Some(t),
            Err(e) => {
                cluster.stop();
                return Err(e.context("no administrator token from the new cluster"));
            }
        },
    };
    // What a shell needs to use the cluster, one `export` per line (no quotes or spaces).
    println!("export HETSCHED_MASTERS={}", addrs.join(","));
    if let Some(certs) = &cluster.client_certs {
        println!("export HETSCHED_CERTS_DIR={}", certs.display());
    }
    if let Some(t) = &token {
        println!("export HETSCHED_TOKEN={t}");
    }
    // Issue 55: every master's API, for HTTP clients (the Python package follows it).
    if !cluster.master_http.is_empty() {
        let scheme = if cluster.client_certs.is_some() {
            "https"
        } else {
            "http"
        };
        let urls: Vec<String> = (cluster.master_http.iter())
            .map(|h| format!("{scheme}://{h}"))
            .collect();
        println!("export HETSCHED_API={}", urls.join(","));
    }
    {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    }
    // The API and dashboard base is the first URL of the output.
    if let Some(http) = cluster.master_http.first() {
        match &cluster.client_certs {
            Some(certs) => {
                eprintln!("  API and dashboard: https://{http}");
                eprintln!(
                    "    dashboard: /ui?token=$HETSCHED_TOKEN   API: curl --cacert {}/ca.crt \
                     -H \"Authorization: Bearer $HETSCHED_TOKEN\" https://{http}/v1/status",
                    certs.display()
                );
            }
            None => eprintln!(
                "  API and dashboard: http://{http}   (--insecure: no TLS, no authentication)"
            ),
        }
    }
    eprintln!(
        "hetsched up: {} master(s), {} slave(s); data and logs in {}",
        a.masters,
        a.slaves,
        dir.display()
    );
    eprintln!("  masters: {}", addrs.join(","));
    if let Some(net) = &cluster.net {
        eprintln!(
            "  network namespaces on bridge {} ({}/24): {}",
            net.bridge,
            net.host_ip,
            net.nodes
                .iter()
                .map(|n| format!("{} {}", n.ns, n.ip))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let result = rt.block_on(async {
        tokio::select! {
            r = drive(&addrs, &a) => r,
            _ = stop_signals.0.recv() => {
                eprintln!("\ninterrupted; stopping the cluster");
                Err(anyhow::anyhow!("interrupted"))
            }
            _ = stop_signals.1.recv() => {
                eprintln!("\nterminated; stopping the cluster");
                Err(anyhow::anyhow!("terminated"))
            }
        }
    });
    cluster.stop();
    eprintln!(
        "cluster stopped{}; data and logs kept in {}",
        if a.netns {
            ", its network namespaces removed"
        } else {
            ""
        },
        dir.display()
    );
    result
}

/// The first administrator token of the cluster; a data directory reused from an earlier
/// run was bootstrapped then, so it gets a new administrator token instead (the
/// administrator's client certificate may create tokens).
async fn admin_token(addrs: &[String]) -> anyhow::Result<String> {
    let answer = match call(addrs, ClientRequest::AclBootstrap, false).await {
        Ok(a) => a,
        Err(e) if super::exit::code_of(&e) == super::exit::FORBIDDEN => {
            let req = ClientRequest::CreateToken {
                user: "root".into(),
                role: hetsched_common::protocol::TokenRole::Admin,
                ttl_ms: None,
            };
            call(addrs, req, false).await?
        }
        Err(e) => return Err(e),
    };
    match answer {
        ClientResponse::Token(t) => Ok(t.token),
        other => bail!("unexpected answer {other:?}"),
    }
}

async fn status(addrs: &[String]) -> anyhow::Result<StatusInfo> {
    match call(addrs, ClientRequest::Status { stale: false }, false).await? {
        ClientResponse::Status(s) => Ok(s),
        other => bail!("unexpected answer {other:?}"),
    }
}

async fn drive(addrs: &[String], a: &Args) -> anyhow::Result<()> {
    let start = Instant::now();
    let limit = Duration::from_secs(a.timeout);
    // A leader, and every slave registered.
    loop {
        if let Ok(s) = status(addrs).await {
            if s.nodes.up >= a.slaves as u64 {
                eprintln!(
                    "  leader: master {} (term {}); {} slave(s) up",
                    s.leader.map_or(0, |l| l.0),
                    s.term,
                    s.nodes.up
                );
                break;
            }
        }
        if start.elapsed() > limit {
            bail!("the cluster did not come up within {limit:?} (see the logs)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if a.no_demo {
        eprintln!(
            "  running; after the export lines above, submit with: hetsched submit -- echo hi"
        );
        eprintln!("  press Ctrl-C to stop");
        std::future::pending::<()>().await;
    }
    // S2: the demo batch goes first, so that it is planned on free cores.
    let demo_batch = super::up_batch::submit(addrs, a.slaves as usize).await?;
    submit_all(addrs, demo_jobs()).await?;
    wait_done(addrs, start, limit).await?;
    // S0, once every slave's profile is in and the GPUs are free again: a program on the
    // GPU slave, whose gemm the profile sends to the GPU engine, and one pinned to the first
    // (CPU-only) slave, whose gemm calls are forwarded to the GPU slave.
    let profiles = super::up_forward::wait_for_profiles(addrs, a.slaves as usize, limit).await;
    let mut specs = vec![demo_program(&format!("slave-{}", a.slaves))];
    if a.slaves >= 2 {
        let n =
            super::up_forward::paying_size(&profiles, "slave-1", &format!("slave-{}", a.slaves));
        specs.push(super::up_forward::program("slave-1", n));
    }
    submit_all(addrs, specs).await?;
    let final_status = wait_done(addrs, start, limit).await?;
    // S0.3–4: a job that queues on the slaves, so that one steals from another.
    let steal_job = if a.slaves > 1 {
        let job = super::up_steal::submit(addrs, 2000).await?;
        super::up_steal::wait(addrs, job, start, limit).await?;
        Some(job)
    } else {
        None
    };
    // Summary: every job, and whether every master holds the same state.
    let listed = match call(
        addrs,
        ClientRequest::Jobs {
            stale: false,
            filter: Default::default(),
        },
        false,
    )
    .await?
    {
        // Listings are newest first; the summary reads oldest first.
        ClientResponse::Jobs(mut j) => {
            j.sort_by_key(|j| j.id);
            j
        }
        other => bail!("unexpected answer {other:?}"),
    };
    println!("summary after {:.1}s:", start.elapsed().as_secs_f64());
    for j in &listed {
        let states: Vec<String> = j
            .task_states
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        println!(
            "  job {} {:<10} {:<9} {}",
            j.id.0,
            j.name,
            j.state,
            states.join(", ")
        );
    }
    if let Ok(ClientResponse::Nodes(nodes)) =
        call(addrs, ClientRequest::Nodes { stale: false }, false).await
    {
        for n in nodes {
            let gpus = match (n.capacity.gpus.len(), n.gpus_emulated) {
                (0, _) => String::new(),
                (k, true) => format!(", {k} GPU(s) EMULATED"),
                (k, false) => format!(", {k} GPU(s)"),
            };
            println!(
                "  node {} {:<8} {} cores, {} MiB{gpus}",
                n.id.0,
                n.name,
                n.capacity.cpu_milli / 1000,
                n.capacity.mem_mib
            );
        }
    }
    show_program_calls(addrs, &listed).await;
    super::up_batch::show(addrs, demo_batch).await;
    if let Some(job) = steal_job {
        super::up_steal::show(addrs, job).await;
    }
    super::up_forward::show(addrs, &listed).await;
    let mut hashes = Vec::new();
    for addr in addrs {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(ClientResponse::Status(s)) = call(
                std::slice::from_ref(addr),
                ClientRequest::Status { stale: true },
                true,
            )
            .await
            {
                if s.applied_index >= final_status.applied_index || Instant::now() > deadline {
                    hashes.push(s.state_hash);
                    break;
                }
            }
            if Instant::now() > deadline {
                hashes.push("unreachable".into());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let agree = hashes.windows(2).all(|w| w[0] == w[1]);
    println!(
        "  masters' state hashes {}: {}",
        if agree { "agree" } else { "DIFFER" },
        hashes.join(" ")
    );
    let failed: u64 = listed.iter().filter(|j| j.state != "succeeded").count() as u64;
    if failed > 0 {
        bail!("{failed} demo job(s) did not succeed");
    }
    Ok(())
}

/// Submits one job: its id and how many tasks it has.
pub(super) async fn submit_one(
    addrs: &[String],
    spec: JobSpec,
) -> anyhow::Result<(hetsched_common::JobId, usize)> {
    let req = ClientRequest::Submit {
        request: request_id(),
        spec,
        allow_unplaceable: false,
    };
    match call(addrs, req, false).await? {
        ClientResponse::Submitted { job, tasks } => Ok((job, tasks.len())),
        other => bail!("unexpected answer {other:?}"),
    }
}

/// Submits `specs`, one job each, saying so.
async fn submit_all(addrs: &[String], specs: Vec<JobSpec>) -> anyhow::Result<()> {
    for spec in specs {
        let name = spec.name.clone();
        let (job, tasks) = submit_one(addrs, spec).await?;
        eprintln!("  submitted {job} {name:?}: {tasks} task(s)");
    }
    Ok(())
}

/// Shows progress until every task submitted so far has ended; the status then.
async fn wait_done(
    addrs: &[String],
    start: Instant,
    limit: Duration,
) -> anyhow::Result<StatusInfo> {
    let tty = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    loop {
        let s = status(addrs).await?;
        let n = |k: &str| s.tasks.get(k).copied().unwrap_or(0);
        let total: u64 = s.tasks.values().sum();
        let done = n("succeeded") + n("failed") + n("cancelled");
        let line = format!(
            "  progress: {done}/{total} done ({} succeeded, {} failed) | {} running, {} assigned, {} pending | {:.1}s",
            n("succeeded"),
            n("failed"),
            n("running"),
            n("assigned"),
            n("pending"),
            start.elapsed().as_secs_f64()
        );
        if tty {
            eprint!("\r{line}\x1b[K");
            let _ = std::io::stderr().flush();
        } else if last_print.elapsed() > Duration::from_secs(1) || done == total {
            eprintln!("{line}");
            last_print = Instant::now();
        }
        if done == total {
            if tty {
                eprintln!();
            }
            return Ok(s);
        }
        if start.elapsed() > limit {
            bail!("the demo did not finish within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints where the demo program's calls ran.
async fn show_program_calls(addrs: &[String], jobs: &[hetsched_common::protocol::JobInfo]) {
    let Some(job) = jobs.iter().find(|j| j.name == "program") else {
        return;
    };
    let tasks = match call(
        addrs,
        ClientRequest::Tasks {
            stale: false,
            job: Some(job.id),
            filter: Default::default(),
        },
        false,
    )
    .await
    {
        Ok(ClientResponse::Tasks(t)) => t,
        _ => return,
    };
    for t in tasks {
        match call(addrs, ClientRequest::Calls { task: t.id }, false).await {
            Ok(ClientResponse::Calls { calls, node, .. }) => {
                let on = calls
                    .first()
                    .map_or_else(|| node.to_string(), |c| c.node.clone());
                println!("  program {} on {on}: where its API calls ran", t.id);
                for c in calls {
                    println!(
                        "    call {} {:<8} on {}{} {:>9.3} ms  digest {}",
                        c.index,
                        c.api.to_string(),
                        c.engine,
                        if c.emulated { " EMULATED" } else { "" },
                        c.duration_ms,
                        c.digest.get(..16).unwrap_or(&c.digest)
                    );
                }
            }
            Ok(other) => eprintln!("  unexpected answer for {}: {other:?}", t.id),
            Err(e) => eprintln!("  cannot fetch the calls of {}: {e}", t.id),
        }
    }
}
