//! Measurements of a run: submit → running per task (from the in-process slaves' records or
//! the real slaves' log files), throughput, and the leader's log work per task.

use super::inproc::{lock, SeenRef};
use super::workload::Submitted;
use super::E2eArgs;
use anyhow::Context;
use hetsched_common::protocol::StatusInfo;
use hetsched_common::TaskId;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Instant, SystemTime};

/// What a run leaves to measure.
pub(super) struct Run {
    /// When submitting started.
    pub(super) t0: Instant,
    /// How long submitting took, seconds.
    pub(super) submit_secs: f64,
    /// When the last task completed.
    pub(super) done_at: Instant,
    /// The jobs submitted.
    pub(super) submitted: Vec<Submitted>,
    /// The leader's status before the run.
    pub(super) before: StatusInfo,
    /// And after it.
    pub(super) after: StatusInfo,
}

/// The report of a run: throughput, submit → running latency, log work per task.
pub(super) fn report(
    a: &E2eArgs,
    dir: &Path,
    seen: &SeenRef,
    run: Run,
) -> anyhow::Result<serde_json::Value> {
    let Run {
        t0,
        submit_secs,
        done_at,
        submitted,
        before,
        after,
    } = run;
    // Submit → running per task.
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).context("histogram")?;
    let mut last_running = t0;
    if a.in_process_slaves {
        let s = lock(seen);
        for sub in &submitted {
            for t in &sub.tasks {
                if let Some(at) = s.running.get(t) {
                    let _ = hist.record(at.saturating_duration_since(sub.sent).as_micros() as u64);
                }
            }
        }
        last_running = s.last_placed.unwrap_or(t0);
    } else {
        let starts = real_starts(dir, a.slaves);
        let t0_wall = SystemTime::now() - t0.elapsed();
        for sub in &submitted {
            for t in &sub.tasks {
                if let Some(at) = starts.get(t) {
                    let us = at
                        .duration_since(sub.sent_wall)
                        .map_or(0, |d| d.as_micros() as u64);
                    let _ = hist.record(us);
                    if let Ok(d) = at.duration_since(t0_wall) {
                        last_running = last_running.max(t0 + d);
                    }
                }
            }
        }
    }
    let secs = |i: Instant| i.saturating_duration_since(t0).as_secs_f64().max(1e-6);
    let per_task = |d: u64| d as f64 / a.tasks as f64;
    let round = |x: f64, p: f64| (x * p).round() / p;
    let q = |x: f64| round(hist.value_at_quantile(x) as f64 / 1000.0, 100.0);
    let dispatch_messages = lock(seen).dispatch_messages;
    Ok(serde_json::json!({
        "tasks": a.tasks,
        "queue_depth": a.queue_depth,
        "job_size": a.job_size,
        "slaves": a.slaves,
        "masters": a.masters,
        "rate": a.rate,
        "submit_per_sec": round(a.tasks as f64 / submit_secs.max(1e-6), 1.0),
        "placed_per_sec": round(a.tasks as f64 / secs(last_running), 1.0),
        "completed_per_sec": round(a.tasks as f64 / secs(done_at), 1.0),
        "submit_to_running_p50_ms": q(0.5),
        "submit_to_running_p99_ms": q(0.99),
        "running_samples": hist.len(),
        "log_entries_per_task": round(per_task(after.raft.commit_index.saturating_sub(before.raft.commit_index)), 1000.0),
        "fsyncs_per_task": round(per_task(after.raft.flushes.saturating_sub(before.raft.flushes)), 1000.0),
        "dispatch_messages_per_task": if a.in_process_slaves { Some(round(per_task(dispatch_messages), 1000.0)) } else { None },
        "leader_changed": before.master_id != after.master_id,
        "in_process_slaves": a.in_process_slaves,
    }))
}

/// When each task's process started on a real slave: the modification time of its stdout
/// as the slave's log index records it when the attempt ends (`hetsched_slave::logs`: the
/// slave creates the file right before spawning the task, and `true` never writes it; first
/// attempt seen wins).
fn real_starts(dir: &Path, slaves: u32) -> HashMap<TaskId, SystemTime> {
    let mut starts: HashMap<TaskId, SystemTime> = HashMap::new();
    for i in 1..=slaves {
        let index = dir
            .join(format!("slave-{i}"))
            .join("logs")
            .join(hetsched_slave::logs::INDEX);
        let Ok(text) = std::fs::read_to_string(&index) else {
            continue;
        };
        for (name, rec) in text
            .lines()
            .filter_map(hetsched_slave::logs::parse_index_line)
        {
            let Some(id) = name
                .strip_prefix("task-")
                .and_then(|s| s.split('-').next())
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let nanos = u64::try_from(rec.stdout_mtime_ns).unwrap_or(u64::MAX);
            let m = SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos);
            let slot = starts.entry(TaskId(id)).or_insert(m);
            if m < *slot {
                *slot = m;
            }
        }
    }
    starts
}
