//! Supervised tasks on real processes: a task keeps running while its slave agent is killed
//! and restarted, is never run twice under one attempt, has its true exit code reported when
//! it ended while the agent was down, and runs again as attempt 2 when its supervisor died
//! with the agent. Also: GPU visibility per task, and the node's cgroup mode.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{wait_for, Cluster};

const WAIT: Duration = Duration::from_secs(60);

/// One master (a long node timeout, so the agent's restart is not a node loss) and one slave.
fn cluster(name: &str, slave_flags: &[&str]) -> Cluster {
    let c = Cluster::start_full(name, 1, 1, 2, &["--node-timeout-ms", "120000"], slave_flags);
    c.wait_leader(WAIT);
    c.wait_nodes_up(1, WAIT);
    c
}

fn submit(c: &Cluster, args: &[&str]) -> u64 {
    let mut a = vec!["submit"];
    a.extend_from_slice(args);
    c.json(&a)
        .and_then(|v| v["job_id"].as_u64())
        .unwrap_or_else(|| {
            c.dump_logs();
            panic!("submit {args:?} failed")
        })
}

/// The task of `job` (jobs here have one task) once `f` holds for it.
fn wait_task(c: &Cluster, job: u64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(what, WAIT, || {
            c.tasks()
                .into_iter()
                .find(|t| t["job_id"].as_u64() == Some(job) && f(t))
        })
    }));
    match found {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tasks: {:?}", c.tasks());
            c.dump_logs();
            std::panic::resume_unwind(e)
        }
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .map(|state| state == "Z" || state == "X")
            .unwrap_or(true),
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn read_pid(path: &Path) -> i32 {
    wait_for("the task's pid file", WAIT, || {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    })
}

/// The script of the restart tests: prints `attempt $HETSCHED_ATTEMPT`, appends
/// `$HETSCHED_TASK_ID $HETSCHED_ATTEMPT`, records its pid, sleeps `sleep` seconds (attempt 1 only when `first_only`), appends `done`, exits
/// `code`.
fn script(dir: &Path, sleep: u32, first_only: bool, code: i32) -> (String, PathBuf, PathBuf) {
    let out = dir.join("lines.txt");
    let pid = dir.join("task.pid");
    let nap = if first_only {
        format!("if [ \"$HETSCHED_ATTEMPT\" = 1 ]; then sleep {sleep}; fi")
    } else {
        format!("sleep {sleep}")
    };
    let s = format!(
        "echo attempt $HETSCHED_ATTEMPT; echo $HETSCHED_TASK_ID $HETSCHED_ATTEMPT >> {out}; echo $$ > {pid}; {nap}; echo done >> {out}; exit {code}",
        out = out.display(),
        pid = pid.display(),
    );
    (s, out, pid)
}

#[test]
fn task_survives_agent_kill_and_restart_and_runs_once() {
    let mut c = cluster("supervise-survive", &[]);
    let (s, out, pidfile) = script(c.dir.path(), 3, false, 0);
    let job = submit(&c, &["--cpus", "0.5", "--", "sh", "-c", &s]);
    wait_for("the first line", WAIT, || {
        (lines(&out).len() == 1).then_some(())
    });
    let pid = read_pid(&pidfile);
    // Its output is readable while it runs (from the attempt's live file) ...
    let id = wait_task(&c, job, "the task to run", |t| t["state"] == "running")["id"]
        .as_u64()
        .expect("id")
        .to_string();
    let stdout_of = |c: &Cluster, args: &[&str]| {
        let o = c.cli(&[&["logs"], args, &[id.as_str()]].concat());
        assert_eq!(o.status.code(), Some(0), "logs {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(stdout_of(&c, &[]), "attempt 1\n");
    c.slaves[0].kill9();
    assert!(!is_gone(pid), "killing the agent did not kill the task");
    c.slaves[0].restart().expect("restart");
    let t = wait_task(&c, job, "the task to succeed", |t| {
        t["state"] == "succeeded"
    });
    // ... and once it ended under the restarted agent: stdout kept, the empty stderr too.
    assert_eq!(stdout_of(&c, &[]), "attempt 1\n");
    assert_eq!(stdout_of(&c, &["--stderr"]), "");
    assert_eq!(t["attempt"], 1, "{t}");
    assert_eq!(t["exit_code"], 0, "{t}");
    assert_eq!(t["reason"], Value::Null, "{t}");
    assert_eq!(t["cpus"], 0.5, "{t}");
    let id = t["id"].as_u64().expect("id");
    assert_eq!(
        lines(&out),
        vec![format!("{id} 1"), "done".to_string()],
        "one run, never killed"
    );
}

#[test]
fn task_ending_while_the_agent_is_down_reports_its_true_exit_code() {
    let mut c = cluster("supervise-down", &[]);
    let (s, out, pidfile) = script(c.dir.path(), 1, false, 7);
    let job = submit(&c, &["--", "sh", "-c", &s]);
    wait_for("the first line", WAIT, || {
        (lines(&out).len() == 1).then_some(())
    });
    let pid = read_pid(&pidfile);
    c.slaves[0].kill9();
    wait_for("the task to end while the agent is down", WAIT, || {
        is_gone(pid).then_some(())
    });
    c.slaves[0].restart().expect("restart");
    let t = wait_task(&c, job, "the task to fail", |t| t["state"] == "failed");
    assert_eq!(t["attempt"], 1, "{t}");
    assert_eq!(t["exit_code"], 7, "the true exit code: {t}");
    assert_eq!(t["reason"], "exit", "{t}");
    assert_eq!(lines(&out).len(), 2, "one run: its line and done");
}

#[test]
fn agent_and_supervisor_killed_together_run_again_as_attempt_2() {
    let mut c = cluster("supervise-lost", &[]);
    // Attempt 1 sleeps long (it must still be running when the agent comes back); attempt 2
    // finishes at once.
    let (s, out, pidfile) = script(c.dir.path(), 120, true, 0);
    let job = submit(&c, &["--", "sh", "-c", &s]);
    wait_for("the first line", WAIT, || {
        (lines(&out).len() == 1).then_some(())
    });
    let first = read_pid(&pidfile);
    let t = wait_task(&c, job, "the task to run", |t| t["state"] == "running");
    let id = t["id"].as_u64().expect("id");
    let record = c
        .dir
        .path()
        .join(format!("slave-1/attempts/task-{id}-1/supervisor.json"));
    let supervisor = wait_for("the supervisor's record", WAIT, || {
        let v: Value = serde_json::from_slice(&std::fs::read(&record).ok()?).ok()?;
        v["pid"].as_i64()
    }) as i32;
    c.slaves[0].kill9();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the supervisor");
    wait_for("the supervisor to die", WAIT, || {
        is_gone(supervisor).then_some(())
    });
    c.slaves[0].restart().expect("restart");
    let t = wait_task(&c, job, "attempt 2 to succeed", |t| {
        t["state"] == "succeeded"
    });
    assert_eq!(t["attempt"], 2, "{t}");
    assert!(is_gone(first), "attempt 1's leftover was killed");
    assert_eq!(
        lines(&out),
        vec![format!("{id} 1"), format!("{id} 2"), "done".to_string()]
    );
}

#[test]
fn tasks_granted_different_gpus_see_different_devices() {
    let c = cluster("supervise-gpus", &["--gpus", "2"]);
    let dir = c.dir.path().to_path_buf();
    let s = format!(
        "echo \"$CUDA_VISIBLE_DEVICES|$HETSCHED_GPUS|$NVIDIA_VISIBLE_DEVICES\" > {}/gpu-$HETSCHED_TASK_INDEX; sleep 1",
        dir.display()
    );
    let job = submit(&c, &["--gpus", "1", "--count", "2", "--", "sh", "-c", &s]);
    wait_for("both tasks to succeed", WAIT, || {
        let tasks = c.tasks();
        let ok = tasks
            .iter()
            .filter(|t| t["job_id"].as_u64() == Some(job) && t["state"] == "succeeded")
            .count();
        (ok == 2).then_some(())
    });
    let seen: Vec<String> = (0..2)
        .map(|i| {
            std::fs::read_to_string(dir.join(format!("gpu-{i}")))
                .expect("gpu file")
                .trim()
                .to_string()
        })
        .collect();
    let cuda: Vec<&str> = seen
        .iter()
        .map(|l| {
            let parts: Vec<&str> = l.split('|').collect();
            assert_eq!(parts.len(), 3, "{l}");
            assert!(
                parts.iter().all(|p| *p == parts[0]),
                "the three variables agree: {l}"
            );
            parts[0]
        })
        .collect();
    assert_ne!(cuda[0], cuda[1], "different devices: {seen:?}");
    for d in &cuda {
        assert!(*d == "0" || *d == "1", "one device each: {seen:?}");
    }

    let nodes = c.json(&["nodes"]).expect("nodes");
    let mode = nodes[0]["cgroup"]
        .as_str()
        .expect("cgroup field")
        .to_string();
    assert!(["v1", "v2", "none"].contains(&mode.as_str()), "{mode}");
    if is_root() && Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() {
        assert_eq!(mode, "v1", "root on a v1 host uses it");
    }
}

#[test]
fn slave_without_cgroups_says_none() {
    let c = cluster("supervise-nocg", &["--no-cgroups"]);
    let nodes = c.json(&["nodes"]).expect("nodes");
    assert_eq!(nodes[0]["cgroup"], "none");
}
