//! Issue 55, waiting without polling over HTTP on real processes: 40 jobs waited for at
//! once with `GET /v1/jobs/{id}/wait` cost exactly one request each (the server's own
//! `hetsched_master_http_requests_total{route="/v1/jobs/{id}/wait"}` counts them), every
//! answer is the ended job; a wait with a short timeout answers the running job when it
//! passes; a bad timeout is 400 naming the field.

mod support;
mod support_http;

use std::time::{Duration, Instant};
use support_http::{delete, get, post, HttpCluster};

const JOBS: usize = 40;

/// The server's count of wait requests, from its `/metrics`.
fn waits_counted(http: &str) -> u64 {
    let m = get(http, "/metrics").expect("metrics").text();
    (m.lines())
        .find(|l| {
            l.starts_with("hetsched_master_http_requests_total{route=\"/v1/jobs/{id}/wait\"}")
        })
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

fn submit(http: &str, command: &str) -> u64 {
    let body = format!(
        r#"{{"name": "waited", "command": ["sh", "-c", "{command}"], "resources": {{"cpus": 0.1, "mem": 16}}}}"#
    );
    let a = post(http, "/v1/jobs", &body).expect("submit");
    assert_eq!(a.status, 201, "{}", a.text());
    a.json()["job_id"].as_u64().expect("job_id")
}

#[test]
fn waiting_for_many_jobs_is_one_request_each_and_answers_when_they_end() {
    let c = HttpCluster::start("http-wait", 1, 1, 4);
    let http = c.master_http[0].clone();
    support::wait_for("a leader", Duration::from_secs(60), || {
        let s = get(&http, "/v1/status").ok()?;
        s.json()["leader"].is_u64().then_some(())
    });
    c.cluster.wait_nodes_up(1, Duration::from_secs(60));
    let jobs: Vec<u64> = (0..JOBS).map(|_| submit(&http, "sleep 1")).collect();
    let before = waits_counted(&http);
    let waiters: Vec<_> = (jobs.iter().copied())
        .map(|job| {
            let http = http.clone();
            std::thread::spawn(move || get(&http, &format!("/v1/jobs/{job}/wait?timeout=120s")))
        })
        .collect();
    for (job, w) in jobs.iter().zip(waiters) {
        let a = w.join().expect("waiter").expect("wait");
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.json()["id"], *job);
        assert_eq!(a.json()["state"], "succeeded", "{}", a.text());
    }
    assert_eq!(
        waits_counted(&http) - before,
        JOBS as u64,
        "one wait request per job, no polling"
    );
    // A timeout answers the job as it is.
    let long = submit(&http, "sleep 600");
    let t = Instant::now();
    let a = get(&http, &format!("/v1/jobs/{long}/wait?timeout=1s")).expect("wait");
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(["pending", "running"].contains(&a.json()["state"].as_str().unwrap_or("")));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    let bad = get(&http, &format!("/v1/jobs/{long}/wait?timeout=forever")).expect("wait");
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert_eq!(bad.json()["error"]["field"], "timeout");
    assert_eq!(
        delete(&http, &format!("/v1/jobs/{long}")).map(|a| a.status),
        Ok(200)
    );
}
