//! "Why is my task pending?" on real processes with default flags: a task larger than every
//! node waits for `resources` naming the dimension; a task pinned to a drained node waits
//! for `drained` (or `locality`); a task behind a higher-priority one waits for `priority`;
//! a task over its user's quota waits for `quota` with its base priority and the quota;
//! `explain` gives one verdict per registered node; `tasks --reason`, `jobs --reason` and
//! `status` agree.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
base_priority = 0
[[users]]
name = "hi"
priority = 50
[[users]]
name = "quser"
priority = 10
quota = { cpus = 1 }
"#;

#[test]
fn waiting_tasks_carry_the_reason_the_scheduler_stopped_them_with() {
    let slave = hetsched::local::SlaveSpec {
        cpus: 2,
        mem_mib: 4096,
        gpus: 1,
        extra_args: Vec::new(),
    };
    let c = Cluster::launch(
        "waiting-reasons",
        hetsched::local::ClusterSpec {
            masters: 1,
            slaves: vec![slave; 2],
            ..test_spec()
        },
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

/// Submits with `--json`; the job's id.
fn submit(c: &Cluster, args: &[&str]) -> u64 {
    let mut a = vec!["submit"];
    a.extend_from_slice(args);
    let v = c
        .json(&a)
        .unwrap_or_else(|| panic!("submit {args:?}: {:?}", c.cli(&a)));
    v["job_id"].as_u64().expect("job_id")
}

/// The job's tasks as `tasks --json` lists them.
fn tasks_of(c: &Cluster, job: u64) -> Vec<Value> {
    c.json(&["tasks", "--job", &job.to_string()])
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Waits until some task of `job` waits for one of `reasons`; returns that task.
fn wait_reason(c: &Cluster, job: u64, reasons: &[&str]) -> Value {
    wait_for(
        &format!("a task of job {job} waiting for {reasons:?}"),
        WAIT,
        || {
            tasks_of(c, job).into_iter().find(|t| {
                t["waiting"]["reason"]
                    .as_str()
                    .is_some_and(|r| reasons.contains(&r))
            })
        },
    )
}

fn detail(t: &Value) -> String {
    t["waiting"]["detail"].as_str().unwrap_or("").to_string()
}

fn scenario(c: &Cluster) {
    c.wait_leader(WAIT);
    c.wait_nodes_up(2, WAIT);
    let file = c.dir.path().join("priority.toml");
    std::fs::write(&file, CONFIG).expect("write");
    let out = c.cli(&["config", "apply", file.to_str().expect("path")]);
    assert!(out.status.success(), "config apply: {out:?}");

    // Larger than every node: `resources`, naming the dimension.
    let big = submit(c, &["--allow-unplaceable", "--cpus", "1000", "--", "true"]);
    let t = wait_reason(c, big, &["resources"]);
    let d = detail(&t);
    assert!(
        d.contains("cpus") && d.contains("larger than every node"),
        "{t}"
    );
    assert_eq!(t["state"], "pending", "{t}");

    // Pinned to a drained node: `drained` (or `locality`), naming the node.
    let out = c.cli(&["drain", "slave-2"]);
    assert!(out.status.success(), "drain: {out:?}");
    let pinned = submit(c, &["--nodes", "slave-2", "--cpus", "0.5", "--", "true"]);
    let t = wait_reason(c, pinned, &["drained", "locality"]);
    assert!(detail(&t).contains("slave-2"), "{t}");

    // Behind a higher-priority task: `priority`. The GPU of slave-1 runs a task of `hi`;
    // another of `hi` waits for it (same priority: no preemption), and one of `lo` (base
    // priority) waits behind that one. GPU tasks never wait in slave queues.
    let runner = submit(c, &["--user", "hi", "--gpus", "1", "--", "sleep", "300"]);
    wait_for("hi's GPU task running", WAIT, || {
        tasks_of(c, runner)
            .first()
            .filter(|t| t["state"] == "running")
            .cloned()
    });
    let ahead = submit(c, &["--user", "hi", "--gpus", "1", "--", "true"]);
    let behind = submit(c, &["--user", "lo", "--gpus", "1", "--", "true"]);
    let t = wait_reason(c, ahead, &["resources"]);
    assert!(detail(&t).contains("gpus"), "{t}");
    let t = wait_reason(c, behind, &["priority"]);
    let ahead_task = tasks_of(c, ahead)[0]["id"].as_u64().expect("id");
    assert!(
        detail(&t).contains(&format!("task-{ahead_task}")),
        "names the task ahead: {t}"
    );

    // Over the quota: admitted at the base priority, waiting for `quota`, with the quota.
    let q = submit(
        c,
        &[
            "--user", "quser", "--cpus", "1", "--count", "3", "--", "sleep", "300",
        ],
    );
    let t = wait_reason(c, q, &["quota"]);
    let d = detail(&t);
    assert_eq!(t["priority"], 0, "{t}");
    assert!(d.contains("base priority 0") && d.contains("cpus 1"), "{t}");

    // `explain`: one verdict per registered node; the drained node says so.
    let behind_task = tasks_of(c, behind)[0]["id"].as_u64().expect("id");
    let e = c
        .json(&["explain", &format!("task-{behind_task}")])
        .expect("explain --json");
    let nodes = e["nodes"].as_array().expect("nodes");
    let total = c.json(&["status"]).expect("status")["nodes"]["total"]
        .as_u64()
        .expect("total");
    assert_eq!(nodes.len() as u64, total, "{e}");
    assert!(nodes
        .iter()
        .all(|n| n["verdict"].as_str().is_some_and(|v| !v.is_empty())));
    let verdict = |name: &str| {
        nodes
            .iter()
            .find(|n| n["name"] == name)
            .map(|n| n["verdict"].clone())
    };
    assert_eq!(verdict("slave-2"), Some(Value::from("drained")), "{e}");
    // slave-1's GPU is taken (and, by now, its cores too: the first check that fails).
    let v = verdict("slave-1").expect("slave-1");
    assert!(v == "gpus" || v == "cpus", "{e}");
    assert_eq!(e["waiting"]["reason"], "priority", "{e}");
    assert!(e["queue_position"].as_u64().is_some(), "{e}");
    assert_eq!(e["preemption"]["possible"], false, "{e}");
    let text = c.cli(&["explain", &behind_task.to_string()]);
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("0/2 fit") && text.contains("priority"),
        "{text}"
    );

    // Filters and the summary agree.
    let by_reason = c
        .json(&["tasks", "--reason", "priority"])
        .expect("tasks --reason");
    let ids: Vec<u64> = by_reason
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    assert_eq!(ids, vec![behind_task], "{by_reason}");
    let jobs = c
        .json(&["jobs", "--reason", "quota"])
        .expect("jobs --reason");
    assert_eq!(jobs[0]["id"], q, "{jobs}");
    let out = c.cli(&["tasks", "--reason", "sunspots"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = c.cli(&["explain", "task-99999"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let st = c.json(&["status"]).expect("status");
    for r in ["resources", "priority", "quota"] {
        assert!(
            st["waiting"][r].as_u64().is_some_and(|n| n >= 1),
            "{r}: {st}"
        );
    }
    let table = c.cli(&["tasks", "--job", &behind.to_string()]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("priority"),
        "{table:?}"
    );
    let status = c.cli(&["status"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("waiting:"),
        "{status:?}"
    );
}
