//! The HTTP API end to end: submit, poll until done, logs, cancel, drain, a 404,
//! a 400 naming the field, a write sent to a follower; `/metrics` of a master and of a
//! slave carry the named series.

mod support;
mod support_http;

use serde_json::Value;
use std::time::Duration;
use support::wait_for;
use support_http::{delete, get, post, HttpCluster};

const WAIT: Duration = Duration::from_secs(60);

/// Polls `f` until it returns `Some` or `timeout` passes (then `None`).
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The job's state as `GET /v1/jobs/{id}` shows it.
fn job_state(http: &str, job: u64) -> Option<String> {
    let a = get(http, &format!("/v1/jobs/{job}")).ok()?;
    (a.status == 200).then(|| a.json()["state"].as_str().map(String::from))?
}

#[test]
fn the_api_drives_a_cluster_and_metrics_carry_the_named_series() {
    let c = HttpCluster::start("http-api", 3, 1, 2);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&c)));
    if let Err(e) = result {
        c.cluster.dump_logs();
        std::panic::resume_unwind(e);
    }
}

fn run(c: &HttpCluster) {
    // Every process is alive; every master is ready once a leader is known.
    for a in c.master_http.iter().chain(&c.slave_http) {
        wait_for(&format!("/healthz at {a}"), WAIT, || {
            get(a, "/healthz").ok().filter(|r| r.status == 200)
        });
    }
    for a in &c.master_http {
        wait_for(&format!("/readyz at {a}"), WAIT, || {
            get(a, "/readyz").ok().filter(|r| r.status == 200)
        });
    }
    wait_for("the slave registered and up", WAIT, || {
        let s = get(&c.master_http[0], "/v1/status").ok()?;
        (s.status == 200 && s.json()["nodes"]["up"].as_u64()? >= 1).then_some(())
    });

    // A write sent to a follower: it forwards to the leader itself.
    let follower = wait_for("a follower", WAIT, || {
        c.master_http.iter().find_map(|a| {
            let s = get(a, "/v1/status?stale=true").ok()?;
            (s.json()["role"] == "follower" && s.json()["leader"].is_u64()).then(|| a.clone())
        })
    });
    let spec = r#"{"name": "api-hello", "command": ["sh", "-c", "echo hello-from-the-api"],
                   "resources": {"cpus": 0.5, "mem": 64}}"#;
    let submitted = post(&follower, "/v1/jobs", spec).expect("submit");
    assert_eq!(submitted.status, 201, "{}", submitted.text());
    let job = submitted.json()["job_id"].as_u64().expect("job_id");
    assert_eq!(submitted.json()["tasks"], 1);
    assert!(submitted.headers.contains(&format!("/v1/jobs/{job}")));

    // Poll until done, through another master.
    let leader_http = &c.master_http[0];
    wait_for("the job succeeded", WAIT, || {
        (job_state(leader_http, job)? == "succeeded").then_some(())
    });
    let jobs = get(leader_http, "/v1/jobs?state=succeeded")
        .expect("jobs")
        .json();
    assert!(jobs
        .as_array()
        .expect("array")
        .iter()
        .any(|j| j["id"] == job && j["name"] == "api-hello"));

    // Its task and its log, streamed.
    let tasks = get(&follower, &format!("/v1/tasks?job={job}"))
        .expect("tasks")
        .json();
    let task = tasks[0]["id"].as_u64().expect("task id");
    assert_eq!(tasks[0]["state"], "succeeded");
    let log = get(&follower, &format!("/v1/tasks/task-{task}/logs")).expect("logs");
    assert_eq!(log.status, 200, "{}", log.text());
    assert!(
        log.text().contains("hello-from-the-api"),
        "log: {:?}",
        log.text()
    );
    assert!(log.headers.to_ascii_lowercase().contains("text/plain"));

    // A followed log streams until the task ends, across its output's pauses.
    let talker = post(
        leader_http,
        "/v1/jobs",
        r#"{"name": "api-talker", "command": ["sh", "-c", "echo first; sleep 1; echo second"],
            "resources": {"cpus": 0.5, "mem": 64}}"#,
    )
    .expect("submit");
    assert_eq!(talker.status, 201, "{}", talker.text());
    let talker = talker.json()["job_id"].as_u64().expect("job_id");
    let talker_task = wait_for("the talker's task", WAIT, || {
        let t = get(leader_http, &format!("/v1/tasks?job={talker}"))
            .ok()?
            .json();
        t[0]["id"].as_u64()
    });
    let followed = get(
        &follower,
        &format!("/v1/tasks/{talker_task}/logs?follow=true"),
    )
    .expect("follow");
    assert_eq!(followed.status, 200, "{}", followed.text());
    assert_eq!(followed.text(), "first\nsecond\n");
    assert!(followed.headers.to_ascii_lowercase().contains("chunked"));
    let stderr = get(
        leader_http,
        &format!("/v1/tasks/{talker_task}/logs?stream=stderr"),
    )
    .expect("stderr");
    assert_eq!((stderr.status, stderr.text().as_str()), (200, ""));
    let bad_stream = get(
        leader_http,
        &format!("/v1/tasks/{talker_task}/logs?stream=both"),
    )
    .expect("logs");
    assert_eq!(bad_stream.status, 400);
    assert_eq!(bad_stream.json()["error"]["field"], "stream");

    // Cancel a long job.
    let long = post(
        leader_http,
        "/v1/jobs",
        r#"{"name": "api-sleeper", "command": ["sleep", "600"], "resources": {"cpus": 0.5, "mem": 64}}"#,
    )
    .expect("submit");
    assert_eq!(long.status, 201, "{}", long.text());
    let long = long.json()["job_id"].as_u64().expect("job_id");
    let cancelled = delete(&follower, &format!("/v1/jobs/job-{long}")).expect("cancel");
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    assert_eq!(cancelled.json()["job_id"], long);
    assert_eq!(cancelled.json()["cancelled"], 1);
    wait_for("the job cancelled", WAIT, || {
        (job_state(leader_http, long)? == "cancelled").then_some(())
    });

    // Drain the node by name, then undo it.
    let drained = post(&follower, "/v1/nodes/slave-1/drain", "").expect("drain");
    assert_eq!(drained.status, 200, "{}", drained.text());
    assert_eq!(drained.json()["draining"], true);
    assert_eq!(drained.json()["name"], "slave-1");
    let nodes = get(leader_http, "/v1/nodes").expect("nodes").json();
    assert_eq!(nodes[0]["draining"], true);
    let undrained = post(&follower, "/v1/nodes/slave-1/undrain", "").expect("undrain");
    assert_eq!(undrained.status, 200, "{}", undrained.text());
    assert_eq!(undrained.json()["draining"], false);

    // A 404 for each kind of id, and for an unknown route.
    for path in ["/v1/jobs/9999", "/v1/tasks/task-9999/logs", "/v1/nope"] {
        let a = get(leader_http, path).expect("get");
        assert_eq!(a.status, 404, "{path}: {}", a.text());
        assert_eq!(a.json()["error"]["kind"], "not-found", "{path}");
    }
    let a = post(leader_http, "/v1/nodes/no-such-node/drain", "").expect("drain");
    assert_eq!(a.status, 404, "{}", a.text());

    // A 400 that names the field.
    let bad = post(
        &follower,
        "/v1/jobs",
        r#"{"name": "bad", "command": ["true"], "resources": {"cpus": "lots"}}"#,
    )
    .expect("submit");
    assert_eq!(bad.status, 400, "{}", bad.text());
    let e = &bad.json()["error"];
    assert_eq!(e["kind"], "bad-input");
    assert_eq!(e["field"], "resources.cpus", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or("")
            .contains("resources.cpus"),
        "{e}"
    );
    let typo = post(leader_http, "/v1/jobs", r#"{"comand": ["true"]}"#).expect("submit");
    assert_eq!(typo.status, 400, "{}", typo.text());
    assert!(typo.text().contains("comand"), "{}", typo.text());
    let bad_id = get(leader_http, "/v1/jobs/banana").expect("get");
    assert_eq!(bad_id.status, 400, "{}", bad_id.text());
    assert_eq!(bad_id.json()["error"]["field"], "job");
    let huge = format!(r#"{{"name": "{}"}}"#, "x".repeat(2 << 20));
    // Several times: the master closes with most of the body unread, and its lingering
    // close must let the 413 reach the client every time (not a reset).
    for _ in 0..20 {
        let too_big = post(leader_http, "/v1/jobs", &huge).expect("submit");
        assert_eq!(too_big.status, 413);
    }

    // The admin requests have no route.
    assert_eq!(
        post(leader_http, "/v1/faults", "{}").expect("post").status,
        404
    );

    // Metrics: the master that leads carries the scheduler's series, every master the
    // Raft ones, the slave its task counters.
    let leader = get(leader_http, "/v1/status").expect("status").json()["leader"]
        .as_u64()
        .expect("leader") as usize;
    let series = [
        "hetsched_master_is_leader 1",
        "hetsched_master_term ",
        "hetsched_master_submit_seconds_bucket",
        "hetsched_master_placement_seconds_bucket",
        "hetsched_master_raft_commit_seconds_bucket",
        "hetsched_master_task_outcomes_total{state=\"succeeded\",reason=\"none\"} ",
        "hetsched_master_task_outcomes_total{state=\"cancelled\",reason=\"cancelled\"} ",
        "hetsched_master_tasks{state=\"succeeded\"}",
        "hetsched_master_nodes{state=\"up\"} 1",
        "hetsched_master_jobs ",
        "hetsched_master_dispatches_total",
        "hetsched_master_commands_applied_total",
    ];
    // The gauges refresh each second: wait for them rather than read once.
    let leader_http = c.master_http[leader - 1].clone();
    let mut last = String::new();
    let found = poll(WAIT, || {
        let m = get(&leader_http, "/metrics").ok()?;
        assert_eq!(m.status, 200);
        last = m.text();
        series.iter().all(|s| last.contains(s)).then_some(())
    });
    if found.is_none() {
        let missing: Vec<_> = series.iter().filter(|s| !last.contains(*s)).collect();
        panic!("{missing:?} missing from the leader's /metrics:\n{last}");
    }
    let follower_metrics = get(&follower, "/metrics").expect("metrics").text();
    assert!(follower_metrics.contains("hetsched_master_is_leader 0"));
    let slave_metrics = get(&c.slave_http[0], "/metrics").expect("metrics");
    assert_eq!(slave_metrics.status, 200);
    let text = slave_metrics.text();
    for series in [
        "hetsched_slave_assignments_total",
        "hetsched_slave_tasks_started_total",
        "hetsched_slave_tasks_finished_total",
    ] {
        assert!(
            text.contains(series),
            "{series} missing from the slave's /metrics:\n{text}"
        );
    }
    let v: Value = get(&follower, "/v1/members").expect("members").json();
    assert_eq!(v.as_array().map(Vec::len), Some(3));
}
