//! A master's data directory written by an earlier binary loads in this one, and `jobs`,
//! `tasks` and `nodes --json` answer on it as that binary did.
//!
//! The fixture (`tests/fixtures/old-state/`) was made by [`make_old_state_fixture`] with the
//! binary of the commit its `SOURCE` file names: a secured cluster of one master (snapshot
//! every 16 entries, so the directory holds a snapshot and log entries after it) and one slave
//! ran a few jobs that ended every way a job can (succeeded, failed after a retry, cancelled,
//! waiting for a node big enough); then that binary, restarted alone on a copy of the
//! directory, answered the three listings (`expected-*.json`). The test below starts this
//! binary on another copy and compares its answers with them, field by field, with the fields
//! that depend on when they are read left out (see [`comparable`]).
//!
//! To make the fixture again (only when the earlier binary's answers must be re-recorded):
//! build the binary of the commit to record, then
//! `HETSCHED_FIXTURE_EXE=/path/to/hetsched cargo test --test old_state -- --ignored`.

mod support;

use hetsched::local::{ClusterSpec, LocalCluster, SlaveSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{register_admin, wait_for, Scratch, BIN};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/old-state");
const LISTINGS: [&str; 3] = ["jobs", "tasks", "nodes"];

/// The fields of a listing's entries that depend on when they are read, not on the state:
/// a task's waiting reason and detail (node counts are counted when read).
fn volatile(listing: &str) -> &'static [&'static str] {
    match listing {
        "tasks" => &["waiting"],
        _ => &[],
    }
}

/// The fields added to a listing's entries since the fixture was recorded (an answer may
/// gain fields, never lose or change one): `reason_detail`, a shared slot of issue 47; the
/// workflow keys of issue 51; the node's measured memory bandwidth of issue 57; the node's
/// containers of issue 52.
fn added_since(listing: &str) -> Vec<&'static str> {
    match listing {
        "tasks" => vec!["reason_detail"],
        "nodes" => vec!["membw_total_mbps", "membw_total_source", "containers"],
        "jobs" => {
            let keys = hetsched_common::dependency::SPEC_KEYS.into_iter();
            keys.chain(["dependents"]).collect()
        }
        _ => Vec::new(),
    }
}

/// `v` without the fields of `drop` in each entry.
fn without(mut v: Value, drop: &[&str]) -> Value {
    if let Some(items) = v.as_array_mut() {
        for item in items {
            if let Some(obj) = item.as_object_mut() {
                for key in drop {
                    obj.remove(*key);
                }
            }
        }
    }
    v
}

/// The first difference between two listings, in words (`None`: equal).
fn first_difference(got: &Value, expected: &Value) -> Option<String> {
    let (Some(got), Some(expected)) = (got.as_array(), expected.as_array()) else {
        return (got != expected).then(|| format!("got {got}, expected {expected}"));
    };
    if got.len() != expected.len() {
        return Some(format!(
            "{} entries, expected {}",
            got.len(),
            expected.len()
        ));
    }
    got.iter()
        .zip(expected)
        .enumerate()
        .find_map(|(i, (g, e))| {
            let (Some(g), Some(e)) = (g.as_object(), e.as_object()) else {
                return (g != e).then(|| format!("entry {i}: {g} != {e}"));
            };
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(e.keys()).collect();
            keys.into_iter().find_map(|k| {
                (g.get(k) != e.get(k)).then(|| {
                    format!(
                        "entry {i} (id {}), field {k}: got {:?}, expected {:?}",
                        e["id"],
                        g.get(k),
                        e.get(k)
                    )
                })
            })
        })
}

/// Runs `exe --masters MASTERS LISTING --json` with the test process's client certificate.
fn listing(exe: &Path, masters: &str, what: &str) -> Option<Value> {
    let mut cmd = Command::new(exe);
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        cmd.env("HETSCHED_CERTS_DIR", certs);
    }
    let out = cmd
        .args(["--masters", masters, what, "--json"])
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last()?).ok()
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Starts `exe` as the only master on a copy of the fixture's data directory (no slave: the
/// recorded node is down once its heartbeats are missed) and waits until it leads and the
/// node is down, so that every answer after it is of a state that no longer moves.
fn master_on_copy(exe: &Path, data: &Path, scratch: &Scratch) -> LocalCluster {
    copy_tree(data, &scratch.path().join("master-1"));
    let spec = ClusterSpec {
        exe: Some(exe.to_path_buf()),
        masters: 1,
        slaves: Vec::new(),
        master_http: false,
        // The recorded jobs finished when the fixture was made: with the default retention
        // (`1h`) a master started an hour later collects them, and the answers would depend
        // on the day the test runs.
        master_args: vec!["--job-gc-after".into(), "off".into()],
        ..support::test_spec()
    };
    let local = LocalCluster::launch(scratch.path(), &spec).expect("launch the master");
    register_admin(&local.master_addrs[0], &local.admin_addrs[0]);
    let masters = local.master_addrs.join(",");
    wait_for(
        "the recorded node marked down",
        Duration::from_secs(60),
        || {
            let nodes = listing(exe, &masters, "nodes")?;
            let all_down = nodes
                .as_array()?
                .iter()
                .all(|n| n["state"].as_str() == Some("down"));
            all_down.then_some(())
        },
    );
    local
}

#[test]
fn state_written_by_the_previous_binary_loads_and_answers_as_it_did() {
    let fixture = PathBuf::from(FIXTURE);
    let scratch = Scratch::new("old-state");
    let mut local = master_on_copy(Path::new(BIN), &fixture.join("master-1"), &scratch);
    let masters = local.master_addrs.join(",");
    // The directory holds a snapshot and log entries after it: both were read.
    let log = local.masters[0].log_text();
    let opened = log
        .lines()
        .find(|l| l.contains("opened raft storage"))
        .expect("the master says what it opened");
    let number = |key: &str| -> u64 {
        opened
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {opened}"))
    };
    let (snapshot, last) = (number("snapshot_index="), number("last_index="));
    assert!(snapshot > 0 && last > snapshot, "{opened}");
    for what in LISTINGS {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture.join(format!("expected-{what}.json")))
                .expect("read the expected listing"),
        )
        .expect("parse the expected listing");
        let got = listing(Path::new(BIN), &masters, what)
            .unwrap_or_else(|| panic!("`{what} --json` did not answer"));
        // Every added field is there, in every entry.
        for entry in got.as_array().into_iter().flatten() {
            for key in added_since(what) {
                assert!(
                    entry.get(key).is_some(),
                    "`{what} --json` lacks {key}: {entry}"
                );
            }
        }
        let got = without(without(got, volatile(what)), &added_since(what));
        let expected = without(expected, volatile(what));
        if let Some(diff) = first_difference(&got, &expected) {
            panic!("`{what} --json` differs from the earlier binary's answer: {diff}");
        }
    }
    local.stop();
}

/// Makes the fixture with the binary `HETSCHED_FIXTURE_EXE` names (see the module docs).
#[test]
#[ignore = "makes the committed fixture with an earlier binary; run by hand"]
fn make_old_state_fixture() {
    let exe = PathBuf::from(
        std::env::var("HETSCHED_FIXTURE_EXE").expect("HETSCHED_FIXTURE_EXE names the binary"),
    );
    let scratch = Scratch::new("old-state-make");
    let spec = ClusterSpec {
        exe: Some(exe.clone()),
        masters: 1,
        master_args: vec!["--snapshot-entries".into(), "16".into()],
        master_http: false,
        slaves: vec![SlaveSpec {
            cpus: 4,
            mem_mib: 4096,
            gpus: 1,
            extra_args: Vec::new(),
        }],
        ..support::test_spec()
    };
    let mut local = LocalCluster::launch(scratch.path(), &spec).expect("launch");
    register_admin(&local.master_addrs[0], &local.admin_addrs[0]);
    let masters = local.master_addrs.join(",");
    let run = |args: &[&str]| -> Value {
        let mut cmd = Command::new(&exe);
        if let Some(certs) = hetsched::local::security::client_certs_dir() {
            cmd.env("HETSCHED_CERTS_DIR", certs);
        }
        let out = cmd
            .args(["--masters", &masters])
            .args(args)
            .env("HETSCHED_CLIENT_TIMEOUT_MS", "10000")
            .stdin(Stdio::null())
            .output()
            .expect("run the earlier binary");
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_str(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("a line"),
        )
        .expect("json")
    };
    wait_for("the slave up", Duration::from_secs(60), || {
        let nodes = listing(&exe, &masters, "nodes")?;
        (nodes.as_array()?.first()?["state"].as_str()? == "up").then_some(())
    });
    // Enough entries for a few snapshots, then the jobs whose ends the listings show.
    for i in 0..4 {
        let name = format!("bulk-{i}");
        run(&[
            "submit", "--json", "--name", &name, "--count", "5", "--", "true",
        ]);
    }
    run(&[
        "submit", "--json", "--name", "gpu", "--gpus", "1", "--", "true",
    ]);
    run(&[
        "submit",
        "--json",
        "--name",
        "fails",
        "--retries",
        "1",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    run(&[
        "submit",
        "--json",
        "--name",
        "too-big",
        "--cpus",
        "64",
        "--allow-unplaceable",
        "--",
        "true",
    ]);
    let sleeper = run(&[
        "submit",
        "--json",
        "--name",
        "cancelled",
        "--",
        "sleep",
        "300",
    ]);
    let sleeper = sleeper["job_id"].as_u64().expect("job id").to_string();
    wait_for("the sleeper running", Duration::from_secs(60), || {
        let tasks = listing(&exe, &masters, "tasks")?;
        tasks
            .as_array()?
            .iter()
            .any(|t| {
                t["job_id"].as_u64().map(|j| j.to_string()) == Some(sleeper.clone())
                    && t["state"] == "running"
            })
            .then_some(())
    });
    run(&["cancel", "--json", &sleeper]);
    wait_for(
        "every job but too-big ended",
        Duration::from_secs(120),
        || {
            let jobs = listing(&exe, &masters, "jobs")?;
            jobs.as_array()?
                .iter()
                .filter(|j| j["name"] != "too-big")
                .all(|j| {
                    matches!(
                        j["state"].as_str(),
                        Some("succeeded" | "failed" | "cancelled")
                    )
                })
                .then_some(())
        },
    );
    local.stop();
    let out = PathBuf::from(FIXTURE);
    let _ = std::fs::remove_dir_all(&out);
    copy_tree(&scratch.path().join("master-1"), &out.join("master-1"));
    // The answers of the earlier binary, restarted alone on a copy.
    let again = Scratch::new("old-state-record");
    let mut alone = master_on_copy(&exe, &out.join("master-1"), &again);
    let masters = alone.master_addrs.join(",");
    for what in LISTINGS {
        let v = listing(&exe, &masters, what).expect("listing");
        let text = serde_json::to_string_pretty(&v).expect("json");
        std::fs::write(out.join(format!("expected-{what}.json")), text + "\n").expect("write");
    }
    alone.stop();
}
