//! `hetsched slave`.

use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `hetsched slave`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on for the masters' commands.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// Master cluster addresses.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "HOST:PORT,..."
    )]
    pub masters: Vec<String>,
    /// Data directory (stable id, accepted tasks, unacknowledged results, task logs).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// CPU cores offered.
    #[arg(long)]
    pub cpus: u32,
    /// Memory offered, MiB.
    #[arg(long)]
    pub mem: u64,
    /// GPUs offered: real ones when detected, else this many emulated devices.
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Model name of emulated GPUs.
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// Human name (default: the advertise address).
    #[arg(long)]
    pub name: Option<String>,
    /// Partitions this node serves (S1): tasks run only on nodes of their job's partition.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "default",
        value_name = "NAME,..."
    )]
    pub partitions: Vec<String>,
    /// Address masters reach this slave at (default: --listen).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Root of the cgroup filesystem; tasks get CPU and memory limits through cgroups v2 or
    /// v1 (detected) where it is writable, and run unlimited otherwise.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Run tasks without cgroup limits.
    #[arg(long)]
    pub no_cgroups: bool,
    /// Leave the kernel's cgroup settings alone. By default a slave running tasks in cgroups
    /// mounts an empty named cgroup hierarchy with `favordynmods` at
    /// /run/hetsched/cgroup-favordynmods (machine-wide, kept after exit; needs root and Linux
    /// 6.2+), so that a task's move into its cgroup does not wait for an RCU grace period
    /// (~10 ms per task start after a quiet spell).
    #[arg(long)]
    pub no_favordynmods: bool,
    /// Engines of this node (TOML: [[engine]] and [[plugin]] tables; see README). The CPU
    /// engine is always there.
    #[arg(long, value_name = "FILE")]
    pub engines: Option<PathBuf>,
    /// No-op, kept for older scripts: every slave profiles its engines by default (see
    /// --no-profile).
    #[arg(long, conflicts_with = "no_profile")]
    pub profile: bool,
    /// Do not profile the engines: use the selection table persisted in the data dir, if
    /// any. By default a slave profiles at first start (in the background, within
    /// --profile-budget), persists the table and reuses it on restart while its engines
    /// file is unchanged.
    #[arg(long)]
    pub no_profile: bool,
    /// Profile again at this start even though the persisted table matches the engines file.
    #[arg(long, conflicts_with = "no_profile")]
    pub reprofile: bool,
    /// Wall-clock budget of the start-up profile.
    #[arg(long, default_value = "3s", value_parser = super::programs::parse_duration)]
    pub profile_budget: std::time::Duration,
    /// Deadline of one plug-in call; a late or failed plug-in call falls back to the CPU.
    #[arg(long, default_value = "60s", value_parser = super::programs::parse_duration)]
    pub call_timeout: std::time::Duration,
    /// A server plug-in (`mode = "server"`) that has had no call for this long is stopped;
    /// the next call starts it again.
    #[arg(long, default_value = "60s", value_parser = super::programs::parse_duration)]
    pub plugin_idle: std::time::Duration,
    /// Check every plug-in result against the CPU kernel (gemm by relative Frobenius error
    /// ≤ 1e-4, the others byte for byte); `calls --json` shows each check, and a result that
    /// fails is replaced by the CPU's. Costs a CPU kernel run per plug-in call.
    #[arg(long)]
    pub check_results: bool,
    /// S0.6: forward a program's call to a peer when a peer's engine kind is faster than the
    /// best local one by more than this fraction (0.5: more than 1.5× as fast by the
    /// selection tables), or when the best local engine is busy.
    #[arg(long, default_value_t = hetsched_slave::forward::DEFAULT_FORWARD_MARGIN, value_name = "FRACTION")]
    pub forward_margin: f64,
    /// Deadline of one forwarded call (sent, run on the peer, result back); a late or failed
    /// one runs here instead.
    #[arg(long, default_value = "60s", value_parser = super::programs::parse_duration)]
    pub forward_timeout: std::time::Duration,
    /// Never forward calls to peers (this slave still runs calls peers forward to it).
    #[arg(long)]
    pub no_forward: bool,
    /// The OCI runtime container tasks run with (docs/guide/containers.md); by default the
    /// slave tries runc, then crun, starting a memory-limited container with each at start,
    /// and uses the first that passes.
    #[arg(long, value_name = "PATH")]
    pub oci_runtime: Option<std::path::PathBuf>,
    /// Run no container tasks (no runtime probe at start; the master sends this node none).
    #[arg(long, conflicts_with = "oci_runtime")]
    pub no_containers: bool,
    /// A directory container images may be read from (oci:, oci-archive:, docker-archive:
    /// references under it); repeatable. Images anywhere else are refused (reason image).
    #[arg(long, value_name = "DIR")]
    pub image_dir: Vec<std::path::PathBuf>,
    /// Bound of the slave's unpacked images (least recently used ones no task holds go
    /// first): a whole number with a binary unit.
    #[arg(long, value_name = "SIZE", default_value = "20GiB", value_parser = hetsched_common::image::parse_size_bytes)]
    pub image_cache: u64,
    /// A PEM file of extra CAs trusted for docker:// registries (besides the system's
    /// /etc/ssl/certs/ca-certificates.crt).
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Option<std::path::PathBuf>,
    /// Registry credentials for docker:// pulls, in Docker's config.json format
    /// (`{"auths": {"HOST": {"auth": "BASE64(user:password)"}}}`).
    #[arg(long, value_name = "FILE")]
    pub registry_auth: Option<std::path::PathBuf>,
    /// S3 GPU pool of this node's GPUs: `single` (serves tasks asking fewer than 4 GPUs
    /// first), `multi` (serves tasks asking 4 or more first), or `auto`: the master splits
    /// the pools by the workload's demand (by GPU count until a GPU task is seen).
    #[arg(long, value_name = "auto|single|multi", default_value = "auto", value_parser = parse_gpu_pool)]
    pub gpu_pool: GpuPoolChoice,
    /// Optional HTTP address for /metrics and /healthz.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// The node's memory bandwidth, MB/s, for compressing CPU tasks that contend with GPU
    /// tasks (S3.6). Without it the slave measures it at its first start (a STREAM-like
    /// triad on every core, about a quarter of a second), keeps it in DATA/membw-total.json
    /// and reuses it (`--reprofile` measures again); this flag overrides it.
    #[arg(long, value_name = "MB/S", value_parser = parse_mbps)]
    pub membw_total: Option<f64>,
    /// S3.6: a CPU task using at least this share of --membw-total counts as contending
    /// (percent; `75` or `75%`).
    #[arg(long, value_name = "PERCENT", default_value = "75%", value_parser = parse_percent)]
    pub membw_threshold: f64,
    /// S3.6: a GPU task suffers when its utilisation is at least this much below its
    /// baseline (the mean of its first 5 samples), relative (percent; `10` or `10%`).
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = parse_percent)]
    pub util_drop: f64,
    /// Where resctrl (Intel RDT) is mounted; without memory-bandwidth monitoring there,
    /// tasks report their bandwidth through HETSCHED_MEMBW_FILE (emulated).
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/resctrl")]
    pub resctrl_root: PathBuf,
    #[command(flatten)]
    pub security: super::security::ServerSecurity,
}

/// A percentage, `75` or `75%`, as a share (0.75); within (0, 100].
fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v: f64 = t
        .strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (expected e.g. 75 or 75%)"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!("{s:?} is outside (0, 100] percent"));
    }
    Ok(v / 100.0)
}

/// A bandwidth in MB/s, above 0.
fn parse_mbps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a bandwidth in MB/s above 0 (e.g. 20000)"
        )),
    }
}

/// `--gpu-pool`: a pool, or `None` for `auto`.
#[derive(Clone, Copy, Debug)]
pub struct GpuPoolChoice(pub Option<hetsched_common::protocol::GpuPool>);

fn parse_gpu_pool(s: &str) -> Result<GpuPoolChoice, String> {
    match s {
        "auto" => Ok(GpuPoolChoice(None)),
        _ => s
            .parse()
            .map(|p| GpuPoolChoice(Some(p)))
            .map_err(|_| format!("unknown GPU pool {s:?}: expected auto, single or multi")),
    }
}

/// Runs a slave until stopped.
pub fn run(a: Args) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("info");
    hetsched_common::parse_host_port(&a.listen)?;
    for m in &a.masters {
        hetsched_common::parse_host_port(m)?;
    }
    if let Some(adv) = &a.advertise {
        hetsched_common::parse_host_port(adv)?;
    }
    if a.cpus == 0 {
        anyhow::bail!("--cpus must be at least 1");
    }
    let engines = match &a.engines {
        Some(p) => hetsched_slave::engine::EnginesFile::read(p)?,
        None => Default::default(),
    };
    if !(a.forward_margin.is_finite() && a.forward_margin >= 0.0) {
        return Err(super::exit::bad_input(format!(
            "--forward-margin must be a number ≥ 0 (a fraction: 0.5 means more than 1.5× as fast), not {}",
            a.forward_margin
        )));
    }
    let mut a = a;
    if a.security
        .install(hetsched_common::certs::Role::Slave, a.name.as_deref())?
    {
        // A slave registers only as the name in its certificate: take it, or refuse a
        // different --name now rather than be refused by the masters later.
        let cert_name = hetsched_common::wire::tls::current()
            .and_then(|t| t.identity.clone())
            .map(|i| i.name);
        match (&a.name, cert_name) {
            (Some(n), Some(c)) if *n != c => {
                return Err(super::exit::bad_input(format!(
                    "--name {n} differs from the name in this slave's certificate ({c})"
                )))
            }
            (None, Some(c)) => a.name = Some(c),
            _ => {}
        }
    }
    let engine_opts = hetsched_slave::EngineOptions {
        engines,
        profile: !a.no_profile,
        reprofile: a.reprofile,
        profile_budget: a.profile_budget,
        call_timeout: a.call_timeout,
        plugin_idle: a.plugin_idle,
        check_results: a.check_results,
        forward: hetsched_slave::forward::ForwardOptions {
            enabled: !a.no_forward,
            margin: a.forward_margin,
            timeout: a.forward_timeout,
        },
    };
    // A bad --registry-ca or --registry-auth file is reported now, not at the first pull.
    hetsched_slave::container::registry::Registry::new(
        a.registry_ca.as_deref(),
        a.registry_auth.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let http = a.http.clone();
    let reloader = a
        .security
        .reloader(hetsched_common::certs::Role::Slave, a.name.clone());
    let cfg = hetsched_slave::SlaveConfig {
        listen: a.listen,
        advertise: a.advertise,
        masters: a.masters,
        data_dir: a.data_dir,
        cpus: a.cpus,
        mem_mib: a.mem,
        gpus: a.gpus,
        gpu_model: a.gpu_model,
        name: a.name,
        partitions: a.partitions,
        supervisor: vec![
            std::env::current_exe()
                .context("cannot find this program (it starts the task supervisors)")?
                .into_os_string(),
            "supervise".into(),
        ],
        cgroup_root: (!a.no_cgroups).then_some(a.cgroup_root),
        favordynmods: !a.no_favordynmods,
        probes: hetsched_slave::ProbeOptions {
            resctrl_root: a.resctrl_root,
            contention: hetsched_slave::contention::ContentionConfig {
                membw_threshold: a.membw_threshold,
                util_drop: a.util_drop,
                membw_total_mbps: a.membw_total,
            },
            ..Default::default()
        },
        gpu_pool: a.gpu_pool.0,
        containers: hetsched_slave::container::ContainerOptions {
            oci_runtime: a.oci_runtime,
            disabled: a.no_containers,
            image_dirs: a.image_dir,
            image_cache_bytes: a.image_cache,
            registry_ca: a.registry_ca,
            registry_auth: a.registry_auth,
        },
    };
    // After the flags are checked (a bad one is reported alone), before any socket.
    super::log_open_file_limit();
    let system = actix::System::new();
    system
        .block_on(async move {
            if let Some(r) = reloader {
                tokio::spawn(r);
            }
            if let Some(addr) = http {
                let listener = hetsched_slave::http::HttpListener::bind(&addr).await?;
                tokio::spawn(async move {
                    if let Err(e) = listener.serve().await {
                        tracing::error!(error = %e, "http listener stopped");
                    }
                });
            }
            hetsched_slave::run_with_engines(cfg, hetsched_slave::Tuning::default(), engine_opts)
                .await
        })
        .context("slave stopped")
}
