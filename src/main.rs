//! `hetsched` — one binary for masters, slaves, clients, the local cluster launcher and the
//! benchmarks. The CLI only parses and delegates; the work lives in the workspace crates.

mod cmd;

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
    #[command(subcommand)]
    command: Command,
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
}

/// The command line with the exit-code table in every command's `--help`.
fn cli_command() -> clap::Command {
    fn with_exit_codes(c: clap::Command) -> clap::Command {
        c.after_help(cmd::exit::EXIT_CODES_HELP)
            .mut_subcommands(with_exit_codes)
    }
    with_exit_codes(Cli::command())
}

fn main() -> ExitCode {
    // The per-attempt supervisor the slave starts (`hetsched supervise ATTEMPT_DIR`): hidden
    // from --help, and dispatched before anything else so that it stays cheap to start.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "supervise") {
        let rest: Vec<std::ffi::OsString> = args.collect();
        let code = hetsched_slave::supervisor::main(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = match cli_command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
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
            | Command::Members(_)
            | Command::Config(_)
            | Command::PlanBatch(_)
            | Command::SubmitBatch(_)
            | Command::Batch(_)
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
    let masters = cli.masters.unwrap_or_default();
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
        if let Err(e) =
            cmd::security::install_client(cli.certs_dir.as_ref(), None, cli.token.as_deref())
        {
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
        Command::Members(a) => cmd::client::members(&masters, a),
        Command::Config(c) => cmd::config::run(&masters, c),
        Command::Acl(c) => cmd::acl::run(&masters, c),
        Command::Up(a) => cmd::up::run(a),
        Command::Bench(BenchCommand::Raft(a)) => cmd::bench_raft::raft(a),
        Command::Bench(BenchCommand::Failover(a)) => cmd::bench_raft::failover(a),
        Command::Bench(BenchCommand::Placement(a)) => cmd::bench_placement::run(a),
        Command::Bench(BenchCommand::E2e(a)) => cmd::bench_e2e::run(a),
        Command::Bench(BenchCommand::Scale(a)) => cmd::bench_scale::run(a),
        Command::PlanBatch(a) => cmd::plan_batch::run(a),
        Command::SubmitBatch(a) => cmd::batch::submit(&masters, a),
        Command::Batch(a) => cmd::batch::show(&masters, a),
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
