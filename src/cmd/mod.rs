//! One module per subcommand.

pub mod acl;
pub mod batch;
pub mod bench_e2e;
pub mod bench_flow;
pub mod bench_placement;
pub mod bench_placement_plan;
pub mod bench_raft;
pub mod bench_scale;
mod bench_scale_fleet;
pub mod bench_scale_slaves;
pub mod chaos;
pub mod client;
pub mod config;
pub mod exit;
pub mod flow;
/// The launcher lives in the library (tests use it too).
pub use hetsched::local;
pub mod master;
pub mod ops;
pub mod plan_batch;
pub mod programs;
pub mod sbatch;
pub mod security;
pub mod sim;
pub mod slave;
pub mod table;
pub mod up;
pub mod up_batch;
mod up_forward;
pub mod up_size;
mod up_steal;

use std::process::ExitCode;

/// Prints a clap error as one line (help and version print as usual).
pub fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = e.render().to_string();
            let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("invalid command line");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // "the following required arguments were not provided:" names them next.
            let first = match lines.next() {
                Some(next) if first.ends_with(':') => format!("{first} {next}"),
                _ => first.to_string(),
            };
            eprintln!("error: {first} (try 'hetsched --help')");
            ExitCode::from(2)
        }
    }
}

/// Prints `value` as one compact JSON line on stdout (an error, not a panic, when stdout is
/// a closed pipe).
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let line = serde_json::to_string(value)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Raises this process's soft open-file limit to its hard limit (a master or slave holds a
/// descriptor per connection) and logs both, so an operator who meets "out of file
/// descriptors" later knows which limit it was.
pub fn log_open_file_limit() {
    match hetsched_common::wire::fdlimit::raise_open_file_limit() {
        Ok(l) => tracing::info!(soft = l.soft, hard = l.hard, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
}
