//! Issue 55, idempotent submits on real processes (secured, default flags): the leader
//! exits between a submit's commit and its answer (the admin port's `exit_after_commit`
//! bug), the CLI's own retry with the same `--idempotency-key` reaches the new leader and is
//! answered with the first job, and a later submit with that key too: one job in all. A
//! flow submitted twice with one key is one flow; a bad key is exit 2.

mod support;

use hetsched_common::protocol::{BugSpec, ClientRequest, ClientResponse, Message};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(90);

/// `hetsched --masters ... ARGS` with a client timeout long enough for an election.
fn cli_patient(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hetsched"));
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        cmd.env("HETSCHED_CERTS_DIR", certs);
    }
    cmd.arg("--masters")
        .arg(c.masters_arg())
        .args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "30000")
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched")
}

fn last_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", output_text(out)))
}

fn submit_keyed(c: &Cluster, key: &str, name: &str) -> u64 {
    let out = cli_patient(
        c,
        &[
            "submit",
            "--json",
            "--idempotency-key",
            key,
            "--name",
            name,
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    last_json(&out)["job_id"].as_u64().expect("job_id")
}

fn jobs_named(c: &Cluster, name: &str) -> usize {
    let jobs = c.json(&["jobs"]).expect("jobs");
    let all = jobs.as_array().cloned().unwrap_or_default();
    all.iter().filter(|j| j["name"] == name).count()
}

#[test]
fn a_retried_submit_after_the_leader_died_before_answering_makes_one_job() {
    let mut c = Cluster::start("idempotency", 3, 1, 2);
    let leader = c.wait_leader(WAIT);
    c.wait_nodes_up(1, WAIT);
    let i = (leader - 1) as usize;
    let bug = ClientRequest::SetBugs(BugSpec {
        exit_after_commit: true,
        ..BugSpec::default()
    });
    match wire_call_direct(&c.admin_addrs[i], bug, Duration::from_secs(5)) {
        Ok(Message::ClientReply(ClientResponse::Done)) => {}
        other => panic!("set the bug: {other:?}"),
    }
    let job = submit_keyed(&c, "sweep-7", "keyed");
    assert!(
        !c.masters[i].is_running(),
        "the leader exited before answering: {}",
        c.masters[i].log_text()
    );
    assert!(c.masters[i].log_text().contains("exit-after-commit"));
    assert_eq!(
        submit_keyed(&c, "sweep-7", "keyed"),
        job,
        "the key answers the first job"
    );
    assert_eq!(jobs_named(&c, "keyed"), 1, "one job");
    // Another key is another job.
    assert_ne!(submit_keyed(&c, "sweep-8", "keyed"), job);
    assert_eq!(jobs_named(&c, "keyed"), 2);
    // A flow submitted twice with one key is one flow.
    let flow = c.dir.path().join("f.toml");
    std::fs::write(&flow, "[[step]]\nname = \"a\"\ncommand = [\"true\"]\n").expect("write");
    let flow = flow.to_string_lossy().to_string();
    let args = ["submit-flow", "--json", "--idempotency-key", "f-1", &flow];
    let (a, b) = (cli_patient(&c, &args), cli_patient(&c, &args));
    assert!(
        a.status.success() && b.status.success(),
        "{}",
        output_text(&b)
    );
    assert_eq!(last_json(&a)["flow_id"], last_json(&b)["flow_id"]);
    // A key over 64 bytes is refused before anything is sent.
    let long = "k".repeat(65);
    let out = cli_patient(&c, &["submit", "--idempotency-key", &long, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
}
