//! `hetsched` — one binary for masters, slaves, clients, the local cluster launcher and the
//! benchmarks. The CLI only parses and delegates; the work lives in the workspace crates.

mod cmd;

use clap::{Parser, Subcommand};
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
    /// Cancel a job's unfinished tasks.
    Cancel(cmd::client::CancelArgs),
    /// Show cluster status.
    Status(cmd::client::StatusArgs),
    /// List jobs.
    Jobs(cmd::client::JobsArgs),
    /// List tasks.
    Tasks(cmd::client::TasksArgs),
    /// List nodes.
    Nodes(cmd::client::ListArgs),
    /// List or change the masters (Raft members).
    Members(cmd::client::MembersArgs),
    /// Run a local cluster (masters and slaves as child processes) with a demo workload.
    Up(cmd::up::Args),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Plan a batch of data-local jobs (S2 makespan planner).
    PlanBatch(cmd::plan_batch::Args),
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
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
            | Command::Members(_)
            | Command::PlanBatch(_)
    ) {
        restore_sigpipe();
    }
    let masters = cli.masters.unwrap_or_default();
    let result = match cli.command {
        Command::Master(a) => cmd::master::run(a),
        Command::Slave(a) => cmd::slave::run(a),
        Command::Submit(a) => cmd::client::submit(&masters, a),
        Command::Cancel(a) => cmd::client::cancel(&masters, a),
        Command::Status(a) => cmd::client::status(&masters, a),
        Command::Jobs(a) => cmd::client::jobs(&masters, a),
        Command::Tasks(a) => cmd::client::tasks(&masters, a),
        Command::Nodes(a) => cmd::client::nodes(&masters, a),
        Command::Members(a) => cmd::client::members(&masters, a),
        Command::Up(a) => cmd::up::run(a),
        Command::Bench(BenchCommand::Raft(a)) => cmd::bench_raft::raft(a),
        Command::Bench(BenchCommand::Failover(a)) => cmd::bench_raft::failover(a),
        Command::Bench(BenchCommand::Placement(a)) => cmd::bench_placement::run(a),
        Command::Bench(BenchCommand::E2e(a)) => cmd::bench_e2e::run(a),
        Command::PlanBatch(a) => cmd::plan_batch::run(a),
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
            match e.downcast_ref::<cmd::client::ServerError>() {
                Some(se) => ExitCode::from(se.exit_code()),
                None => ExitCode::FAILURE,
            }
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
