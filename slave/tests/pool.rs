//! The slave's long-lived supervisor pool under a burst of concurrent starts: every attempt
//! started (or failing to start) has its end recorded exactly once, with its own exit code,
//! whatever the order in which spawns, exits and reaping interleave.

use hetsched_slave::attempt::files::{ExitRecord, Spec, FORMAT_VERSION, STATUS_FILE};
use hetsched_slave::attempt::pool::client::PoolClient;
use hetsched_slave::attempt::pool::protocol::JOURNAL;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_starts_records_each_end_once_with_its_own_code() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pool_dir = tmp.path().join("supervisor");
    let attempts = tmp.path().join("attempts");
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&attempts).expect("mkdir");
    std::fs::create_dir_all(&logs).expect("mkdir");
    let client = PoolClient::new(
        vec![env!("CARGO_BIN_EXE_hetsched-supervise").into()],
        pool_dir.clone(),
    );
    let n = 60u64;
    // Every fifth cannot start (its exec fails inside the spawn); the others exit with
    // their own code, some at once, some after a moment, so that exits and spawns overlap.
    let bad = |i: u64| i.is_multiple_of(5);
    let mut waits = Vec::new();
    for i in 1..=n {
        let name = format!("task-{i}-1");
        let dir = attempts.join(&name);
        std::fs::create_dir(&dir).expect("mkdir attempt");
        let argv = if bad(i) {
            vec!["/nonexistent/hetsched-test-program".to_string()]
        } else {
            let pause = if i % 3 == 0 { "sleep 0.05; " } else { "" };
            vec!["sh".into(), "-c".into(), format!("{pause}exit {}", i % 7)]
        };
        let spec = Spec {
            version: FORMAT_VERSION,
            argv,
            env: Vec::new(),
            stdout: logs.join(format!("{name}.out")),
            stderr: logs.join(format!("{name}.err")),
            cgroup_procs: Vec::new(),
            oom_counter: None,
            keep: None,
            cwd: None,
        };
        let started = client.start(&dir, &spec).expect("start");
        waits.push((i, dir, started.ended));
    }
    for (i, dir, ended) in waits {
        // The announcement (or, were the connection lost, the status file) says it ended.
        let _ = tokio::time::timeout(Duration::from_secs(30), ended).await;
        let status = dir.join(STATUS_FILE);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !status.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "task {i}: no exit recorded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rec: ExitRecord =
            serde_json::from_slice(&std::fs::read(&status).expect("read")).expect("parse");
        if bad(i) {
            assert!(rec.cannot_start.is_some(), "task {i}: {rec:?}");
        } else {
            assert_eq!(rec.exit_code, (i % 7) as i32, "task {i}: {rec:?}");
            assert!(rec.cannot_start.is_none(), "task {i}: {rec:?}");
        }
    }
    let journal = std::fs::read_to_string(pool_dir.join(JOURNAL)).expect("journal");
    for i in 1..=n {
        let needle = format!("\"attempt\":\"task-{i}-1\"");
        assert_eq!(
            journal.lines().filter(|l| l.contains(&needle)).count(),
            1,
            "task {i} journaled once"
        );
    }
}
