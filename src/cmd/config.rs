//! `hetsched config apply|show` (the S1 priority configuration) and `submit --dry-run`.

use super::client::{call, request_id};
use super::exit;
use anyhow::{bail, Context};
use hetsched_common::priority::{parse_priority_toml, Principal, PriorityConfig};
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::JobSpec;
use std::path::PathBuf;

/// `hetsched config ...`.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Replicate a priority configuration file (TOML; see README "Priorities"). A bad file is
    /// rejected whole, naming its line and key (exit 2), and the running one stays.
    Apply {
        /// The file.
        file: PathBuf,
        /// Print the configuration now in force as one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Show the priority configuration in force and its version.
    Show {
        /// Print one JSON line.
        #[arg(long)]
        json: bool,
        /// Allow a follower's answer.
        #[arg(long)]
        stale: bool,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs a `config` subcommand.
pub fn run(masters: &[String], c: ConfigCommand) -> anyhow::Result<()> {
    let (req, json) = match c {
        ConfigCommand::Apply { file, json } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| exit::bad_input(format!("cannot read {}: {e}", file.display())))?;
            let config = parse_priority_toml(&text)
                .map_err(|e| exit::bad_input(format!("{}: {e}", file.display())))?;
            (
                ClientRequest::SetPriorityConfig {
                    request: request_id(),
                    config,
                },
                json,
            )
        }
        ConfigCommand::Show { json, stale } => (ClientRequest::PriorityConfig { stale }, json),
    };
    match runtime()?.block_on(call(masters, req, false))? {
        ClientResponse::PriorityConfig(cfg) => {
            if json {
                super::print_json(&config_json(&cfg))
            } else {
                print_config(&cfg);
                Ok(())
            }
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// The configuration as users write it, plus its version.
fn config_json(cfg: &PriorityConfig) -> serde_json::Value {
    let users: Vec<serde_json::Value> = cfg
        .entries
        .iter()
        .map(|e| {
            let (key, name) = match &e.who {
                Principal::User(u) => ("name", u),
                Principal::Group(g) => ("group", g),
            };
            let mut quota = serde_json::Map::new();
            if let Some(c) = e.quota.cpu_milli {
                quota.insert("cpus".into(), (c as f64 / 1000.0).into());
            }
            if let Some(m) = e.quota.mem_mib {
                quota.insert("mem".into(), m.into());
            }
            if let Some(g) = e.quota.gpu_milli {
                quota.insert("gpus".into(), (g as f64 / 1000.0).into());
            }
            serde_json::json!({
                key: name,
                "partition": e.partition,
                "priority": e.priority,
                "quota": quota,
            })
        })
        .collect();
    serde_json::json!({
        "version": cfg.version,
        "base_priority": cfg.base_priority,
        "protect_min_priority": cfg.protect_min_priority,
        "groups": cfg.groups,
        "users": users,
        "shares": cfg.shares,
    })
}

fn print_config(cfg: &PriorityConfig) {
    if cfg.version == 0 {
        println!("no priority configuration applied: every task runs at the base priority 0");
        return;
    }
    println!(
        "priority configuration v{} (base priority {}{})",
        cfg.version,
        cfg.base_priority,
        cfg.protect_min_priority
            .map(|p| format!(", --no-preempt from priority {p}"))
            .unwrap_or_default()
    );
    for (g, members) in &cfg.groups {
        println!("  group {g}: {}", members.join(", "));
    }
    if !cfg.shares.is_empty() {
        let shares: Vec<String> = cfg.shares.iter().map(|(u, w)| format!("{u}={w}")).collect();
        println!("  fair-share weights (others 1): {}", shares.join(", "));
    }
    println!(
        "  {:<20} {:<12} {:>8}  quota",
        "WHO", "PARTITION", "PRIORITY"
    );
    for e in &cfg.entries {
        let q = e.quota;
        let mut parts = Vec::new();
        if let Some(c) = q.cpu_milli {
            parts.push(format!("cpus={}", c as f64 / 1000.0));
        }
        if let Some(m) = q.mem_mib {
            parts.push(format!("mem={m}MiB"));
        }
        if let Some(g) = q.gpu_milli {
            parts.push(format!("gpus={}", g as f64 / 1000.0));
        }
        println!(
            "  {:<20} {:<12} {:>8}  {}",
            e.who.to_string(),
            e.partition,
            e.priority,
            if parts.is_empty() {
                "unlimited".to_string()
            } else {
                parts.join(" ")
            }
        );
    }
}

/// `submit --dry-run`.
pub fn dry_run(masters: &[String], spec: JobSpec, json: bool) -> anyhow::Result<()> {
    match runtime()?.block_on(call(masters, ClientRequest::DryRun { spec }, false))? {
        ClientResponse::DryRun(tasks) => {
            if json {
                return super::print_json(&serde_json::json!({ "tasks": tasks }));
            }
            println!("dry run: nothing was submitted");
            println!(
                "{:>6} {:>9} {:<10} {:<7} {:<6} preempts",
                "INDEX", "PRIORITY", "NODE", "ENGINE", "QUEUED"
            );
            for t in tasks {
                let preempts: Vec<String> = t.preempts.iter().map(|p| p.to_string()).collect();
                println!(
                    "{:>6} {:>9} {:<10} {:<7} {:<6} {}",
                    t.index,
                    t.priority,
                    t.node.map_or("-".to_string(), |n| n.to_string()),
                    t.engine.map_or("-".to_string(), |e| e.to_string()),
                    if t.queued { "yes" } else { "-" },
                    if preempts.is_empty() {
                        "-".to_string()
                    } else {
                        preempts.join(" ")
                    }
                );
            }
            Ok(())
        }
        other => bail!("unexpected answer: {other:?}"),
    }
}
