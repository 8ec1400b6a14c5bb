//! What must hold: a 10,000-task job is placed — and run to completion — with at most
//! 0.5 log entries per task (batched plans, dispatch and reports), measured by
//! `hetsched bench e2e` on real master processes; and real slaves complete a workload through
//! the batched report path.

use serde_json::Value;
use std::process::Command;

/// Runs `hetsched bench e2e ARGS --json` and returns its JSON line (panics with its stderr).
fn bench_e2e(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["bench", "e2e", "--json"])
        .args(args)
        .output()
        .expect("start hetsched bench e2e");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench e2e {args:?} failed ({}):\n{stderr}",
        out.status
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}\n{stderr}"))
}

#[test]
fn ten_thousand_task_job_is_placed_with_at_most_half_a_log_entry_per_task() {
    let v = bench_e2e(&[
        "--masters",
        "3",
        "--slaves",
        "2",
        "--tasks",
        "10000",
        "--job-size",
        "10000",
        "--slave-cpus",
        "100000",
        "--in-process-slaves",
        "--timeout",
        "4m",
    ]);
    eprintln!("{v}");
    assert_eq!(v["tasks"], 10000);
    assert_eq!(v["in_process_slaves"], true);
    assert_eq!(v["running_samples"], 10000, "every task reached a slave");
    let entries = v["log_entries_per_task"].as_f64().expect("entries");
    assert!(
        entries > 0.0 && entries <= 0.5,
        "{entries} log entries per task"
    );
    let messages = v["dispatch_messages_per_task"].as_f64().expect("messages");
    assert!(messages <= 0.05, "{messages} dispatch messages per task");
}

#[test]
fn real_slaves_complete_a_workload_through_batched_reports() {
    let v = bench_e2e(&[
        "--masters",
        "3",
        "--slaves",
        "1",
        "--tasks",
        "300",
        "--job-size",
        "100",
        "--slave-cpus",
        "16",
        "--timeout",
        "4m",
    ]);
    eprintln!("{v}");
    assert_eq!(v["in_process_slaves"], false);
    assert_eq!(v["running_samples"], 300, "every task's process started");
    // Without batches each task costs at least three entries (plan share, started,
    // finished); batched reports bring it well under that.
    let entries = v["log_entries_per_task"].as_f64().expect("entries");
    assert!(entries < 2.0, "{entries} log entries per task");
}
