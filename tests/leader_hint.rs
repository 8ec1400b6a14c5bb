//! The CLI's remembered leader (`src/cmd/client/leader_hint.rs`): a command writes the
//! leader it reached; the next one asks it first; a stale hint (a follower, a master that
//! is down, an address outside `--masters`) still reaches the leader and is corrected;
//! `HETSCHED_LEADER_CACHE=0` writes nothing.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::{Cluster, Scratch, BIN};

/// Runs a client command with its own runtime directory (where the hint lives).
fn cli(masters: &str, runtime: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        cmd.env("HETSCHED_CERTS_DIR", certs);
    }
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .env_remove("HETSCHED_LEADER_CACHE")
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "10000")
        .env("HETSCHED_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.arg("--masters")
        .arg(masters)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched")
}

fn ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "command failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).expect("JSON answer")
}

/// The hint files under `runtime`.
fn hints(runtime: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(runtime.join("hetsched")) {
        Ok(d) => d.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

fn hint_text(runtime: &Path) -> String {
    let files = hints(runtime);
    assert_eq!(files.len(), 1, "one hint file: {files:?}");
    std::fs::read_to_string(&files[0]).expect("read the hint")
}

#[test]
fn stale_leader_hints_still_reach_the_leader() {
    let mut c = Cluster::start("leader-hint", 3, 1, 2);
    let leader = c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));
    let masters = c.masters_arg();
    let scratch = Scratch::new("leader-hint-runtime");
    let runtime = scratch.path();
    let leader_addr = c.master_addrs[leader as usize - 1].clone();

    // Turned off: nothing written.
    ok(&cli(
        &masters,
        runtime,
        &[("HETSCHED_LEADER_CACHE", "0")],
        &["status", "--json"],
    ));
    assert!(hints(runtime).is_empty(), "no hint with the cache off");

    // The first command remembers the leader it reached.
    ok(&cli(&masters, runtime, &[], &["status", "--json"]));
    assert_eq!(hint_text(runtime), leader_addr);
    let file = hints(runtime).remove(0);

    // A follower named: the submit is redirected, applies, and the hint is corrected.
    let follower = c
        .master_addrs
        .iter()
        .find(|a| **a != leader_addr)
        .cloned()
        .expect("a follower");
    std::fs::write(&file, &follower).expect("write a stale hint");
    let submitted = ok(&cli(
        &masters,
        runtime,
        &[],
        &["submit", "--json", "--cpus", "0.1", "--", "true"],
    ));
    assert!(submitted["job_id"].as_u64().is_some(), "{submitted}");
    assert_eq!(hint_text(runtime), leader_addr);

    // An address outside --masters is ignored.
    std::fs::write(&file, "127.0.0.1:1").expect("write a foreign hint");
    ok(&cli(&masters, runtime, &[], &["status", "--json"]));
    assert_eq!(hint_text(runtime), leader_addr);

    // A master that is down named: the others are asked, the leader answers.
    let down = c
        .master_addrs
        .iter()
        .position(|a| *a == follower)
        .expect("the follower's index");
    c.masters[down].kill9();
    std::fs::write(&file, &follower).expect("write a dead master's hint");
    let submitted = ok(&cli(
        &masters,
        runtime,
        &[],
        &["submit", "--json", "--cpus", "0.1", "--", "true"],
    ));
    assert!(submitted["job_id"].as_u64().is_some(), "{submitted}");
    assert_eq!(hint_text(runtime), leader_addr);
}
