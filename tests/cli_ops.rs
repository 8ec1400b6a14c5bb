//! What must hold, against real clusters: `logs` returns what a task printed, also
//! after it ended; `cancel` stops a running task on its slave; `watch` exits 1 for a job
//! with a failing task (and 0 when all succeed, retries included); `drain` sends no new
//! tasks to the node and re-queues its tasks at the deadline; `jobs 999999` exits 4. The
//! sample spec files in deploy/samples/jobs are submitted here.

mod support;

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use support::{output_text as text, processes_under, wait_for, Cluster};

const WAIT: Duration = Duration::from_secs(60);

fn sample(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/samples/jobs")
        .join(name)
        .display()
        .to_string()
}

fn submit(c: &Cluster, args: &[&str]) -> (u64, Vec<u64>) {
    let mut a = vec!["submit"];
    a.extend(args);
    let v = c
        .json(&a)
        .unwrap_or_else(|| panic!("submit {args:?} failed: {}", text(&c.cli(&a))));
    let job = v["job_id"].as_u64().expect("job id");
    // Listings are newest first; callers get the tasks in index order.
    let mut tasks: Vec<u64> = job_tasks(c, job)
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    tasks.sort_unstable();
    (job, tasks)
}

fn job_tasks(c: &Cluster, job: u64) -> Vec<Value> {
    c.json(&["tasks", "--job", &job.to_string()])
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn task(c: &Cluster, id: u64) -> Option<Value> {
    c.json(&["tasks"])?
        .as_array()?
        .iter()
        .find(|t| t["id"].as_u64() == Some(id))
        .cloned()
}

fn wait_job_done(c: &Cluster, job: u64) -> Vec<Value> {
    wait_for(&format!("job {job} to end"), WAIT, || {
        let t = job_tasks(c, job);
        (!t.is_empty()
            && t.iter().all(|t| {
                matches!(
                    t["state"].as_str(),
                    Some("succeeded" | "failed" | "cancelled")
                )
            }))
        .then_some(t)
    })
}

fn start(name: &str, slaves: usize, cpus: u32) -> Cluster {
    let c = Cluster::start(name, 1, slaves, cpus);
    c.wait_leader(WAIT);
    c.wait_nodes_up(slaves as u64, WAIT);
    c
}

#[test]
fn logs_return_what_a_task_printed_also_after_it_ended() {
    let c = start("cli-logs", 1, 4);
    // The TOML sample, with a flag overriding one of its fields.
    let (job, tasks) = submit(&c, &["--count", "2", &sample("hello.toml")]);
    assert_eq!(tasks.len(), 2, "--count overrides the file's count");
    let done = wait_job_done(&c, job);
    assert!(done.iter().all(|t| t["state"] == "succeeded"), "{done:?}");
    let t = tasks[0].to_string();
    let out = c.cli(&["logs", &format!("task-{t}")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(&format!("hello from task {t}")) && printed.contains("greeting=hi"),
        "{printed}"
    );
    let j = c.json(&["logs", &t]).expect("logs --json");
    assert_eq!(j["task_id"].as_u64(), Some(tasks[0]));
    assert_eq!(j["stream"], "stdout");
    assert!(j["data"].as_str().unwrap_or("").contains("hello from task"));
    // Standard error, and an attempt that never was.
    let (job2, t2) = submit(&c, &["--", "sh", "-c", "echo oops >&2; exit 0"]);
    wait_job_done(&c, job2);
    let err = c.cli(&["logs", "--stderr", &t2[0].to_string()]);
    assert_eq!(
        String::from_utf8_lossy(&err.stdout),
        "oops\n",
        "{}",
        text(&err)
    );
    let none = c.cli(&["logs", "--attempt", "7", &t2[0].to_string()]);
    assert_eq!(none.status.code(), Some(4), "{}", text(&none));
    // --follow prints output as it comes and returns once the task has ended.
    let (_, t3) = submit(&c, &["--", "sh", "-c", "echo first; sleep 2; echo second"]);
    wait_for("the task to start", WAIT, || {
        (task(&c, t3[0])?["state"] == "running").then_some(())
    });
    let f = c.cli(&["logs", "--follow", &t3[0].to_string()]);
    assert_eq!(f.status.code(), Some(0), "{}", text(&f));
    assert_eq!(String::from_utf8_lossy(&f.stdout), "first\nsecond\n");
    // --follow on a task still waiting for room waits for it to start, then follows it.
    let (_, waiting) = submit(
        &c,
        &[
            "--count",
            "2",
            "--cpus",
            "4",
            "--",
            "sh",
            "-c",
            "sleep 1; echo late",
        ],
    );
    let f = c.cli(&["logs", "-f", &format!("task-{}", waiting[1])]);
    assert_eq!(f.status.code(), Some(0), "{}", text(&f));
    assert_eq!(String::from_utf8_lossy(&f.stdout), "late\n");
    // Unknown ids are "not found": exit 4.
    for args in [
        vec!["jobs", "999999"],
        vec!["logs", "task-999999"],
        vec!["cancel", "999999"],
        vec!["cancel", "--task", "999999"],
        vec!["watch", "job-999999"],
        vec!["drain", "no-such-node"],
        vec!["tasks", "--job", "999999"],
        vec!["submit", "--nodes", "no-such-node", "--", "true"],
    ] {
        let o = c.cli(&args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
    }
    // Filters: newest first, by state and user, limited.
    let listed = c.json(&["tasks", "--limit", "2"]).expect("tasks");
    let ids: Vec<u64> = listed
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] > ids[1], "newest first: {ids:?}");
    let mine = c
        .json(&["jobs", "--user", "nobody-at-all"])
        .expect("jobs --user");
    assert_eq!(mine.as_array().map(Vec::len), Some(0));
    let one = c.json(&["jobs", &format!("job-{job}")]).expect("jobs JOB");
    assert_eq!(one[0]["id"].as_u64(), Some(job));
    let bad = c.cli(&["tasks", "--state", "sleepy"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

#[test]
fn cancel_stops_a_running_task_on_its_slave() {
    let c = start("cli-cancel", 1, 4);
    let pid_file = c.dir.path().join("task.pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    let (job, tasks) = submit(&c, &["--count", "2", "--", "sh", "-c", &script]);
    wait_for("both tasks running", WAIT, || {
        let t = job_tasks(&c, job);
        (t.len() == 2 && t.iter().all(|t| t["state"] == "running")).then_some(())
    });
    let pid: i32 = wait_for("the pid file", WAIT, || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    // The pid file names whichever task wrote last; find which task that is.
    let alive = |pid: i32| Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive(pid));
    let out = c.cli(&["cancel", &format!("task-{}", tasks[0])]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t0 = wait_for("task 0 cancelled", WAIT, || {
        let t = task(&c, tasks[0])?;
        (t["state"] == "cancelled").then_some(t)
    });
    assert_eq!(t0["reason"], "cancelled");
    assert_eq!(
        task(&c, tasks[1]).expect("task 1")["state"],
        "running",
        "cancelling one task leaves the other"
    );
    // Cancel the whole job: every `sleep` of it must be gone from the machine.
    let out = c.cli(&["cancel", "--json", &job.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    wait_job_done(&c, job);
    wait_for("the task processes to be killed", WAIT, || {
        (!alive(pid) && !processes_with_env(&c, &format!("HETSCHED_JOB_ID={job}"))).then_some(())
    });
}

/// Whether any live process carries `marker` in its environment.
/// Whether a process of this cluster (its environment mentions the cluster's directory)
/// carries `marker`; other tests' clusters run tasks with the same ids beside it.
fn processes_with_env(c: &Cluster, marker: &str) -> bool {
    !processes_under(c.dir.path(), Some(marker)).is_empty()
}

#[test]
fn watch_exits_1_for_a_job_with_a_failing_task() {
    let c = start("cli-watch", 1, 4);
    let (bad, _) = submit(
        &c,
        &[
            "--count",
            "2",
            "--",
            "sh",
            "-c",
            "test \"$HETSCHED_TASK_INDEX\" = 0",
        ],
    );
    let out = c.cli(&["watch", &format!("job-{bad}")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = c.json(&["tasks", "--job", &bad.to_string(), "--state", "failed"]);
    let failed = v.expect("tasks");
    assert_eq!(failed.as_array().map(Vec::len), Some(1));
    assert_eq!(failed[0]["reason"], "exit");
    // All succeed: exit 0, and --json gives the counts.
    let (good, _) = submit(&c, &["--count", "3", "--", "true"]);
    let out = c.cli(&["watch", "--json", &good.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("line"),
    )
    .expect("json");
    assert_eq!(v["succeeded"], 3);
    assert_eq!(v["state"], "succeeded");
    // The JSON sample: its first attempt fails, the retry (after the backoff) succeeds.
    let (flaky, ftasks) = submit(&c, &[&sample("flaky.json")]);
    let out = c.cli(&["watch", &flaky.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = task(&c, ftasks[0]).expect("task");
    assert_eq!(t["attempt"], 2, "{t}");
    assert_eq!(t["failures"], 1, "{t}");
    assert!(t["reason"].is_null(), "a success clears the reason: {t}");
    let first = c.cli(&["logs", "--stderr", "--attempt", "1", &ftasks[0].to_string()]);
    assert_eq!(String::from_utf8_lossy(&first.stdout), "attempt 1 fails\n");
    // A per-attempt timeout stops the task with reason "timeout".
    let (slow, stasks) = submit(&c, &["--timeout", "1s", "--", "sleep", "120"]);
    let out = c.cli(&["watch", &slow.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = task(&c, stasks[0]).expect("task");
    assert_eq!(t["state"], "failed");
    assert_eq!(t["reason"], "timeout");
    wait_for("the timed-out process to be killed", WAIT, || {
        (!processes_with_env(&c, &format!("HETSCHED_JOB_ID={slow}"))).then_some(())
    });
}

#[test]
fn drain_sends_no_new_tasks_and_requeues_at_the_deadline() {
    // No slave queues (S0.3): the tasks that do not fit must stay pending here.
    let c = Cluster::start_with("cli-drain", 1, 2, 2, &["--queue-depth", "0"]);
    c.wait_leader(WAIT);
    c.wait_nodes_up(2, WAIT);
    let nodes = c.json(&["nodes"]).expect("nodes");
    let id_of = |name: &str| {
        nodes
            .as_array()
            .and_then(|a| a.iter().find(|n| n["name"] == name))
            .and_then(|n| n["id"].as_u64())
            .expect("node id")
    };
    let (n1, n2) = (id_of("slave-1"), id_of("slave-2"));
    let d = c.json(&["drain", "slave-1"]).expect("drain");
    assert_eq!(d["draining"], true);
    let n = c.json(&["nodes"]).expect("nodes");
    let s1 = n
        .as_array()
        .and_then(|a| a.iter().find(|x| x["id"].as_u64() == Some(n1)))
        .cloned()
        .expect("slave-1");
    assert_eq!(s1["draining"], true);
    let st = c.json(&["status"]).expect("status");
    assert_eq!(st["nodes"]["draining"], 1);
    assert_eq!(st["nodes"]["up"], 2);
    let human = c.cli(&["status"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("2 up, 0 down, 1 draining"), "{human}");
    assert!(
        human.contains("leader:") && human.contains("term"),
        "{human}"
    );

    // 4 one-core tasks, 2 cores free outside the drained node: two run, two wait.
    let (job, _) = submit(&c, &["--count", "4", "--cpus", "1", "--", "sleep", "300"]);
    let running = wait_for("two tasks placed", WAIT, || {
        let t = job_tasks(&c, job);
        let placed: Vec<Value> = t
            .iter()
            .filter(|t| t["state"] == "running" || t["state"] == "assigned")
            .cloned()
            .collect();
        (placed.len() == 2).then_some(placed)
    });
    assert!(
        running.iter().all(|t| t["node"].as_u64() == Some(n2)),
        "{running:?}"
    );
    // And it stays that way: nothing reaches the drained node while it drains.
    std::thread::sleep(Duration::from_secs(2));
    let t = job_tasks(&c, job);
    assert!(t.iter().all(|t| t["node"].as_u64() != Some(n1)), "{t:?}");
    assert_eq!(t.iter().filter(|t| t["state"] == "pending").count(), 2);

    // Undrained, it takes the two waiting tasks.
    let u = c
        .json(&["undrain", &format!("node-{n1}")])
        .expect("undrain");
    assert_eq!(u["draining"], false);
    let on_n1 = wait_for("tasks on slave-1", WAIT, || {
        let t = job_tasks(&c, job);
        let mine: Vec<u64> = t
            .iter()
            .filter(|t| t["node"].as_u64() == Some(n1) && t["state"] == "running")
            .filter_map(|t| t["id"].as_u64())
            .collect();
        (mine.len() == 2).then_some(mine)
    });

    // Drain with a deadline: at it, slave-1's tasks are stopped and re-queued ("drained").
    let out = c.cli(&["drain", "--deadline", "2s", &n1.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let requeued = wait_for("slave-1's tasks re-queued", WAIT, || {
        let t = job_tasks(&c, job);
        let back: Vec<Value> = t
            .iter()
            .filter(|t| on_n1.contains(&t["id"].as_u64().unwrap_or(0)))
            .filter(|t| t["state"] == "pending" && t["reason"] == "drained")
            .cloned()
            .collect();
        (back.len() == 2).then_some(back)
    });
    assert!(requeued.iter().all(|t| t["attempt"] == 1), "{requeued:?}");
    let st = c.json(&["status"]).expect("status");
    assert_eq!(st["nodes"]["draining"], 1);
    // Their processes are gone from slave-1 (the other two keep running on slave-2).
    wait_for("drained processes stopped", WAIT, || {
        on_n1
            .iter()
            .all(|t| !processes_with_env(&c, &format!("HETSCHED_TASK_ID={t}")))
            .then_some(())
    });
    assert_eq!(
        job_tasks(&c, job)
            .iter()
            .filter(|t| t["state"] == "running")
            .count(),
        2,
        "slave-2's tasks are untouched"
    );
    let out = c.cli(&["cancel", &job.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    wait_for("the job's processes to be killed", WAIT, || {
        (!processes_with_env(&c, &format!("HETSCHED_JOB_ID={job}"))).then_some(())
    });
}
