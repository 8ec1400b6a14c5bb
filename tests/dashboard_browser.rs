//! The dashboard in a real browser: a cluster runs a job submitted through the
//! API; headless Chromium loads `/ui` over HTTPS with a token and the rendered DOM shows the job's name and state,
//! a waiting task with its reason, the users' quotas and shares, a task's page with
//! every node's verdict, and a flow's page (its steps, their jobs, states and needs, drawn
//! as a graph) linked from its steps' job pages.
//!
//! Needs Debian's `chromium` (`.ci/run` installs it). Without it the test is skipped with
//! a message, except under `CI=true`, where it fails. `HETSCHED_SCREENSHOT=FILE` also
//! saves a screenshot of the overview there (README's picture comes from this), and
//! `HETSCHED_SCREENSHOT_TASK=FILE` one of the waiting task's page ("Why is my task
//! pending?" in the README).

mod support;
mod support_http;

use std::process::{Command, Stdio};
use std::time::Duration;
use support::wait_for;
use support_http::{get, post, HttpCluster};

const WAIT: Duration = Duration::from_secs(60);

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// How long one Chromium run may take before it is killed.
const BROWSER_LIMIT: Duration = Duration::from_secs(90);

/// A browser process, killed when dropped (a failed wait must not leave it running).
struct Browser(std::process::Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs headless Chromium on `url` with `extra` flags; returns its stdout.
fn browse(browser: &str, profile: &std::path::Path, url: &str, extra: &[&str]) -> String {
    let out_file = profile.with_extension(format!("out-{}", extra.len()));
    let err_file = profile.with_extension("err");
    let mut child = Browser(
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                // The test CA is not the system's: trust the master's certificate.
                "--ignore-certificate-errors",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(["--virtual-time-budget=5000", "--window-size=1100,560"])
            .args(extra)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_file).expect("stdout file"))
            .stderr(std::fs::File::create(&err_file).expect("stderr file"))
            .spawn()
            .expect("run chromium"),
    );
    let status = wait_for("chromium to finish", BROWSER_LIMIT, || {
        match child.0.try_wait() {
            Ok(Some(status)) => Some(status),
            Ok(None) => None,
            Err(e) => panic!("waiting for chromium: {e}"),
        }
    });
    assert!(
        status.success(),
        "chromium failed: {}",
        std::fs::read_to_string(&err_file).unwrap_or_default()
    );
    std::fs::read_to_string(&out_file).expect("chromium output")
}

/// The table row of the rendered DOM whose id is `id`, up to its `</tr>`.
fn dom_row<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {id} in the rendered DOM:\n{dom}"));
    let row = &dom[start..];
    &row[..row.find("</tr>").unwrap_or(row.len())]
}

#[test]
fn the_dashboard_shows_a_submitted_job_in_a_real_browser() {
    let Some(browser) = chromium() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but no chromium: .ci/run installs Debian's chromium with apt");
        }
        eprintln!("SKIPPED: no chromium on this machine (apt-get install chromium to run it)");
        return;
    };
    let c = HttpCluster::start("dashboard", 3, 2, 2);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&c, browser)));
    stop_trainer(&c);
    if let Err(e) = result {
        c.cluster.dump_logs();
        std::panic::resume_unwind(e);
    }
}

/// Cancels the long-running job and makes sure its process is gone: a slave killed with
/// the cluster would leave it behind, and other tests look for tasks' processes.
fn stop_trainer(c: &HttpCluster) {
    let pid_file = c.cluster.dir.path().join("trainer.pid");
    let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
    if let Ok(jobs) = get(&c.master_http[0], "/v1/jobs?state=running") {
        for j in jobs.json().as_array().into_iter().flatten() {
            let _ = support_http::delete(&c.master_http[0], &format!("/v1/jobs/{}", j["id"]));
        }
    }
    let start = std::time::Instant::now();
    while alive() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if alive() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn run(c: &HttpCluster, browser: &str) {
    let http = &c.master_http[0];
    wait_for("two nodes up", WAIT, || {
        let s = get(http, "/v1/status").ok()?;
        (s.status == 200 && s.json()["nodes"]["up"].as_u64()? >= 2).then_some(())
    });
    let spec = r#"{"name": "dashboard-demo", "count": 3, "command": ["sh", "-c", "echo rendered"],
                   "resources": {"cpus": 0.5, "mem": 128}}"#;
    let a = post(http, "/v1/jobs", spec).expect("submit");
    assert_eq!(a.status, 201, "{}", a.text());
    let job = a.json()["job_id"].as_u64().expect("job_id");
    wait_for("the job succeeded", WAIT, || {
        let j = get(http, &format!("/v1/jobs/{job}")).ok()?;
        (j.json()["state"] == "succeeded").then_some(())
    });
    // Issue 51: a flow, prep → a, b → join, run to the end (its page is read below).
    let step = |name: &str, needs: &str| {
        format!(
            r#"{{"name": "{name}", "command": ["true"], "resources": {{"cpus": 0.25, "mem": 32}}, "needs": [{needs}]}}"#
        )
    };
    let flow_body = format!(
        r#"{{"step": [{}, {}, {}, {}]}}"#,
        step("prep", ""),
        step("a", r#""prep""#),
        step("b", r#""prep""#),
        step("join", r#""a", "b""#)
    );
    let a = post(http, "/v1/flows", &flow_body).expect("submit the flow");
    assert_eq!(a.status, 201, "{}", a.text());
    let flow = a.json()["flow_id"].as_u64().expect("flow_id");
    let flow_jobs = a.json()["jobs"].clone();
    wait_for("the flow's join succeeded", WAIT, || {
        let f = get(http, &format!("/v1/flows/{flow}")).ok()?.json();
        (f["steps"][3]["state"] == "succeeded").then_some(())
    });
    // Something still running, so that the overview shows bars in use.
    let pid_file = c.cluster.dir.path().join("trainer.pid");
    let running = serde_json::json!({
        "name": "trainer",
        "command": ["sh", "-c", format!("echo $$ > {}; exec sleep 300", pid_file.display())],
        "resources": {"cpus": 1.5, "mem": 2048, "gpus": 1},
    });
    let a = post(http, "/v1/jobs", &running.to_string()).expect("submit");
    assert_eq!(a.status, 201, "{}", a.text());
    wait_for("the trainer running", WAIT, || {
        std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()
    });

    // A quota for `alice`, a task of hers over it, and a task larger than every node.
    let cfg = c.cluster.dir.path().join("priority.toml");
    std::fs::write(
        &cfg,
        "base_priority = 0\n[[users]]\nname = \"alice\"\npriority = 10\nquota = { cpus = 1 }\n",
    )
    .expect("write");
    let out = c
        .cluster
        .cli(&["config", "apply", cfg.to_str().expect("path")]);
    assert!(out.status.success(), "config apply: {out:?}");
    let alice = r#"{"name": "alice-sims", "user": "alice", "count": 1, "command": ["sleep", "300"],
                    "resources": {"cpus": 1, "mem": 64}}"#;
    let a = post(http, "/v1/jobs", alice).expect("submit");
    assert_eq!(a.status, 201, "{}", a.text());
    let huge = r#"{"name": "too-big", "command": ["true"], "allow_unplaceable": true,
                   "resources": {"cpus": 64, "mem": 64}}"#;
    let a = post(http, "/v1/jobs", huge).expect("submit");
    assert_eq!(a.status, 201, "{}", a.text());
    let huge = a.json()["job_id"].as_u64().expect("job_id");
    let waiting = wait_for("the big task's reason", WAIT, || {
        let t = get(http, &format!("/v1/tasks?job={huge}")).ok()?.json();
        let t = t.as_array()?.first()?.clone();
        (t["waiting"]["reason"] == "resources").then_some(t)
    });
    let waiting_task = waiting["id"].as_u64().expect("id");

    // The master serves HTTPS and its API wants a token: the dashboard takes one from
    // its address (`/ui?token=...`).
    let boot = c.cluster.cli(&["acl", "bootstrap", "--json"]);
    assert!(
        boot.status.success(),
        "{}",
        String::from_utf8_lossy(&boot.stderr)
    );
    let boot: serde_json::Value = serde_json::from_slice(&boot.stdout).expect("token JSON");
    let token = boot["token"].as_str().expect("token").to_string();
    let ui = format!("https://{http}/ui?token={token}");
    let profile = c.cluster.dir.path().join("chromium-profile");
    let dom = browse(browser, &profile, &ui, &["--dump-dom"]);
    let row = dom_row(&dom, &format!("job-row-{job}"));
    assert!(row.contains("dashboard-demo"), "job name missing: {row}");
    assert!(row.contains(">succeeded<"), "job state missing: {row}");
    assert!(
        dom.contains("leader: master "),
        "overview missing the leader:\n{dom}"
    );
    assert!(
        dom.contains("<b>leader</b>"),
        "masters missing the leader:\n{dom}"
    );
    assert!(
        dom.contains("slave-1") && dom.contains("slave-2"),
        "nodes missing:\n{dom}"
    );
    assert!(dom.contains("EMULATED"), "emulated GPUs not marked:\n{dom}");
    // The waiting task with its reason, and the quota view.
    let row = dom_row(&dom, &format!("waiting-task-{waiting_task}"));
    assert!(
        row.contains(">resources<") && row.contains("larger than every node"),
        "reason missing: {row}"
    );
    assert!(
        dom.contains("usage-row") && dom.contains("alice") && dom.contains("quota user:alice"),
        "quota view missing:\n{dom}"
    );
    assert!(dom.contains("dominant share"), "DRF shares missing:\n{dom}");
    assert!(dom.contains("<svg"), "plots missing:\n{dom}");
    // Issue 53: accounting — the usage plot, the ended job among the heaviest, each user's
    // fair-share factor (on by default).
    assert!(
        dom.contains("CPU-hours per user, by hour"),
        "usage plot missing:\n{dom}"
    );
    assert!(
        dom.contains(&format!("id=\"heavy-job-{job}\"")),
        "heaviest jobs missing job-{job}:\n{dom}"
    );
    assert!(
        dom.contains("fair-share-row"),
        "fair-share factors missing:\n{dom}"
    );

    // The waiting task's page: one verdict per node, and the reason.
    let page = format!("{ui}#task-{waiting_task}");
    let dom = browse(browser, &profile, &page, &["--dump-dom"]);
    let verdicts = dom.matches("class=\"fails\"").count() + dom.matches("class=\"fits\"").count();
    assert_eq!(verdicts, 2, "one verdict per node:\n{dom}");
    assert!(
        dom.contains("larger than every node"),
        "reason missing:\n{dom}"
    );
    // A node's page.
    let dom = browse(browser, &profile, &format!("{ui}#node-1"), &["--dump-dom"]);
    assert!(
        dom.contains("local queue") && dom.contains("steals in"),
        "node page:\n{dom}"
    );

    // A job's page: its tasks and one task's log.
    let tasks = get(http, &format!("/v1/tasks?job={job}"))
        .expect("tasks")
        .json();
    let task = tasks[0]["id"].as_u64().expect("task id");
    let page = format!("{ui}#job-{job}/task-{task}");
    let dom = browse(browser, &profile, &page, &["--dump-dom"]);
    assert!(
        dom.contains(&format!("task-{task}")),
        "task missing:\n{dom}"
    );
    assert!(dom.contains("rendered"), "task log missing:\n{dom}");
    assert_eq!(
        dom.matches("job-usage-row").count(),
        3,
        "each of its 3 attempts' usage:\n{dom}"
    );

    // The flow's page: each step with its job, state and needs, drawn as a graph; a step's
    // job page links back to it.
    let dom = browse(
        browser,
        &profile,
        &format!("{ui}#flow-{flow}"),
        &["--dump-dom"],
    );
    for name in ["prep", "a", "b", "join"] {
        let job = flow_jobs[name].as_u64().expect("step job");
        let row = dom_row(&dom, &format!("flow-step-{name}"));
        assert!(
            row.contains(&format!("href=\"#job-{job}\"")) && row.contains(">succeeded<"),
            "step {name}: {row}"
        );
        if name == "join" {
            assert!(row.contains(">a, b<"), "join needs a and b: {row}");
        }
    }
    assert!(
        dom.contains("id=\"flow-svg\""),
        "flow graph missing:\n{dom}"
    );
    assert_eq!(dom.matches("class=\"flow-step\"").count(), 4, "{dom}");
    assert_eq!(
        dom.matches("<line ").count(),
        4,
        "one line per edge:\n{dom}"
    );
    let join = flow_jobs["join"].as_u64().expect("join job");
    let dom = browse(
        browser,
        &profile,
        &format!("{ui}#job-{join}"),
        &["--dump-dom"],
    );
    assert!(
        dom.contains(&format!("href=\"#flow-{flow}\"")),
        "the job page links its flow:\n{dom}"
    );

    if let Ok(file) = std::env::var("HETSCHED_SCREENSHOT_TASK") {
        let shot = format!("--screenshot={file}");
        let page = format!("{ui}#task-{waiting_task}");
        browse(browser, &profile, &page, &[&shot, "--window-size=1100,720"]);
        assert!(
            std::path::Path::new(&file).exists(),
            "no screenshot at {file}"
        );
    }
    if let Ok(file) = std::env::var("HETSCHED_SCREENSHOT") {
        let shot = format!("--screenshot={file}");
        let url = ui.clone();
        browse(browser, &profile, &url, &[&shot, "--window-size=1100,1180"]);
        assert!(
            std::path::Path::new(&file).exists(),
            "no screenshot at {file}"
        );
    }
}
