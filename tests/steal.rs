//! S0.3–4 with real processes: slave queues beyond free resources and work stealing.
//!
//! Every process runs with its default flags (the master's `--queue-depth` is 4; `--http`
//! only exposes the metrics). One master, slave A (1 core) alone at first: 5 one-core tasks
//! are assigned to it, one running and 4 waiting in its local queue, each started only once
//! the leader promotes it. Then slave B (2 cores) starts with an empty queue and free cores:
//! it asks the leader to steal, the leader takes tasks from A's queue (A releases only what
//! has not started) and commits each move with attempt + 1. Every task appends a
//! side-effect line with its id and attempt to a file: each task's line appears exactly
//! once, so no task ran on both.

mod support;
mod support_http;

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{wait_for, Cluster};

#[test]
fn idle_slave_steals_queued_tasks_and_every_task_runs_exactly_once() {
    let http = format!("127.0.0.1:{}", support::free_port());
    let c = Cluster::start_with("steal", 1, 1, 1, &["--http", &http]);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c, &http)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn node<'a>(nodes: &'a [Value], name: &str) -> Option<&'a Value> {
    nodes.iter().find(|n| n["name"] == name)
}

fn scenario(c: &Cluster, http: &str) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));
    let runs = c.dir.path().join("runs");
    std::fs::create_dir_all(&runs).expect("runs dir");
    // One file per attempt; its line says which task and attempt ran.
    let script = format!(
        "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> {}/$HETSCHED_TASK_ID.$HETSCHED_ATTEMPT; sleep 2",
        runs.display()
    );
    let job = c
        .json(&[
            "submit", "--cpus", "1", "--count", "5", "--", "sh", "-c", &script,
        ])
        .expect("submit")["job_id"]
        .as_u64()
        .expect("job id");
    // All 5 on A: one running, the rest in its queue (the default depth, 4); none pending.
    wait_for("5 tasks on slave A", Duration::from_secs(60), || {
        let nodes = c.json(&["nodes"])?.as_array()?.clone();
        let a = node(&nodes, "slave-1")?;
        (a["queued"].as_u64()? >= 3 && c.json(&["status"])?["tasks"]["pending"].as_u64()? == 0)
            .then_some(())
    });

    // Slave B joins with 2 free cores and an empty queue.
    let b_args: Vec<String> = vec![
        "slave".into(),
        "--listen".into(),
        format!("127.0.0.1:{}", support::free_port()),
        "--masters".into(),
        c.masters_arg(),
        "--data-dir".into(),
        c.dir.path().join("slave-b").display().to_string(),
        "--cpus".into(),
        "2".into(),
        "--mem".into(),
        "4096".into(),
        "--name".into(),
        "slave-b".into(),
    ];
    let _b = support::start_proc("slave-b", b_args, c.dir.path());

    let tasks_of = |job: u64| -> Vec<Value> {
        c.json(&["tasks", "--job", &job.to_string()])
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    let done = wait_for("all 5 tasks succeeded", Duration::from_secs(120), || {
        let ts = tasks_of(job);
        (ts.len() == 5 && ts.iter().all(|t| t["state"] == "succeeded")).then_some(ts)
    });

    let nodes = c.json(&["nodes"]).expect("nodes");
    let nodes = nodes.as_array().expect("array");
    let a = node(nodes, "slave-1").expect("slave A");
    let b = node(nodes, "slave-b").expect("slave B");
    let stolen = b["steals_in"].as_u64().expect("steals_in");
    eprintln!(
        "steals: B took {stolen}, A gave {}; A queued now {}",
        a["steals_out"], a["queued"]
    );
    assert!(stolen >= 1, "slave B stole nothing: {b}");
    assert_eq!(a["steals_out"].as_u64(), Some(stolen));
    assert_eq!(b["steals_out"].as_u64(), Some(0));
    assert_eq!(a["queued"].as_u64(), Some(0));

    // Every task's side effect exactly once (one line in all its attempts' files together).
    let mut lines: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in std::fs::read_dir(&runs).expect("runs") {
        let path = e.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        for l in text.lines() {
            let task: u64 = l
                .split_whitespace()
                .next()
                .and_then(|t| t.parse().ok())
                .expect("task id");
            lines.entry(task).or_default().push(l.to_string());
        }
    }
    for t in &done {
        let id = t["id"].as_u64().expect("id");
        let ran = lines.get(&id).cloned().unwrap_or_default();
        assert_eq!(ran.len(), 1, "task {id} ran {} times: {ran:?}", ran.len());
    }
    assert_eq!(lines.len(), 5);
    // A stolen task ran under attempt 2 (the victim's attempt 1 never started), the others
    // under attempt 1 (promoted on A, never run twice).
    let second_attempts = done.iter().filter(|t| t["attempt"] == 2).count() as u64;
    assert_eq!(second_attempts, stolen);
    assert!(done.iter().all(|t| t["attempt"] == 1 || t["attempt"] == 2));
    // The leader counted each committed steal once.
    let metrics = support_http::get(http, "/metrics").expect("metrics").text();
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("hetsched_master_steals_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(counted, Some(stolen as f64), "{metrics}");
    // Both slaves took the leader's commands (assignments, releases) over their own links.
    let links = metrics
        .lines()
        .find(|l| l.starts_with("hetsched_master_slave_links"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(links, Some(2.0), "{metrics}");
}
