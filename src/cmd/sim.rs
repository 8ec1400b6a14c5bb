//! `hetsched sim` — the master's real state machine and scheduler on a virtual clock
//! (`hetsched_master_core::sim`), fed from the Alibaba GPU trace; and `hetsched sim gen-trace`,
//! seeded trace variants after the FGD paper's recipes.
//!
//! Exit codes: 0 success, 2 bad input (the message names the file, line and column), 1 any
//! other failure. With `--json` the last line of stdout is one compact JSON object; progress
//! goes to stderr, as a bar only when stderr is a terminal.

use hetsched_master_core::sched::index::trace::{self, TracePod};
use hetsched_master_core::sim::{self, gen, Mode, Order, PolicyName, RunReport, SimNode};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `hetsched sim`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands of `hetsched sim`.
#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// Write a seeded variant of a pod list (FGD's recipes) as CSV.
    GenTrace(GenArgs),
}

/// Arguments of a simulation run.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Node list (`sn,cpu_milli,memory_mib,gpu,model`).
    #[arg(long, value_name = "FILE")]
    pub trace_nodes: Option<PathBuf>,
    /// Pod list: at least `name,cpu_milli,memory_mib,num_gpu,gpu_milli`, columns in any
    /// order; `gpu_spec`, `creation_time`, `deletion_time`, `scheduled_time` used if present.
    #[arg(long, value_name = "FILE")]
    pub trace_pods: Option<PathBuf>,
    /// A scenario (TOML: node groups and arrival groups) instead of a trace; see README.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["trace_nodes", "trace_pods"])]
    pub scenario: Option<PathBuf>,
    /// Pod order: creation (default when creation_time exists), file, or shuffle (seeded).
    #[arg(long, value_name = "creation|file|shuffle")]
    pub order: Option<String>,
    /// arrival-only (place in order, never release) or timed (default when the pod list has
    /// times).
    #[arg(long, value_name = "arrival-only|timed")]
    pub mode: Option<String>,
    /// Timed mode: divide arrival times by this factor (durations unchanged).
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    pub time_scale: f64,
    /// One policy: `[QUEUEING-]PLACEMENT[-nopreempt]`, QUEUEING in fifo, drf, pipeline,
    /// PLACEMENT in least-fit, best-fit, first-fit, next-fit, random, frag, auto (the
    /// master's default); `-nopreempt` turns S1 preemption and S3 take-back off.
    #[arg(long, conflicts_with = "compare", default_value = "auto")]
    pub policy: String,
    /// Several policies, comma-separated, each run on the same input.
    #[arg(long, value_delimiter = ',', value_name = "NAME,NAME,...")]
    pub compare: Option<Vec<String>>,
    /// Assign the trace's pods to N users round-robin (default: one user).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub users: u32,
    /// Seed of the shuffle order and of random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// S4.7: deal the placeable tasks of each plan to G groups, each selecting against its
    /// own partition of the index (part of the input: 1 decides as before).
    #[arg(long, default_value_t = 1, value_name = "G", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub placement_groups: u32,
    /// S4.7: threads computing the groups' selections (the decisions do not depend on it).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub placement_threads: u32,
    /// Issue 53: fair share as the master's `--fairshare-half-life`, on the simulated clock
    /// (after `--time-scale`): within one priority, users whose decayed past usage is
    /// smaller go first. `off` (the default here) keeps the plain DRF order.
    #[arg(long, default_value = "off", value_name = "DURATION|off", value_parser = super::master::parse_gc_after)]
    pub fairshare_half_life: super::master::GcAfter,
    /// Write an SVG of allocated GPU share against arrivals, a line per policy.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print one JSON line: {"runs": [...]}.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched sim gen-trace`.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// gpushare (more shared-GPU pods), multigpu (more multi-GPU pods), gpuspec (more pods
    /// pinned to one GPU model), cpu (more CPU-only pods).
    #[arg(long, value_name = "gpushare|multigpu|gpuspec|cpu")]
    pub kind: String,
    /// Percentage of the pods (GPU pods, except for `cpu`: all pods) of that kind, 0–100.
    #[arg(long, value_name = "N")]
    pub level: u32,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The pod list to draw from.
    #[arg(long, value_name = "FILE")]
    pub trace_pods: PathBuf,
    /// The node list (gpuspec: pods are pinned to models with a node that can hold them,
    /// in proportion to the models' devices).
    #[arg(long, value_name = "FILE")]
    pub trace_nodes: Option<PathBuf>,
    /// Pods to write (default: as many as the base list).
    #[arg(long)]
    pub pods: Option<usize>,
    /// Output file (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Why a run failed: bad input (exit 2) or anything else (exit 1).
enum Failure {
    BadInput(String),
    Other(String),
}

fn bad(msg: impl std::fmt::Display) -> Failure {
    Failure::BadInput(msg.to_string())
}

/// Runs `hetsched sim` and returns its exit code.
pub fn main(args: Args) -> ExitCode {
    let result = match args.command {
        Some(SimCommand::GenTrace(g)) => gen_trace(g),
        None => run(args.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::BadInput(m)) => {
            eprintln!("error: {}", m.replace('\n', " "));
            ExitCode::from(2)
        }
        Err(Failure::Other(m)) => {
            eprintln!("error: {}", m.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| bad(format!("{}: {e}", path.display())))
}

fn load_nodes(path: &Path) -> Result<Vec<SimNode>, Failure> {
    let nodes =
        trace::parse_nodes(&read(path)?).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    Ok(nodes.into_iter().map(SimNode::from).collect())
}

fn load_pods(path: &Path) -> Result<trace::PodList, Failure> {
    trace::parse_pod_list(&read(path)?).map_err(|e| bad(format!("{}: {e}", path.display())))
}

fn run(a: RunArgs) -> Result<(), Failure> {
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        return Err(bad("--time-scale must be a positive number"));
    }
    if a.users == 0 {
        return Err(bad("--users must be at least 1"));
    }
    let names = a.compare.clone().unwrap_or_else(|| vec![a.policy.clone()]);
    let policies: Vec<PolicyName> = names
        .iter()
        .map(|n| n.parse::<PolicyName>().map_err(bad))
        .collect::<Result<_, _>>()?;
    if policies.is_empty() {
        return Err(bad("--compare needs at least one policy"));
    }
    let mut setup = sim::Setup::default();
    let (nodes, tasks, mode, source) = match &a.scenario {
        Some(path) => {
            let sc: sim::scenario::Scenario = toml::from_str(&read(path)?)
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            let (nodes, mut tasks) = sc
                .build()
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            setup = sc
                .setup()
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            for t in &mut tasks {
                t.arrival_ms = (t.arrival_ms as f64 / a.time_scale).round() as u64;
            }
            let mode: Mode = match &a.mode {
                Some(m) => m.parse().map_err(bad)?,
                None => Mode::Timed,
            };
            (nodes, tasks, mode, path.clone())
        }
        None => {
            let (Some(nodes_path), Some(pods_path)) = (&a.trace_nodes, &a.trace_pods) else {
                return Err(bad(
                    "give --trace-nodes FILE and --trace-pods FILE, or --scenario FILE \
                     (try 'hetsched sim --help')",
                ));
            };
            let nodes = load_nodes(nodes_path)?;
            let list = load_pods(pods_path)?;
            let order: Order = match &a.order {
                Some(o) => o.parse().map_err(bad)?,
                None if list.has_times => Order::Creation,
                None => Order::File,
            };
            let mode: Mode = match &a.mode {
                Some(m) => m.parse().map_err(bad)?,
                None if list.has_times => Mode::Timed,
                None => Mode::ArrivalOnly,
            };
            if mode == Mode::Timed && !list.has_times {
                return Err(bad(format!(
                    "{}: {}",
                    pods_path.display(),
                    sim::SimError::NoTimes
                )));
            }
            let order_idx = sim::ordered(&list.pods, order, a.seed);
            let tasks = sim::tasks_from_trace(&list.pods, &order_idx, a.time_scale, a.users);
            (nodes, tasks, mode, pods_path.clone())
        }
    };
    if nodes.is_empty() {
        return Err(bad(format!("{}: no nodes", source.display())));
    }
    setup.parallel = hetsched_master_core::sched::ParallelConfig {
        groups: a.placement_groups,
        threads: a.placement_threads,
    };
    setup.fairshare_half_life_ms = a
        .fairshare_half_life
        .0
        .map(|d| (d.as_millis() as u64).max(1));
    eprintln!(
        "sim: {} nodes, {} tasks, {} mode, seed {}",
        nodes.len(),
        tasks.len(),
        match mode {
            Mode::ArrivalOnly => "arrival-only",
            Mode::Timed => "timed",
        },
        a.seed
    );
    let bar = std::io::stderr().is_terminal() && !a.json;
    let mut runs: Vec<RunReport> = Vec::with_capacity(policies.len());
    for p in &policies {
        let total = tasks.len();
        let mut last_drawn = usize::MAX;
        let mut progress = |done: usize| {
            if bar {
                let pct = done * 100 / total.max(1);
                if pct != last_drawn {
                    last_drawn = pct;
                    let filled = pct * 30 / 100;
                    eprint!(
                        "\r{:<16} [{}{}] {done}/{total}",
                        p.given,
                        "#".repeat(filled),
                        " ".repeat(30 - filled)
                    );
                }
            }
        };
        let t0 = Instant::now();
        let mut r = sim::run_with(&nodes, &tasks, p, mode, a.seed, &setup, &mut progress);
        r.sim_ms = t0.elapsed().as_millis() as u64;
        if bar {
            eprintln!();
        }
        eprintln!("sim: {} done in {} ms", p.given, r.sim_ms);
        runs.push(r);
    }
    if let Some(path) = &a.plot {
        let title = format!(
            "{} ({} pods, {})",
            source
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default(),
            tasks.len(),
            match mode {
                Mode::ArrivalOnly => "arrival-only",
                Mode::Timed => "timed",
            }
        );
        let lines: Vec<(String, Vec<f64>)> = runs
            .iter()
            .map(|r| (r.policy.clone(), r.curve.clone()))
            .collect();
        std::fs::write(path, sim::plot::svg(&title, &lines))
            .map_err(|e| Failure::Other(format!("writing {}: {e}", path.display())))?;
        eprintln!("sim: plot written to {}", path.display());
    }
    if a.json {
        super::print_json(&serde_json::json!({ "runs": runs }))
            .map_err(|e| Failure::Other(e.to_string()))?;
    } else {
        print!("{}", table(&runs));
    }
    Ok(())
}

fn table(runs: &[RunReport]) -> String {
    let f = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |x| format!("{x:.digits$}"));
    let header = [
        "policy",
        "placed",
        "failed",
        "first_fail",
        "unalloc@fail",
        "gpu_alloc@end",
        "cpu_wait_s",
        "gpu_wait_s",
        "gpu_p95_s",
        "sim_ms",
    ];
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                r.placed.to_string(),
                r.failed.to_string(),
                r.first_failure_index
                    .map_or("-".to_string(), |i| i.to_string()),
                f(r.unallocated_gpu_share_at_first_failure, 4),
                format!("{:.4}", r.gpu_allocated_share_at_end),
                f(r.cpu_queue_mean_s, 1),
                f(r.gpu_queue_mean_s, 1),
                f(r.gpu_queue_p95_s, 1),
                r.sim_ms.to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |cells: Vec<&str>| -> String {
        let mut l = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c == 0 {
                l.push_str(&format!("{cell:<w$}", w = widths[c]));
            } else {
                l.push_str(&format!("  {cell:>w$}", w = widths[c]));
            }
        }
        l.push('\n');
        l
    };
    out.push_str(&line(header.to_vec()));
    for r in &rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn gen_trace(g: GenArgs) -> Result<(), Failure> {
    let kind: gen::VariantKind = g.kind.parse().map_err(bad)?;
    let list = load_pods(&g.trace_pods)?;
    let models = match &g.trace_nodes {
        Some(p) => gen::ModelShapes::of(
            &load_nodes(p)?
                .into_iter()
                .map(|n| n.resources)
                .collect::<Vec<_>>(),
        ),
        None if kind == gen::VariantKind::GpuSpec => {
            return Err(bad(
                "--kind gpuspec needs --trace-nodes FILE (the models pods are pinned to)",
            ))
        }
        None => gen::ModelShapes::default(),
    };
    let count = g.pods.unwrap_or(list.pods.len());
    let pods: Vec<TracePod> =
        gen::variant(&list.pods, kind, g.level, count, g.seed, &models).map_err(bad)?;
    let csv = gen::to_csv(&pods);
    match &g.out {
        Some(p) => std::fs::write(p, csv)
            .map_err(|e| Failure::Other(format!("writing {}: {e}", p.display())))?,
        None => {
            use std::io::Write;
            std::io::stdout()
                .write_all(csv.as_bytes())
                .map_err(|e| Failure::Other(e.to_string()))?;
        }
    }
    eprintln!(
        "gen-trace: {} pods, kind {}, level {}%, seed {}",
        pods.len(),
        g.kind,
        g.level,
        g.seed
    );
    Ok(())
}
