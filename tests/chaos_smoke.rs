//! Chaos smoke: `hetsched chaos run` on a real local cluster with a seeded mix of faults finds
//! no violation on a healthy build, and reports with the documented JSON fields; bad arguments
//! exit 2.

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

#[test]
fn chaos_smoke_mixed_faults_find_no_violation() {
    let seed = 7;
    let out = hetsched()
        .args([
            "chaos",
            "run",
            "--scenario",
            "mixed",
            "--seed",
            &seed.to_string(),
            "--duration",
            "15s",
            "--settle",
            "60s",
            "--json",
        ])
        .output()
        .expect("run hetsched chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "seed {seed}: stdout {stdout} stderr {stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(line).expect("one JSON line");
    assert_eq!(v["scenario"], "mixed");
    assert_eq!(v["seed"], seed);
    assert_eq!(v["duration_s"], 15.0);
    assert!(v["faults_injected"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(v["ops"].as_u64().unwrap_or(0) >= 10, "{v}");
    assert!(v["tasks_completed"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert_eq!(v["violations"], serde_json::json!([]), "{v}");
    assert!(
        v["timeline"].as_array().is_some_and(|t| !t.is_empty()),
        "{v}"
    );
    let run_dir = v["run_dir"].as_str().unwrap_or_default();
    assert!(!run_dir.is_empty(), "{v}");
    // A clean run removes its directory.
    assert!(!std::path::Path::new(run_dir).exists(), "{run_dir} kept");
}

#[test]
fn chaos_bad_arguments_exit_2() {
    let out = hetsched()
        .args(["chaos", "run", "--scenario", "no-such-scenario"])
        .output()
        .expect("run hetsched chaos");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kill-leader"), "lists the built-ins: {err}");

    let dir = std::env::temp_dir().join(format!("chaos-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("bad.toml");
    std::fs::write(&file, "name = \"bad\"\nfaults = [\"meteor\"]\n").expect("write");
    let out = hetsched()
        .args(["chaos", "run", "--scenario"])
        .arg(&file)
        .output()
        .expect("run hetsched chaos");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("meteor"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    let out = hetsched()
        .args(["chaos", "run", "--scenario", "mixed", "--duration", "soon"])
        .output()
        .expect("run hetsched chaos");
    assert_eq!(out.status.code(), Some(2));
}

/// The checker can fail: a deliberate bug switched on through the admin port (submits
/// acknowledged but never committed) is reported under `acked-lost`, exit 1, run dir kept.
#[test]
fn chaos_deliberate_bug_is_reported_as_acked_lost() {
    let seed = 11;
    let out = hetsched()
        .args([
            "chaos",
            "run",
            "--scenario",
            "pause-follower",
            "--seed",
            &seed.to_string(),
            "--duration",
            "8s",
            "--settle",
            "30s",
            "--bug",
            "ack-before-commit",
            "--json",
        ])
        .output()
        .expect("run hetsched chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "seed {seed}: stdout {stdout} stderr {stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line");
    let rules: Vec<&str> = v["violations"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["rule"].as_str()).collect())
        .unwrap_or_default();
    assert!(rules.contains(&"acked-lost"), "{v}");
    assert!(stderr.contains("replay: hetsched chaos run"), "{stderr}");
    let run_dir = v["run_dir"].as_str().unwrap_or_default();
    let dir = std::path::Path::new(run_dir);
    assert!(dir.join("history.jsonl").exists(), "{run_dir}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--attach`: the workload and the request-based faults against masters this tool did not
/// start (a cluster from the shared launcher, `hetsched::local`); process faults are skipped
/// and counted, and the attached cluster's processes are left running.
#[test]
fn chaos_attach_runs_request_faults_against_running_masters() {
    use hetsched::local::{LocalCluster, SlaveSpec};
    let dir = std::env::temp_dir().join(format!(
        "hetsched-test-chaos-attach-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let slave = SlaveSpec {
        cpus: 4,
        mem_mib: 4096,
        gpus: 0,
        extra_args: Vec::new(),
    };
    let mut cluster = LocalCluster::start_exe(
        std::path::Path::new(env!("CARGO_BIN_EXE_hetsched")),
        &dir.join("cluster"),
        3,
        &["--job-gc-after".to_string(), "off".to_string()],
        &[slave.clone(), slave],
    )
    .expect("start a local cluster");
    // The masters answer (a leader is elected) before the tool attaches.
    let cluster_addrs = cluster.master_addrs.join(",");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = hetsched()
            .args(["--masters", &cluster_addrs, "status", "--json"])
            .output()
            .expect("run hetsched status");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let status: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default())
                .unwrap_or(serde_json::Value::Null);
        if !status["leader"].is_null() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leader within 60 s: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let scenario = dir.join("attach.toml");
    std::fs::write(
        &scenario,
        "name = \"attach\"\nfaults = [\"kill-leader\", \"partition-leader\", \"delay\", \"pause-slave\"]\n\
         interval = \"1500ms\"\nhold = \"1s\"\njobs_per_s = 2.0\ntask_time = \"500ms\"\n",
    )
    .expect("write scenario");
    let seed = 5;
    let out = hetsched()
        .args(["chaos", "run", "--scenario"])
        .arg(&scenario)
        .args([
            "--seed",
            &seed.to_string(),
            "--duration",
            "10s",
            "--settle",
            "60s",
            "--json",
            "--attach",
            "--masters",
            &cluster.admin_addrs.join(","),
            "--data-dir",
        ])
        .arg(dir.join("run"))
        .output()
        .expect("run hetsched chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "seed {seed}: stdout {stdout} stderr {stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line");
    assert_eq!(v["violations"], serde_json::json!([]), "{v}");
    let injected = v["faults_injected"].as_u64().unwrap_or(0);
    let skipped = v["faults_skipped"].as_u64().unwrap_or(0);
    assert!(injected >= 1 && skipped >= 1, "seed {seed}: {v}");
    assert!(v["tasks_completed"].as_u64().unwrap_or(0) >= 1, "{v}");
    let timeline = v["timeline"].to_string();
    assert!(timeline.contains("skipped (attached"), "{timeline}");
    assert!(
        timeline.contains("log of master-1"),
        "the log export: {timeline}"
    );
    assert!(!timeline.contains("not exported"), "{timeline}");
    // Nothing was killed or paused: every master and slave still runs.
    for p in cluster.masters.iter_mut().chain(cluster.slaves.iter_mut()) {
        assert!(p.is_running(), "{} stopped", p.name);
    }
    cluster.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn chaos_netns_and_attach_arguments_are_checked() {
    // --netns: a clear reason and exit 2 (never a half-made partition) where namespaces
    // cannot be used (not root, `ip` or `nft` missing); where they can (tests/netns.rs runs
    // them), --netns with --attach, which it excludes.
    let netns_args: &[&str] = if hetsched::local::netns::check_available(&["ip", "nft"]).is_ok() {
        &["--attach", "--masters", "127.0.0.1:1"]
    } else {
        &[]
    };
    let out = hetsched()
        .args(["chaos", "run", "--scenario", "mixed", "--netns"])
        .args(netns_args)
        .output()
        .expect("run hetsched chaos");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--netns"), "{err}");
    // --attach needs --masters; --masters without --attach is a usage error.
    for args in [
        &["chaos", "run", "--scenario", "mixed", "--attach"][..],
        &[
            "chaos",
            "run",
            "--scenario",
            "mixed",
            "--masters",
            "127.0.0.1:1",
        ][..],
    ] {
        let out = hetsched().args(args).output().expect("run hetsched chaos");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // A master that does not answer: unavailable (exit 5), named.
    let out = hetsched()
        .args([
            "chaos",
            "run",
            "--scenario",
            "mixed",
            "--attach",
            "--masters",
            "127.0.0.1:1",
        ])
        .output()
        .expect("run hetsched chaos");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
    // Nothing is left behind: the fresh run directory it named is gone.
    let run_dir = err
        .split("run directory ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_default();
    assert!(!run_dir.is_empty(), "{err}");
    assert!(
        !std::path::Path::new(run_dir).exists(),
        "{run_dir} left behind"
    );
}
