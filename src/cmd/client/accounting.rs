//! `history` and `usage` (issue 53): the accounting records every master keeps, like
//! Slurm's `sacct` (one line per ended attempt) and `sreport` (totals). See
//! docs/guide/accounting.md.

use super::call::{block_on, call, short};
use crate::cmd::table;
use anyhow::anyhow;
use hetsched_common::protocol::{
    time_bound, AttemptRecord, ClientRequest, ClientResponse, HistoryFilter, UsageBy,
};
use hetsched_common::JobId;
use std::time::{SystemTime, UNIX_EPOCH};

/// Arguments of `hetsched history`.
#[derive(clap::Args, Debug)]
pub struct HistoryArgs {
    /// Only this user's attempts (a plain user sees only its own anyway).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Only this job's attempts (`5` or `job-5`).
    #[arg(long, value_name = "JOB")]
    pub job: Option<JobId>,
    /// Only attempts that ended from this time on: a duration back from now (`2h`, `7d`),
    /// a time (`2026-11-29T03:00:00Z`) or ms since the epoch.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only attempts that ended before this time (as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only this state (`succeeded`, `failed`, `lost`) or reason (`oom`, `timeout`, `cancelled`, ...).
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    #[command(flatten)]
    pub out: Output,
}

/// Arguments of `hetsched usage`.
#[derive(clap::Args, Debug)]
pub struct UsageArgs {
    /// Totals of the attempts that ended from this time on (as `history --since`).
    #[arg(long, default_value = "7d", value_name = "WHEN")]
    pub since: String,
    /// Group by user, partition or UTC day.
    #[arg(long, default_value = "user", value_parser = parse_by)]
    pub by: UsageBy,
    /// Only this user's (a plain user sees only its own anyway).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    #[command(flatten)]
    pub out: Output,
}

/// How `history` and `usage` are answered and printed.
#[derive(clap::Args, Debug)]
pub struct Output {
    /// Answer from the addressed master's own records (every master holds the same once it
    /// applied the same log).
    #[arg(long)]
    pub stale: bool,
    /// Print the answer as one JSON object (history: {"records", "retention_ms"}; usage:
    /// {"since_ms", "by", "totals"}).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV, the table's columns with a header line.
    #[arg(long)]
    pub csv: bool,
}

fn parse_by(s: &str) -> Result<UsageBy, String> {
    match s {
        "user" => Ok(UsageBy::User),
        "partition" => Ok(UsageBy::Partition),
        "day" => Ok(UsageBy::Day),
        _ => Err(format!("{s:?} is not one of user, partition, day")),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A `--since`/`--until` value, or exit 2 naming the flag.
fn bound(flag: &str, v: Option<&str>) -> anyhow::Result<Option<u64>> {
    v.map(|s| {
        time_bound(s, now_ms()).map_err(|e| crate::cmd::exit::bad_input(format!("--{flag}: {e}")))
    })
    .transpose()
}

/// `history`.
pub fn history(masters: &[String], a: HistoryArgs) -> anyhow::Result<()> {
    let filter = HistoryFilter {
        user: a.user,
        job: a.job,
        since_ms: bound("since", a.since.as_deref())?,
        until_ms: bound("until", a.until.as_deref())?,
        state: a.state,
    };
    let req = ClientRequest::AccountingHistory {
        filter,
        stale: a.out.stale,
    };
    let h = match block_on(call(masters, req, a.out.stale))?? {
        ClientResponse::History(h) => h,
        other => return Err(anyhow!("unexpected answer: {}", short(&other))),
    };
    if a.out.json {
        return crate::cmd::print_json(&h);
    }
    let header = [
        "ID",
        "USER",
        "PARTITION",
        "NODE",
        "START",
        "END",
        "ELAPSED",
        "CPUS",
        "CPU-EFF",
        "MAXMEM",
        "GPUS",
        "STATE",
        "REASON",
    ];
    let rows: Vec<Vec<String>> = h.records.iter().map(history_row).collect();
    emit(&header, rows, a.out.csv)
}

/// One `history` line.
fn history_row(r: &AttemptRecord) -> Vec<String> {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let gpus = if r.gpus == 0.0 {
        "0".to_string()
    } else if r.gpu_emulated {
        format!("{}(emulated)", r.gpus)
    } else {
        r.gpus.to_string()
    };
    vec![
        format!("task-{}.{}", r.task.get(), r.attempt),
        r.user.clone(),
        r.partition.clone(),
        r.node.to_string(),
        or_dash(r.started_ms.map(time_text)),
        time_text(r.ended_ms),
        or_dash(r.elapsed_s.map(|s| format!("{s:.1}s"))),
        r.cpus.to_string(),
        or_dash(r.cpu_efficiency().map(|e| format!("{:.0}%", e * 100.0))),
        or_dash(r.max_mem_mib.map(|m| format!("{m}M"))),
        gpus,
        r.state.clone(),
        or_dash(r.reason.map(|w| w.as_str().to_string())),
    ]
}

/// `usage`.
pub fn usage(masters: &[String], a: UsageArgs) -> anyhow::Result<()> {
    let since_ms = bound("since", Some(&a.since))?.unwrap_or(0);
    let req = ClientRequest::AccountingUsage {
        since_ms,
        by: a.by,
        user: a.user,
        stale: a.out.stale,
    };
    let u = match block_on(call(masters, req, a.out.stale))?? {
        ClientResponse::AccountingUsage(u) => u,
        other => return Err(anyhow!("unexpected answer: {}", short(&other))),
    };
    if a.out.json {
        return crate::cmd::print_json(&u);
    }
    let key = match a.by {
        UsageBy::User => "USER",
        UsageBy::Partition => "PARTITION",
        UsageBy::Day => "DAY",
    };
    let header = [
        key,
        "TASKS",
        "CPU-HOURS",
        "CPU-USED-HOURS",
        "GPU-HOURS",
        "CPU-EFF",
    ];
    let rows = u
        .totals
        .iter()
        .cloned()
        .map(|t| {
            vec![
                t.key,
                t.tasks.to_string(),
                format!("{:.3}", t.cpu_hours),
                format!("{:.3}", t.cpu_used_hours),
                format!("{:.3}", t.gpu_hours),
                t.cpu_efficiency
                    .map_or("-".into(), |e| format!("{:.0}%", e * 100.0)),
            ]
        })
        .collect();
    emit(&header, rows, a.out.csv)?;
    if a.out.csv || u.fair_share.is_empty() {
        return Ok(());
    }
    // Fair share: each user's decayed usage, share and factor (higher goes first).
    println!();
    let mut t = table::new(&["USER", "DECAYED-USAGE", "SHARE", "FAIR-SHARE"]);
    for f in &u.fair_share {
        t.add_row(vec![
            f.user.clone(),
            format!("{:.1}", f.decayed_usage),
            f.share.map_or("-".into(), |s| format!("{s:.3}")),
            format!("{:.3}", f.factor),
        ]);
    }
    table::print(&t)
}

/// Prints rows as a table, or as CSV (fields quoted where they need it).
fn emit(header: &[&str], rows: Vec<Vec<String>>, csv: bool) -> anyhow::Result<()> {
    if csv {
        let field = |f: &str| {
            if f.contains([',', '"', '\n']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.to_string()
            }
        };
        println!("{}", header.join(","));
        for r in rows {
            println!(
                "{}",
                r.iter().map(|f| field(f)).collect::<Vec<_>>().join(",")
            );
        }
        return Ok(());
    }
    let mut t = table::new(header);
    for r in rows {
        t.add_row(r);
    }
    table::print(&t)
}

/// A time as `YYYY-MM-DDTHH:MM:SS` (UTC).
fn time_text(ms: u64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .trim_end_matches('Z')
        .to_string()
}
