//! S2 data-local batches with real processes (docs/DESIGN.md §S2, "In the cluster").
//!
//! One master, three slaves of two cores, default flags. A batch of six jobs is planned by
//! the leader against the live slaves and run: every task runs on the slave the plan pinned
//! it to, with its blocks in `HETSCHED_BLOCKS` (each task writes them, and the time it
//! started, to a file named after its id and attempt); every (job, block) of the input is
//! processed exactly once by the first attempts; the tasks of a job start together (within
//! 500 ms); `batch --json` reports planned and actual makespan. Then a second batch, and a
//! planned slave is killed mid-batch: every job still ends (the leader re-plans the rest of
//! the jobs that lost their slave), and each block is processed exactly once across the
//! successful attempts.

mod support;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;
use support::{wait_for, Cluster};

/// Six jobs over three hosts (one replica per block), sizes in MB, speeds in MB/s.
const BATCH: &str = r#"{ "cores_per_host": [2, 2, 2], "transfer_speed": 50, "alpha": 0.05,
  "jobs": [
    { "speed": 20, "blocks": [ {"size": 20, "replicas": [0]}, {"size": 20, "replicas": [1]},
                               {"size": 10, "replicas": [2]} ] },
    { "speed": 20, "blocks": [ {"size": 30, "replicas": [1]}, {"size": 10, "replicas": [1]} ] },
    { "speed": 10, "blocks": [ {"size": 10, "replicas": [2]}, {"size": 10, "replicas": [0]},
                               {"size": 10, "replicas": [1]}, {"size": 10, "replicas": [2]} ] },
    { "speed": 20, "blocks": [ {"size": 15, "replicas": [0]} ] },
    { "speed": 15, "blocks": [ {"size": 15, "replicas": [2]}, {"size": 15, "replicas": [0]} ] },
    { "speed": 25, "blocks": [ {"size": 25, "replicas": [1]}, {"size": 5, "replicas": [2]},
                               {"size": 5, "replicas": [0]} ] }
  ] }"#;

/// Blocks per job of [`BATCH`].
const BLOCKS: [u64; 6] = [3, 2, 4, 1, 2, 3];

#[test]
fn a_batch_runs_on_its_planned_slaves_gang_started_and_survives_a_lost_slave() {
    let mut c = Cluster::start("batch", 1, 3, 2);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&mut c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

/// The task command: writes `HETSCHED_BLOCKS` and its start time (ms) to `runs/ID.ATTEMPT`
/// (two lines), then works for `secs`.
fn command(runs: &Path, secs: f64) -> String {
    format!(
        "f={}/$HETSCHED_TASK_ID.$HETSCHED_ATTEMPT; echo \"$HETSCHED_BLOCKS\" > $f.tmp; \
         date +%s%3N >> $f.tmp; mv $f.tmp $f; sleep {secs}",
        runs.display()
    )
}

/// Submits [`BATCH`] with `cmd`; returns the `submit-batch --json` answer.
fn submit(c: &Cluster, cmd: &str) -> Value {
    let file = c.dir.path().join("batch.json");
    std::fs::write(&file, BATCH).expect("write the batch file");
    let out = c.cli(&[
        "submit-batch",
        "--json",
        file.to_str().expect("utf-8 path"),
        "--",
        "sh",
        "-c",
        cmd,
    ]);
    assert!(out.status.success(), "submit-batch: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("a line")).expect("JSON")
}

fn batch(c: &Cluster, id: u64) -> Value {
    c.json(&["batch", &format!("batch-{id}")])
        .expect("batch --json")
}

/// Waits until every job of the batch has ended; returns `batch --json`.
fn wait_done(c: &Cluster, id: u64, timeout: Duration) -> Value {
    wait_for("every job of the batch ended", timeout, || {
        let b = batch(c, id);
        b["actual_makespan_s"].as_f64().map(|_| b)
    })
}

/// What one attempt wrote: its blocks (job_block, read_from) and start time, ms.
fn run_of(runs: &Path, task: u64, attempt: u64) -> Option<(Vec<Value>, u64)> {
    let text = std::fs::read_to_string(runs.join(format!("{task}.{attempt}"))).ok()?;
    let mut lines = text.lines();
    let blocks: Vec<Value> = serde_json::from_str(lines.next()?).ok()?;
    let start = lines.next()?.trim().parse().ok()?;
    Some((blocks, start))
}

fn tasks_by_id(c: &Cluster) -> BTreeMap<u64, Value> {
    c.tasks()
        .into_iter()
        .filter_map(|t| Some((t["id"].as_u64()?, t)))
        .collect()
}

fn node_ids(c: &Cluster) -> BTreeMap<String, u64> {
    c.json(&["nodes"])
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|n| Some((n["name"].as_str()?.to_string(), n["id"].as_u64()?)))
        .collect()
}

fn scenario(c: &mut Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(3, Duration::from_secs(30));
    let runs = c.dir.path().join("runs");
    std::fs::create_dir_all(&runs).expect("runs dir");

    // Bad requests: more hosts than up slaves, no command, an unknown batch.
    let four = c.dir.path().join("four.txt");
    std::fs::write(&four, "1 4 100 0.05\n1 1 1 1\n1\n10\n5\n3\n").expect("write");
    let out = c.cli(&["submit-batch", four.to_str().expect("utf-8"), "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("4 hosts but only 3 slaves are up"), "{err}");
    let out = c.cli(&["submit-batch", four.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(c.cli(&["batch", "batch-x"]).status.code(), Some(2));
    assert_eq!(c.cli(&["batch", "99"]).status.code(), Some(4));

    // --- A batch of six jobs, run to its end. ---
    let sub = submit(c, &command(&runs, 0.5));
    assert_eq!(sub["jobs"].as_array().map(Vec::len), Some(6), "{sub}");
    assert!(
        sub["planned_makespan_s"].as_f64().is_some_and(|m| m > 0.0),
        "{sub}"
    );
    let id = sub["batch_id"].as_u64().expect("batch id");
    let b = wait_done(c, id, Duration::from_secs(120));
    let tasks = tasks_by_id(c);
    let mut seen: BTreeSet<(u64, u64)> = BTreeSet::new();
    for (index, job) in b["jobs"].as_array().expect("jobs").iter().enumerate() {
        assert_eq!(job["state"], "succeeded", "{job}");
        let mut starts = Vec::new();
        for t in job["tasks"].as_array().expect("tasks") {
            let tid = t["task_id"].as_u64().expect("task id");
            let listed = &tasks[&tid];
            assert_eq!(
                listed["node"], t["node"],
                "task {tid} ran on its planned slave"
            );
            assert_eq!(listed["attempt"], 1, "{listed}");
            let (blocks, start) = run_of(&runs, tid, 1).expect("the first attempt's file");
            assert_eq!(
                &Value::from(blocks.clone()),
                &t["blocks"],
                "task {tid}'s HETSCHED_BLOCKS"
            );
            for bl in blocks {
                let n = bl["job_block"].as_u64().expect("job_block");
                assert!(
                    seen.insert((index as u64, n)),
                    "block {n} of job {index} twice"
                );
            }
            starts.push(start);
        }
        let spread = starts.iter().max().unwrap_or(&0) - starts.iter().min().unwrap_or(&0);
        assert!(
            spread <= 500,
            "job {index}'s tasks started {spread} ms apart"
        );
        assert!(job["planned_finish_s"].as_f64() > job["planned_start_s"].as_f64());
    }
    let want: BTreeSet<(u64, u64)> = BLOCKS
        .iter()
        .enumerate()
        .flat_map(|(j, n)| (0..*n).map(move |b| (j as u64, b)))
        .collect();
    assert_eq!(seen, want, "every (job, block) exactly once");
    let (planned, actual) = (
        b["planned_makespan_s"].as_f64().expect("planned"),
        b["actual_makespan_s"].as_f64().expect("actual"),
    );
    eprintln!("batch-{id}: planned makespan {planned:.2}s, actual {actual:.2}s");
    assert!(planned > 0.0 && actual > 0.0);
    let jobs = c.json(&["jobs"]).expect("jobs --json");
    let first = b["jobs"][0]["job_id"].as_u64().expect("job id");
    let listed = jobs
        .as_array()
        .and_then(|js| js.iter().find(|j| j["id"].as_u64() == Some(first)).cloned())
        .expect("the batch's first job listed");
    assert_eq!(listed["batch_id"].as_u64(), Some(id), "{listed}");
    assert!(listed["actual_finish_s"].as_f64().is_some(), "{listed}");
    let text = String::from_utf8_lossy(&c.cli(&["batch", &id.to_string()]).stdout).to_string();
    assert!(text.contains("planned makespan"), "{text}");

    // --- A second batch; slave-3 is killed while its planned tasks run. ---
    let sub = submit(c, &command(&runs, 3.0));
    let id = sub["batch_id"].as_u64().expect("batch id");
    let names = node_ids(c);
    let lost = names["slave-3"];
    wait_for("a task running on slave-3", Duration::from_secs(60), || {
        tasks_by_id(c)
            .values()
            .any(|t| t["node"].as_u64() == Some(lost) && t["state"] == "running")
            .then_some(())
    });
    c.slaves[2].kill9();
    for pid in support::processes_under(&c.dir.path().join("slave-3"), None) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let b = wait_done(c, id, Duration::from_secs(120));
    assert!(b["replans"].as_u64().is_some_and(|r| r >= 1), "{b}");
    let tasks = tasks_by_id(c);
    for (index, job) in b["jobs"].as_array().expect("jobs").iter().enumerate() {
        assert_eq!(job["state"], "succeeded", "{job}");
        let mut done: Vec<u64> = Vec::new();
        for t in job["tasks"].as_array().expect("tasks") {
            let tid = t["task_id"].as_u64().expect("task id");
            let listed = &tasks[&tid];
            assert_ne!(listed["node"].as_u64(), Some(lost), "{listed}");
            let attempt = listed["attempt"].as_u64().expect("attempt");
            let (blocks, _) = run_of(&runs, tid, attempt).expect("the successful attempt's file");
            done.extend(blocks.iter().filter_map(|b| b["job_block"].as_u64()));
        }
        done.sort_unstable();
        let all: Vec<u64> = (0..BLOCKS[index]).collect();
        assert_eq!(
            done, all,
            "job {index}: each block once across successful attempts"
        );
    }
    eprintln!(
        "batch-{id} with slave-3 lost: planned {:.2}s, actual {:.2}s, {} re-plan(s)",
        b["planned_makespan_s"].as_f64().unwrap_or(0.0),
        b["actual_makespan_s"].as_f64().unwrap_or(0.0),
        b["replans"]
    );
}
