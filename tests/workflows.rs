//! Workflows (issue 51) on real processes with default flags, secured: a job `--after` another
//! starts only once that one ended (stamps written by the tasks), a failed job cancels its
//! dependents with reason `dependency` naming it (transitively), `--after-fail` and
//! `--after-any` run, `--after-each` pairs task i with task i, `--singleton` never overlaps
//! two jobs of one (user, name), `--max-running 2` never has three tasks running; the
//! waiting reason, `explain`, `jobs` and the exit codes of the edge (4 unknown job, 2
//! `--after-each` count mismatch, 3 another user's job).

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

/// Runs `scenario` on a fresh cluster of one master and two 4-core slaves, dumping the
/// processes' logs if it fails.
fn with_cluster(name: &str, scenario: impl FnOnce(&Cluster)) {
    let c = Cluster::start(name, 1, 2, 4);
    c.wait_nodes_up(2, WAIT);
    c.scenario(scenario);
}

/// Submits with `--json`; the job's id.
fn submit(c: &Cluster, args: &[&str]) -> u64 {
    c.submit_id(args)
}

/// A task command: `sh -c SCRIPT`, where `{d}` in the script is the scratch dir and `$I`
/// the task's index.
fn sh(dir: &Path, script: &str) -> Vec<String> {
    let script = format!(
        "I=$HETSCHED_TASK_INDEX; {}",
        script.replace("{d}", &dir.display().to_string())
    );
    vec!["--".into(), "sh".into(), "-c".into(), script]
}

/// Submits `flags` then the command `sh -c SCRIPT`.
fn submit_sh(c: &Cluster, flags: &[&str], script: &str) -> u64 {
    let mut a: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    a.extend(sh(c.dir.path(), script));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    submit(c, &a)
}

/// The job as `jobs JOB --json` lists it.
fn job(c: &Cluster, id: u64) -> Value {
    c.json(&["jobs", &id.to_string()])
        .and_then(|v| v.as_array()?.first().cloned())
        .unwrap_or(Value::Null)
}

/// Waits until job `id` is in `state`.
fn wait_job(c: &Cluster, id: u64, state: &str) -> Value {
    wait_for(&format!("job {id} {state}"), WAIT, || {
        let j = job(c, id);
        let now = j["state"].as_str()?;
        assert!(
            now == state || !matches!(now, "succeeded" | "failed" | "cancelled"),
            "job {id} ended {now}, not {state}: {j}"
        );
        (now == state).then_some(j)
    })
}

/// The job's tasks as `tasks --job ID --json` lists them, in index order.
fn tasks_of(c: &Cluster, id: u64) -> Vec<Value> {
    let mut ts = c
        .json(&["tasks", "--job", &id.to_string()])
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    ts.sort_by_key(|t| t["index"].as_u64());
    ts
}

/// The most intervals open at once.
fn most_at_once(intervals: &[(u128, u128)]) -> usize {
    let mut edges: Vec<(u128, i32)> = Vec::new();
    for (s, e) in intervals {
        edges.push((*s, 1));
        edges.push((*e, -1));
    }
    edges.sort(); // an end before a start at the same instant
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The CLI's exit code and stderr.
fn exit_of(c: &Cluster, args: &[&str]) -> (i32, String) {
    let out = c.cli(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dependents_start_after_their_jobs_and_a_failure_cancels_them_transitively() {
    with_cluster("wf-after", |c| {
        let a = submit_sh(c, &["--name", "a"], &stamped("a", "2"));
        let a_text = a.to_string();
        let b = submit_sh(c, &["--after", &a_text], "date +%s%N > {d}/b.start");
        // While a runs, b waits for it, and says so.
        let b_task = wait_for("b waiting for a", WAIT, || {
            let t = tasks_of(c, b).into_iter().next()?;
            (t["waiting"]["reason"] == "dependency").then_some(t)
        });
        let detail = b_task["waiting"]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&format!("job-{a}")), "{detail}");
        let b_id = b_task["id"].as_u64().expect("id").to_string();
        let e = c.json(&["explain", &b_id]).expect("explain");
        assert_eq!(e["dependencies"][0]["kind"], "after", "{e}");
        assert_eq!(e["dependencies"][0]["job"].as_u64(), Some(a), "{e}");
        assert_eq!(e["dependencies"][0]["status"], "waiting", "{e}");
        let listed = job(c, b);
        assert_eq!(listed["after"], serde_json::json!([a]), "{listed}");
        assert_eq!(job(c, a)["dependents"], serde_json::json!([b]));
        let table = String::from_utf8_lossy(&c.cli(&["jobs"]).stdout).into_owned();
        assert!(
            table.contains("DEPENDS") && table.contains(&format!("after:{a}")),
            "{table}"
        );

        let f = submit_sh(c, &["--name", "f"], "sleep 1; exit 3");
        let f_text = f.to_string();
        let bf = submit(c, &["--after", &f_text, "--", "true"]);
        let cf = submit(c, &["--after", &bf.to_string(), "--", "true"]);
        let on_fail = submit_sh(c, &["--after-fail", &f_text], "date +%s%N > {d}/fail.start");
        let any_f = submit(c, &["--after-any", &f_text, "--", "true"]);
        let any_a = submit(c, &["--after-any", &a_text, "--", "true"]);

        wait_job(c, b, "succeeded");
        assert!(
            stamp(c, "b.start") >= stamp(c, "a.end"),
            "b started before a ended"
        );
        wait_job(c, f, "failed");
        wait_job(c, on_fail, "succeeded");
        wait_job(c, any_f, "succeeded");
        wait_job(c, any_a, "succeeded");
        for (job, follows, state) in [(bf, f, "failed"), (cf, bf, "cancelled")] {
            wait_job(c, job, "cancelled");
            let t = &tasks_of(c, job)[0];
            assert_eq!(t["reason"], "dependency", "{t}");
            let d = t["reason_detail"].as_str().unwrap_or_default();
            assert!(d.contains(&format!("job-{follows} {state}")), "{d}");
        }
        assert!(job(c, a)["dependents"]
            .as_array()
            .is_some_and(Vec::is_empty));

        // The edge: unknown jobs are not found, after-each counts must match.
        let (code, err) = exit_of(c, &["submit", "--after", "99999", "--", "true"]);
        assert_eq!(code, 4, "{err}");
        assert!(err.contains("job-99999"), "{err}");
        let (code, err) = exit_of(
            c,
            &[
                "submit",
                "--after-each",
                &a_text,
                "--count",
                "2",
                "--",
                "true",
            ],
        );
        assert_eq!(code, 2, "{err}");
        // Another user's job needs read access to it: alice may not follow root's job.
        let alice = client_certs(c.dir.path(), "alice");
        let out = Command::new(BIN)
            .args([
                "--masters",
                &c.masters_arg(),
                "submit",
                "--after",
                &a_text,
                "--",
                "true",
            ])
            .env("HETSCHED_CERTS_DIR", &alice)
            .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
            .env_remove("HETSCHED_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("run hetsched");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("permission denied"), "{err}");
    });
}

/// A client certificates directory for `user` from the test process's CA.
fn client_certs(dir: &Path, user: &str) -> std::path::PathBuf {
    use hetsched::local::security;
    let ca = security::process_ca().expect("test CA");
    let out = dir.join(format!("certs-client-{user}"));
    security::issue(&ca, hetsched_common::certs::Role::Client, user, &out).expect("issue");
    out
}

#[test]
fn after_each_pairs_tasks_singletons_never_overlap_and_max_running_holds() {
    with_cluster("wf-each", |c| {
        // Task i of a sleeps 3 - i seconds (task 2 ends first); task 1 fails.
        let a = submit_sh(
            c,
            &["--count", "3"],
            "sleep $((3 - I)); [ $I = 1 ] && exit 5; date +%s%N > {d}/a.$I.end",
        );
        let b = submit_sh(
            c,
            &["--count", "3", "--after-each", &a.to_string()],
            "date +%s%N > {d}/b.$I.start",
        );
        let single = ["--name", "solo", "--singleton", "--count", "2"];
        let s1 = submit_sh(c, &single, &stamped("s1.$I", "1"));
        let s2 = submit_sh(c, &single, &stamped("s2.$I", "1"));
        let throttled = submit_sh(
            c,
            &["--count", "6", "--max-running", "2"],
            &stamped("t.$I", "0.7"),
        );

        wait_job(c, a, "failed");
        let bt = wait_for("b's tasks ended", WAIT, || {
            let ts = tasks_of(c, b);
            ts.iter()
                .all(|t| matches!(t["state"].as_str(), Some("succeeded" | "cancelled")))
                .then_some(ts)
        });
        assert_eq!(bt[0]["state"], "succeeded");
        assert_eq!(bt[2]["state"], "succeeded");
        assert_eq!(bt[1]["state"], "cancelled", "{}", bt[1]);
        assert_eq!(bt[1]["reason"], "dependency");
        let d = bt[1]["reason_detail"].as_str().unwrap_or_default();
        assert!(d.contains(&format!("task 1 of job-{a} failed")), "{d}");
        for i in [0, 2] {
            assert!(stamp(c, &format!("b.{i}.start")) >= stamp(c, &format!("a.{i}.end")));
        }
        // Paired, not after the whole job: task 2 of b ran before task 0 of a ended.
        assert!(stamp(c, "b.2.start") < stamp(c, "a.0.end"));

        wait_job(c, s1, "succeeded");
        wait_job(c, s2, "succeeded");
        let span = |job: &str| {
            let starts = (0..2).map(|i| stamp(c, &format!("{job}.{i}.start")));
            let ends = (0..2).map(|i| stamp(c, &format!("{job}.{i}.end")));
            (starts.min().unwrap_or(0), ends.max().unwrap_or(0))
        };
        let (one, two) = (span("s1"), span("s2"));
        assert!(
            one.1 <= two.0 || two.1 <= one.0,
            "singletons overlapped: {one:?} {two:?}"
        );

        wait_job(c, throttled, "succeeded");
        let runs: Vec<(u128, u128)> = (0..6)
            .map(|i| {
                (
                    stamp(c, &format!("t.{i}.start")),
                    stamp(c, &format!("t.{i}.end")),
                )
            })
            .collect();
        assert_eq!(most_at_once(&runs), 2, "{runs:?}");
    });
}
