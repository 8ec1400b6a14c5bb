//! `hetsched` — one binary for masters, slaves, clients, the local cluster launcher and the
//! benchmarks. The CLI only parses and delegates; the work lives in the workspace crates.

mod cmd;

// Every process the binary runs (masters, slaves, helpers) allocates through mimalloc:
// under glibc's malloc, allocation was a fifth of a 10,000-slave leader's CPU
// (docs/perf-log/2026-11-29.md#the-allocator).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hetsched",
    version,
    about = "A replicated, heterogeneity-aware cluster scheduler",
    long_about = "A replicated, heterogeneity-aware cluster scheduler.\n\n\
        Start a local cluster with a demo workload:  hetsched up\n\
        Client commands take the master list first:  hetsched --masters 127.0.0.1:7001,127.0.0.1:7002 status"
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

// The options every command takes before its name (no `///` here: a flattened struct's doc
// comment would replace the program's description in --help).
#[derive(clap::Args, Debug)]
struct Globals {
    /// Master cluster addresses for client commands (HOST:PORT,...). Not used by `up`/`bench`,
    /// whose `--masters N` is a count.
    #[arg(
        long,
        env = "HETSCHED_MASTERS",
        value_delimiter = ',',
        value_name = "HOST:PORT,..."
    )]
    masters: Option<Vec<String>>,
    /// Certificates for talking to a secured cluster: `ca.crt`, and optionally
    /// `client.USER.crt` / `client.USER.key` (see `hetsched certs`).
    #[arg(long, env = "HETSCHED_CERTS_DIR", value_name = "DIR")]
    certs_dir: Option<std::path::PathBuf>,
    /// API token for client commands (see `hetsched acl`): when given it decides who the
    /// caller is, over the client certificate's name. Ignored by --insecure masters.
    #[arg(
        long,
        env = "HETSCHED_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a master (a Raft member holding the cluster state).
    Master(cmd::master::Args),
    /// Run a slave (executes tasks on this machine).
    Slave(cmd::slave::Args),
    /// Submit a job of one or more tasks.
    Submit(cmd::client::SubmitArgs),
    /// Cancel a job's unfinished tasks, or one task (--task ID).
    Cancel(cmd::client::CancelArgs),
    /// Show cluster status.
    Status(cmd::client::StatusArgs),
    /// List jobs (newest first), or one job.
    Jobs(cmd::client::JobsArgs),
    /// List tasks (newest first).
    Tasks(cmd::client::TasksArgs),
    /// List nodes.
    Nodes(cmd::client::ListArgs),
    /// Why a task waits: its reason, every node's verdict, preemption, its queue position.
    Explain(cmd::client::ExplainArgs),
    /// Ended attempts, one line each, with what they used (like Slurm's sacct).
    History(cmd::client::HistoryArgs),
    /// Usage totals per user, partition or day: CPU-hours, GPU-hours, efficiency (like sreport).
    Usage(cmd::client::UsageArgs),
    /// List or change the masters (Raft members).
    Members(cmd::client::MembersArgs),
    /// The S1 priority configuration: users, groups, priorities and quotas per partition.
    #[command(subcommand)]
    Config(cmd::config::ConfigCommand),
    /// Run a local cluster (masters and slaves as child processes) with a demo workload.
    Up(cmd::up::Args),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Plan a batch of data-local jobs (S2 makespan planner).
    PlanBatch(cmd::plan_batch::Args),
    /// Plan a data-local batch against the live cluster and run it (S2, gang-started).
    SubmitBatch(cmd::batch::SubmitBatchArgs),
    /// A batch's planned and actual makespan, per job and in total (`N` or `batch-N`).
    Batch(cmd::batch::BatchArgs),
    /// Submit a flow file's steps as jobs, all or none (`[[step]]` tables with `needs`).
    SubmitFlow(cmd::flow::SubmitFlowArgs),
    /// A flow's steps with their jobs and states (`N` or `flow-N`).
    Flow(cmd::flow::FlowArgs),
    /// Submit a Slurm batch script unchanged (its #SBATCH lines; `sbatch --help` lists them).
    Sbatch(cmd::sbatch::SbatchArgs),
    /// Print what a task wrote (stdout, or --stderr), also after it ended.
    Logs(cmd::ops::LogsArgs),
    /// Follow a job until it ends; exit 0 if every task succeeded, 1 otherwise.
    Watch(cmd::ops::WatchArgs),
    /// Drain a node: no new tasks; running ones finish or are re-queued at --deadline.
    Drain(cmd::ops::DrainArgs),
    /// Let a drained node take new tasks again.
    Undrain(cmd::ops::UndrainArgs),
    /// Job spec files.
    #[command(subcommand)]
    Job(cmd::ops::JobAction),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(cmd::ops::CompletionsArgs),
    /// Simulate the real scheduler on a trace over a virtual clock; compare policies.
    Sim(cmd::sim::Args),
    /// Show the call records of an API-program task (which engine ran each call).
    Calls(cmd::programs::CallsArgs),
    /// Profile this machine's engines offline and print the selection table (S0.5).
    Profile(cmd::programs::ProfileArgs),
    /// Show every slave's selection table and the task-engine relation (S0.1, S0.5).
    Profiles(cmd::programs::ProfilesArgs),
    /// Fault injection: run a scenario on a local cluster and check the history.
    #[command(subcommand)]
    Chaos(cmd::chaos::ChaosCommand),
    /// Cluster certificates: a CA, and certificates carrying a role and a name.
    #[command(subcommand)]
    Certs(cmd::security::CertsCommand),
    /// Users' API tokens and their roles (user, operator, admin).
    #[command(subcommand)]
    Acl(cmd::acl::AclCommand),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Raft throughput: committed proposals/s on a local cluster of real masters (fsync on).
    Raft(cmd::bench_raft::RaftArgs),
    /// Failover: time from kill -9 of the leader until a new leader commits.
    Failover(cmd::bench_raft::FailoverArgs),
    /// Placement index vs linear scan (S4), on a random cluster or the Alibaba trace.
    Placement(cmd::bench_placement::Args),
    /// End to end: submit → placed → running → completed, with real or in-process slaves.
    E2e(cmd::bench_e2e::E2eArgs),
    /// Many slaves: heartbeat cost, placements/s, submit→dispatch, memory, with in-process
    /// slaves speaking the full protocol.
    Scale(cmd::bench_scale::ScaleArgs),
    /// `bench scale`'s helper: a share of its in-process slaves (started by `bench scale`).
    #[command(hide = true)]
    ScaleSlaves(cmd::bench_scale_slaves::ScaleSlavesArgs),
    /// Issue 51: a 1 → N → 1 flow against the same jobs without dependencies (time to the
    /// last step's start).
    Flow(cmd::bench_flow::FlowArgs),
}

/// The command line with the exit-code table in every command's `--help`.
fn cli_command() -> clap::Command {
    fn with_exit_codes(c: clap::Command) -> clap::Command {
        c.after_help(cmd::exit::EXIT_CODES_HELP)
            .mut_subcommands(with_exit_codes)
    }
    with_exit_codes(Cli::command())
}

/// The parsed command line: [`parse_hot`] when it can, else against [`cli_command`].
fn parse_cli() -> Result<Cli, clap::Error> {
    if let Some(cli) = parse_hot(std::env::args_os()) {
        return Ok(cli);
    }
    cli_command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
}

/// The commands scripts run at a rate (`submit`, and the reads that follow it), parsed with
/// only their own arguments declared. Declaring the whole command line (hundreds of
/// arguments over 29 commands) took 0.9–1.1 ms of each such command's start here, against
/// 0.3–0.4 ms for one command's (docs/perf-log/2026-11-28.md, "Idle submit: the CLI's parse"), mostly
/// first touches of code. `None` whenever this parse fails, for whatever reason (help, a
/// usage error, an option before the command's name): the caller parses again against the
/// whole command line, so everything it prints is unchanged.
fn parse_hot(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<Cli> {
    use clap::{Args, Subcommand};
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let name = args.get(1)?.to_str()?;
    type Declare = fn(clap::Command) -> clap::Command;
    let (name, declare): (&'static str, Declare) = match name {
        "submit" => ("submit", cmd::client::SubmitArgs::augment_args),
        "tasks" => ("tasks", cmd::client::TasksArgs::augment_args),
        "jobs" => ("jobs", cmd::client::JobsArgs::augment_args),
        "status" => ("status", cmd::client::StatusArgs::augment_args),
        "cancel" => ("cancel", cmd::client::CancelArgs::augment_args),
        _ => return None,
    };
    let hot = Globals::augment_args(clap::Command::new("hetsched"))
        .subcommand(declare(clap::Command::new(name)));
    let m = hot.try_get_matches_from(&args).ok()?;
    let globals = Globals::from_arg_matches(&m).ok()?;
    let command = Command::from_arg_matches(&m).ok()?;
    debug_assert!(Command::has_subcommand(name));
    Some(Cli { globals, command })
}

fn main() -> ExitCode {
    // The slave's long-lived supervisor pool (`hetsched supervise --pool DIR`, started by the
    // slave): hidden from --help, and dispatched before anything else so that it stays cheap
    // to start.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "supervise") {
        let rest: Vec<std::ffi::OsString> = args.collect();
        let code = hetsched_slave::supervisor::main(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match parse_cli() {
        Ok(c) => c,
        Err(e) => return cmd::clap_error(e),
    };
    if matches!(
        cli.command,
        Command::Submit(_)
            | Command::Cancel(_)
            | Command::Status(_)
            | Command::Jobs(_)
            | Command::Tasks(_)
            | Command::Nodes(_)
            | Command::Explain(_)
            | Command::History(_)
            | Command::Usage(_)
            | Command::Members(_)
            | Command::Config(_)
            | Command::PlanBatch(_)
            | Command::SubmitBatch(_)
            | Command::Batch(_)
            | Command::SubmitFlow(_)
            | Command::Flow(_)
            | Command::Sbatch(_)
            | Command::Logs(_)
            | Command::Watch(_)
            | Command::Drain(_)
            | Command::Undrain(_)
            | Command::Job(_)
            | Command::Completions(_)
            | Command::Calls(_)
            | Command::Profile(_)
            | Command::Profiles(_)
            | Command::Acl(_)
    ) {
        restore_sigpipe();
    }
    let masters = cli.globals.masters.unwrap_or_default();
    let is_client = !matches!(
        cli.command,
        Command::Master(_)
            | Command::Slave(_)
            | Command::Up(_)
            | Command::Bench(_)
            | Command::Sim(_)
            | Command::Certs(_)
    );
    if is_client {
        // Client commands log only when asked (`HETSCHED_LOG=hetsched::trace=debug` times
        // each hop of a submit): a subscriber is not free to set up.
        if std::env::var_os("HETSCHED_LOG").is_some() {
            hetsched_common::telemetry::init_logging("warn");
            tracing::debug!(target: "hetsched::trace", "cli: arguments parsed");
        }
        if let Err(e) = cmd::security::install_client(
            cli.globals.certs_dir.as_ref(),
            None,
            cli.globals.token.as_deref(),
        ) {
            eprintln!("error: {e:#}");
            return ExitCode::from(cmd::exit::code_of(&e));
        }
        tracing::debug!(target: "hetsched::trace", "cli: certificates loaded");
    }
    let result = match cli.command {
        // Exits 2 on bad input (trace files), so it maps its own errors.
        Command::Sim(a) => return cmd::sim::main(a),
        Command::Master(a) => cmd::master::run(a),
        Command::Slave(a) => cmd::slave::run(a),
        Command::Submit(a) => cmd::client::submit(&masters, a),
        Command::Cancel(a) => cmd::client::cancel(&masters, a),
        Command::Status(a) => cmd::client::status(&masters, a),
        Command::Jobs(a) => cmd::client::jobs(&masters, a),
        Command::Tasks(a) => cmd::client::tasks(&masters, a),
        Command::Nodes(a) => cmd::client::nodes(&masters, a),
        Command::Explain(a) => cmd::client::explain(&masters, a),
        Command::History(a) => cmd::client::history(&masters, a),
        Command::Usage(a) => cmd::client::usage(&masters, a),
        Command::Members(a) => cmd::client::members(&masters, a),
        Command::Config(c) => cmd::config::run(&masters, c),
        Command::Acl(c) => cmd::acl::run(&masters, c),
        Command::Up(a) => cmd::up::run(a),
        Command::Bench(BenchCommand::Raft(a)) => cmd::bench_raft::raft(a),
        Command::Bench(BenchCommand::Failover(a)) => cmd::bench_raft::failover(a),
        Command::Bench(BenchCommand::Placement(a)) => cmd::bench_placement::run(a),
        Command::Bench(BenchCommand::E2e(a)) => cmd::bench_e2e::run(a),
        Command::Bench(BenchCommand::Scale(a)) => cmd::bench_scale::run(a),
        Command::Bench(BenchCommand::ScaleSlaves(a)) => cmd::bench_scale_slaves::run(a),
        Command::Bench(BenchCommand::Flow(a)) => cmd::bench_flow::run(a),
        Command::PlanBatch(a) => cmd::plan_batch::run(a),
        Command::SubmitBatch(a) => cmd::batch::submit(&masters, a),
        Command::Batch(a) => cmd::batch::show(&masters, a),
        Command::SubmitFlow(a) => cmd::flow::submit(&masters, a),
        Command::Flow(a) => cmd::flow::show(&masters, a),
        Command::Sbatch(a) => cmd::sbatch::run(&masters, a),
        Command::Logs(a) => cmd::ops::logs(&masters, a),
        Command::Watch(a) => cmd::ops::watch(&masters, a),
        Command::Drain(a) => cmd::ops::drain(&masters, a),
        Command::Undrain(a) => cmd::ops::undrain(&masters, a),
        Command::Job(a) => cmd::ops::job(a),
        Command::Completions(a) => cmd::ops::completions(a, &mut cli_command()),
        Command::Calls(a) => cmd::programs::calls(&masters, a),
        Command::Profile(a) => cmd::programs::profile(a),
        Command::Profiles(a) => cmd::programs::profiles(&masters, a),
        Command::Chaos(c) => cmd::chaos::run(c),
        Command::Certs(c) => cmd::security::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes.
            let mut line = format!("error: {e}");
            for cause in e.chain().skip(1) {
                line.push_str(&format!(": {cause}"));
            }
            eprintln!("{}", line.replace('\n', " "));
            ExitCode::from(cmd::exit::code_of(&e))
        }
    }
}

/// Client commands end quietly when their output pipe closes (`hetsched tasks | head`), as
/// Unix tools do; Rust ignores SIGPIPE by default, which would turn that into a panic.
/// Servers keep the default: a peer closing a socket must not kill them.
fn restore_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: called once at start-up before any other thread exists; SIG_DFL installs no
    // handler code.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot commands parse to the same `Cli` with only their own arguments declared as
    /// against the whole command line, and anything the hot parse refuses falls through.
    #[test]
    fn hot_commands_parse_as_the_whole_command_line_does() {
        let lines: &[&[&str]] = &[
            &["submit", "--cpus", "1", "--mem", "16", "--", "true"],
            &[
                "submit", "--json", "--count", "3000", "--cpus", "1", "--mem", "16", "--", "true",
            ],
            &[
                "submit", "--cpus", "2", "--gpus", "1", "--user", "u", "--", "sh", "-c", "x",
            ],
            &["tasks", "--json", "--job", "7"],
            &["tasks"],
            &["jobs", "--json"],
            &["jobs", "3"],
            &["status", "--json"],
            &["status"],
            &["cancel", "4"],
            &["cancel", "--task", "9"],
        ];
        for line in lines {
            let argv: Vec<std::ffi::OsString> = std::iter::once("hetsched")
                .chain(line.iter().copied())
                .map(Into::into)
                .collect();
            let whole = cli_command()
                .try_get_matches_from(&argv)
                .and_then(|m| Cli::from_arg_matches(&m));
            let hot = parse_hot(argv.clone());
            match (whole, hot) {
                (Ok(w), Some(h)) => assert_eq!(format!("{w:?}"), format!("{h:?}"), "{line:?}"),
                (w, h) => panic!("{line:?}: whole {w:?}, hot {h:?}"),
            }
        }
        for refused in [
            &["submit", "--help"][..],
            &["submit", "--cpus"],
            &["status", "--bogus"],
            &["--masters", "a:1", "status"],
            &["bench", "raft"],
        ] {
            let argv = std::iter::once("hetsched")
                .chain(refused.iter().copied())
                .map(Into::into);
            assert!(parse_hot(argv).is_none(), "{refused:?}");
        }
    }
}
