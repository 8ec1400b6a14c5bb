//! Workflows under faults (issue 51): chains of 5 jobs, each `--after` the one before, while
//! the leader is killed and restarted. The chain completes in order and no step starts before
//! the one it follows ended, as committed (the checker's `early-start` rule, replaying every
//! master's log); with the dependency gate broken through the admin port's bug switch, the
//! checker catches it.

use std::process::Command;

fn hetsched() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hetsched"));
    c.env("HETSCHED_LOG", "warn");
    // Clusters this test process launched run secured with its CA.
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        c.env("HETSCHED_CERTS_DIR", certs);
    }
    c
}

/// Every submission a chain of 5 one-task jobs; the leader killed every 4 s for 2 s.
const SCENARIO: &str = r#"
name = "chain-kill-leader"
description = "chains of 5 jobs, each after the one before, while the leader is killed"
faults = ["kill-leader"]
interval = "4s"
hold = "2s"
jobs_per_s = 0.5
chain_share = 1.0
chain_length = 5
max_tasks_per_job = 1
program_share = 0.0
task_time = "400ms"
"#;

/// Runs the scenario with `extra` flags; the exit code and the report.
fn run(name: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("chain.toml");
    std::fs::write(&file, SCENARIO).expect("write the scenario");
    let out = hetsched()
        .args([
            "chaos",
            "run",
            "--seed",
            "11",
            "--duration",
            "12s",
            "--settle",
            "60s",
        ])
        .args(["--json", "--scenario"])
        .arg(&file)
        .args(extra)
        .output()
        .expect("run hetsched chaos");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    (
        out.status.code(),
        report,
        format!("stdout {stdout} stderr {stderr}"),
    )
}

#[test]
fn chains_complete_in_order_through_leader_kills_and_a_broken_gate_is_caught() {
    let (code, v, out) = run("chaos-chain", &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(v["violations"], serde_json::json!([]), "{v}");
    assert!(v["faults_injected"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(v["ops"].as_u64().unwrap_or(0) >= 10, "{v}");

    let (code, v, out) = run("chaos-chain-bug", &["--bug", "skip-dependency-gate"]);
    assert_eq!(code, Some(1), "{out}");
    let rules: Vec<&str> = v["violations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["rule"].as_str())
        .collect();
    assert!(rules.contains(&"early-start"), "{v}");
}
