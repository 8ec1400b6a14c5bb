//! What must hold, on real processes: a high-priority user's task preempts the two
//! latest-submitted tasks of a low-priority user on a full slave, runs within 15 s, and
//! every low task succeeds later, once per attempt. Also: `config apply|show`, a bad file's
//! line and exit 2, and `submit --dry-run`.

mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::*;

const CONFIG: &str = r#"
base_priority = 0
[[users]]
name = "low"
priority = 10
[[users]]
name = "high"
priority = 100
quota = { cpus = 4 }
"#;

#[test]
fn a_high_priority_task_preempts_the_latest_low_tasks_and_everything_runs_once_per_attempt() {
    let c = Cluster::start_with("preempt", 3, 1, 4, &["--preempt-grace", "2s"]);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

/// Runs `config ARGS --json` (the flag belongs to the sub-subcommand) and parses its line.
fn config_json(c: &Cluster, args: &[&str]) -> Value {
    let mut a = vec!["config"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = c.cli(&a);
    assert!(out.status.success(), "config {args:?}: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("json line")
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));

    // A bad file is refused whole, with its line and key; nothing changes.
    let bad = c.dir.path().join("bad.toml");
    std::fs::write(&bad, "[[users]]\nname = \"low\"\npriority = \"very\"\n").expect("write");
    let out = c.cli(&["config", "apply", bad.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3"), "{err}");
    let shown = config_json(c, &["show"]);
    assert_eq!(shown["version"], 0, "{shown}");

    let good = c.dir.path().join("priority.toml");
    std::fs::write(&good, CONFIG).expect("write");
    let applied = config_json(c, &["apply", good.to_str().expect("path")]);
    assert_eq!(applied["version"], 1, "{applied}");
    let shown = config_json(c, &["show"]);
    assert_eq!(shown["users"][1]["name"], "high", "{shown}");

    let file = c.dir.path().join("runs.txt");
    let script = format!(
        "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> {}; sleep 6",
        file.display()
    );
    let low = c
        .json(&[
            "submit", "--user", "low", "--cpus", "1", "--count", "4", "--", "sh", "-c", &script,
        ])
        .expect("submit low")["job_id"]
        .as_u64()
        .expect("job id");
    let tasks_of = |job: u64| -> Vec<Value> {
        c.json(&["tasks", "--job", &job.to_string()])
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    // In submission order (listings are newest first).
    let low_ids: Vec<u64> = wait_for("4 low tasks running", Duration::from_secs(60), || {
        let ts = tasks_of(low);
        (ts.len() == 4 && ts.iter().all(|t| t["state"] == "running")).then(|| {
            let mut ids: Vec<u64> = ts.iter().filter_map(|t| t["id"].as_u64()).collect();
            ids.sort_unstable();
            ids
        })
    });
    for t in tasks_of(low) {
        assert_eq!(
            (t["priority"].as_i64(), t["user"].as_str()),
            (Some(10), Some("low"))
        );
    }

    // The dry run names the victims and changes nothing.
    let dry = c
        .json(&[
            "submit",
            "--dry-run",
            "--user",
            "high",
            "--cpus",
            "2",
            "--",
            "true",
        ])
        .expect("dry run");
    assert_eq!(dry["tasks"][0]["priority"], 100, "{dry}");
    let mut dry_victims: Vec<u64> = dry["tasks"][0]["preempts"]
        .as_array()
        .expect("preempts")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    dry_victims.sort_unstable();
    assert_eq!(dry_victims, vec![low_ids[2], low_ids[3]], "{dry}");
    assert_eq!(
        c.json(&["jobs"]).expect("jobs").as_array().map(Vec::len),
        Some(1)
    );

    let submitted = Instant::now();
    let high = c
        .json(&[
            "submit", "--user", "high", "--cpus", "2", "--", "sh", "-c", "sleep 1",
        ])
        .expect("submit high")["job_id"]
        .as_u64()
        .expect("job id");
    wait_for("the high task to run", Duration::from_secs(15), || {
        let ts = tasks_of(high);
        ts.iter()
            .any(|t| t["state"] == "running" || t["state"] == "succeeded")
            .then_some(())
    });
    eprintln!("high task running {:?} after submit", submitted.elapsed());
    let mut preempted: Vec<u64> = tasks_of(low)
        .iter()
        .filter(|t| t["preemptions"] == 1)
        .filter_map(|t| t["id"].as_u64())
        .collect();
    preempted.sort_unstable();
    assert_eq!(
        preempted,
        vec![low_ids[2], low_ids[3]],
        "the two latest-submitted low tasks"
    );

    // Everything finishes; each attempt ran exactly once.
    wait_for("every task succeeded", Duration::from_secs(120), || {
        let all = tasks_of(low)
            .into_iter()
            .chain(tasks_of(high))
            .collect::<Vec<_>>();
        all.iter().all(|t| t["state"] == "succeeded").then_some(())
    });
    let mut runs: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for line in std::fs::read_to_string(&file).expect("runs").lines() {
        let mut it = line
            .split_whitespace()
            .map(|x| x.parse::<u64>().expect("number"));
        let (Some(t), Some(a)) = (it.next(), it.next()) else {
            panic!("bad line {line:?}");
        };
        *runs.entry((t, a)).or_default() += 1;
    }
    let mut want = BTreeMap::new();
    for (i, id) in low_ids.iter().enumerate() {
        want.insert((*id, 1), 1);
        if i >= 2 {
            want.insert((*id, 2), 1);
        }
    }
    assert_eq!(runs, want, "each (task, attempt) ran once");
    for t in tasks_of(low) {
        let id = t["id"].as_u64().expect("id");
        let expect = if id >= low_ids[2] { 1 } else { 0 };
        assert_eq!(t["preemptions"].as_u64(), Some(expect), "{t}");
    }
}
