//! Values no cluster could hold, against real processes: absurd resources answer HTTP 400
//! naming the field, and a request no registered node could ever hold is refused by the
//! leader with why (exit 2) unless `--allow-unplaceable`.

mod support;
mod support_http;

use hetsched_common::protocol::{ClientRequest, ErrorKind, Message};
use hetsched_common::{ClientRequestId, JobSpec, ResourceRequest};
use std::time::Duration;
use support::{wait_for, wire_call};
use support_http::{post, HttpCluster};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn absurd_and_unplaceable_requests_are_refused_with_why() {
    // One master, two slaves of 2 cores (4096 MiB, one emulated GPU each).
    let c = HttpCluster::start("absurd-values", 1, 2, 2);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&c)));
    if let Err(e) = result {
        c.cluster.dump_logs();
        std::panic::resume_unwind(e);
    }
}

fn run(c: &HttpCluster) {
    let http = &c.master_http[0];
    c.cluster.wait_leader(WAIT);
    c.cluster.wait_nodes_up(2, WAIT);

    // Absurd values over HTTP: 400 naming the field by its dotted path.
    for (body, field) in [
        (
            r#"{"command": ["true"], "resources": {"cpus": 1e308}}"#,
            "resources.cpus",
        ),
        (
            r#"{"command": ["true"], "resources": {"cpus": -1}}"#,
            "resources.cpus",
        ),
        (
            r#"{"command": ["true"], "resources": {"mem": 1e300}}"#,
            "resources.mem",
        ),
        (
            r#"{"command": ["true"], "resources": {"mem": -1}}"#,
            "resources.mem",
        ),
        (
            r#"{"command": ["true"], "resources": {"gpus": 5000}}"#,
            "resources.gpus",
        ),
    ] {
        let a = post(http, "/v1/jobs", body).expect("post");
        assert_eq!(a.status, 400, "{body}: {}", a.text());
        let e = &a.json()["error"];
        assert_eq!(e["kind"], "bad-input", "{body}: {e}");
        assert_eq!(e["field"], field, "{body}: {e}");
    }

    // The CLI refuses the same values before sending anything: exit 2.
    for args in [
        ["submit", "--cpus", "1e308", "--", "true"],
        ["submit", "--cpus", "inf", "--", "true"],
        ["submit", "--mem", "2000000000", "--", "true"],
    ] {
        let out = c.cluster.cli(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    }

    // A client that skips those checks: the leader holds the spec to the limits itself,
    // even with `allow_unplaceable`.
    let spec = JobSpec {
        resources: ResourceRequest {
            cpu_milli: u64::MAX,
            mem_mib: 64,
            ..Default::default()
        },
        count: 1,
        command: vec!["true".into()],
        ..Default::default()
    };
    let req = ClientRequest::Submit {
        request: ClientRequestId(0xab5_0001),
        spec,
        allow_unplaceable: true,
    };
    match wire_call(&c.cluster.master_addrs[0], req, WAIT) {
        Ok(Message::Error(e)) => {
            assert_eq!(e.kind, ErrorKind::Invalid, "{e:?}");
            assert!(e.message.contains("100000 cores per task"), "{e:?}");
        }
        other => panic!("an over-limit spec on the wire must be refused: {other:?}"),
    }

    // More cores than any node has: refused by the leader with why, exit 2.
    let out = c.cluster.cli(&["submit", "--cpus", "1000", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cpus 1000: no node has more than 2"), "{err}");
    // Over HTTP: 400, and likewise for memory and GPUs.
    for (body, why) in [
        (
            r#"{"command": ["true"], "resources": {"cpus": 1000}}"#,
            "cpus 1000: no node has more than 2",
        ),
        (
            r#"{"command": ["true"], "resources": {"mem": 8192}}"#,
            "mem 8192: no node has more than 4096",
        ),
        (
            r#"{"command": ["true"], "resources": {"gpus": 2}}"#,
            "gpus 2: no node has more than 1",
        ),
    ] {
        let a = post(http, "/v1/jobs", body).expect("post");
        assert_eq!(a.status, 400, "{body}: {}", a.text());
        let e = &a.json()["error"];
        assert_eq!(e["kind"], "bad-input", "{e}");
        assert!(e["message"].as_str().unwrap_or("").contains(why), "{e}");
    }

    // With --allow-unplaceable (HTTP: "allow_unplaceable": true) it is accepted and waits.
    let job = c
        .cluster
        .json(&[
            "submit",
            "--cpus",
            "1000",
            "--allow-unplaceable",
            "--",
            "true",
        ])
        .expect("an unplaceable job allowed");
    let job = job["job_id"].as_u64().expect("job_id");
    let a = post(
        http,
        "/v1/jobs",
        r#"{"command": ["true"], "allow_unplaceable": true, "resources": {"cpus": 1000}}"#,
    )
    .expect("post");
    assert_eq!(a.status, 201, "{}", a.text());
    wait_for("the allowed job listed pending", WAIT, || {
        let tasks = c.cluster.json(&["tasks", "--job", &job.to_string()])?;
        (tasks.as_array()?.first()?["state"] == "pending").then_some(())
    });

    // A drained node still counts: a request that fits it is not refused.
    let out = c.cluster.cli(&["drain", "slave-1"]);
    assert!(out.status.success(), "{out:?}");
    let out = c.cluster.cli(&["drain", "slave-2"]);
    assert!(out.status.success(), "{out:?}");
    let fits = c.cluster.json(&["submit", "--cpus", "2", "--", "true"]);
    assert!(fits.is_some(), "a job that fits a drained node is accepted");
}
