//! `hetsched chaos run`: starts a local cluster of real processes (job GC off, admin listeners
//! on; with `--netns` each in its own network namespace) — or, with `--attach --masters`, uses
//! running masters through their admin listeners —
//! drives a seeded workload across users of different priorities (command tasks that append
//! `TASK ATTEMPT` to a side-effect file, and API programs), injects a seeded schedule of faults
//! (kill -9 / restart, SIGSTOP / SIGCONT, Raft partitions and delays through the admin port's
//! transport faults, or with `--netns` partitions as nftables rules between the namespaces;
//! attached: the request-based ones only), heals, lets the cluster settle,
//! exports every master's committed log through the admin port, and hands the recorded
//! history, final state and logs to the checker in `hetsched-chaos`.
//! Exit 0: no violation; 1: violations (the run directory is kept and the replay command
//! printed); 2: bad arguments (and `--netns` where network namespaces cannot be used: not
//! root, or `ip` or `nft` missing).
//!
//! One module per concern: [`args`] (the command line and its checks), [`setup`] (a local
//! cluster or attached masters), [`workload`] (the seeded jobs), [`nemesis`] (fault
//! injection and healing), [`netfault`] (the real partitions of `--netns`), [`observe`] (the recorded history and what is read back from the
//! masters), [`run`] (the run loop, the check and the report).

mod args;
mod nemesis;
mod netfault;
mod observe;
mod run;
mod setup;
mod workload;

pub use args::ChaosCommand;

use anyhow::Context;
use hetsched_chaos::Scenario;

/// Runs a `chaos` subcommand.
pub fn run(c: ChaosCommand) -> anyhow::Result<()> {
    match c {
        ChaosCommand::Scenarios => {
            for (name, _) in hetsched_chaos::scenario::BUILTIN {
                let s = Scenario::builtin(name)
                    .context("built-in scenario")?
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("{name:<18} {}", s.description);
            }
            Ok(())
        }
        ChaosCommand::Run(a) => run::run_scenario(a),
    }
}
