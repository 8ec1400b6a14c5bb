//! The `hetsched chaos` command line: its subcommands and flags, the checks that turn bad
//! ones into exit 2 before anything starts, and the replay command a run prints.

use super::super::exit;
use hetsched_chaos::Scenario;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// `ack-before-commit` (acknowledge submits that never commit: `acked-lost`),
    /// `skip-dependency-gate` (plan without the dependency gate: `early-start`; needs a
    /// scenario with `chain_share` or `flow_share`).
    #[arg(long, value_name = "BUG", value_parser = ["ack-before-commit", "skip-dependency-gate"])]
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
    /// Start every master and slave in its own network namespace on a private bridge and
    /// make partitions real: nftables rules inside the namespaces (delays stay in-process).
    /// Needs root, `ip` (iproute2) and `nft` (nftables); exits 2 naming what is missing.
    #[arg(long, conflicts_with = "attach")]
    pub netns: bool,
}

impl RunArgs {
    /// The scenario to run, once the flags are known to make sense together (each check an
    /// exit-2 error, in this order: the scenario, `--duration`, `--netns`, `--attach`).
    pub(super) fn checked_scenario(&self) -> anyhow::Result<Scenario> {
        let sc = load_scenario(&self.scenario)?;
        if self.duration.is_zero() {
            return Err(exit::bad_input("--duration: must be greater than 0"));
        }
        if self.netns {
            if let Err(e) = super::super::local::netns::check_available(&["ip", "nft"]) {
                return Err(exit::bad_input(format!(
                    "--netns is not available on this machine: {e}; run without --netns \
                     (partitions then go through the masters' admin ports)"
                )));
            }
        }
        if self.attach && self.masters.iter().all(|m| m.trim().is_empty()) {
            return Err(exit::bad_input(
                "--attach needs --masters with the masters' admin addresses (HOST:PORT,...)",
            ));
        }
        Ok(sc)
    }

    /// The command line that runs the same scenario, seed and faults again.
    pub(super) fn replay_command(&self, seed: u64) -> String {
        let mut replay = format!(
            "hetsched chaos run --scenario {} --seed {seed} --duration {}",
            self.scenario,
            humantime::format_duration(self.duration)
        );
        if self.attach {
            replay.push_str(&format!(" --attach --masters {}", self.masters.join(",")));
        }
        if self.netns {
            replay.push_str(" --netns");
        }
        if let Some(bug) = &self.bug {
            replay.push_str(&format!(" --bug {bug}"));
        }
        replay
    }
}

/// A built-in scenario by name, or a scenario TOML file; an exit-2 error otherwise.
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
