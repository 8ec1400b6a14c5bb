//! Container tasks (issue 52) on real processes with default flags: each slave probes its
//! OCI runtime at start and `nodes --json` says which passed or why none did; the master
//! never places a container task on a node without one (waiting reason `resources` naming
//! containers); a bad image reference is refused at submit, naming the flag.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(60);

/// Whether this machine can run containers: root, and runc installed.
fn runc_here() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
        && ["/usr/sbin/runc", "/usr/bin/runc", "/sbin/runc"]
            .iter()
            .any(|p| std::path::Path::new(p).exists())
}

#[test]
fn container_tasks_go_only_to_nodes_whose_runtime_passed() {
    let slave = |extra: &[&str]| hetsched::local::SlaveSpec {
        cpus: 2,
        mem_mib: 2048,
        gpus: 0,
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
    };
    let c = Cluster::launch(
        "containers-placement",
        hetsched::local::ClusterSpec {
            masters: 1,
            slaves: vec![slave(&["--no-containers"]), slave(&[])],
            ..test_spec()
        },
    );
    c.scenario(placement);
}

fn node(c: &Cluster, name: &str) -> Value {
    wait_for(&format!("{name} listed"), WAIT, || {
        c.json(&["nodes"])?
            .as_array()?
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
    })
}

fn placement(c: &Cluster) {
    c.wait_nodes_up(2, WAIT);
    let off = node(c, "slave-1");
    assert_eq!(off["containers"]["runtime"], Value::Null, "{off}");
    let why = off["containers"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("--no-containers"), "{why}");
    let on = node(c, "slave-2");
    if runc_here() {
        assert_eq!(on["containers"]["runtime"], "runc", "{on}");
        assert!(on["containers"].get("why").is_none(), "{on}");
    }
    // A container job pinned to the node without a runtime waits, naming containers.
    let job = c.submit_id(&[
        "--image",
        "oci:/srv/images/none",
        "--nodes",
        "slave-1",
        "--allow-unplaceable",
        "--",
        "true",
    ]);
    let t = wait_for("the container task waits", WAIT, || {
        let tasks = c.json(&["tasks", "--job", &job.to_string()])?;
        let t = tasks.as_array()?.first()?.clone();
        (t["waiting"]["reason"] == "resources").then_some(t)
    });
    assert_eq!(t["state"], "pending", "{t}");
    let detail = t["waiting"]["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("containers:"), "{detail}");
    let explain = c.cli(&["explain", &format!("task-{}", t["id"])]);
    let text = output_text(&explain);
    assert!(text.contains("runs no containers"), "{text}");
    // A bad reference is refused at the flag (exit 2), before anything is sent.
    let bad = c.cli(&["submit", "--image", "busybox", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{}", output_text(&bad));
    assert!(
        output_text(&bad).contains("--image"),
        "{}",
        output_text(&bad)
    );
    if !runc_here() {
        eprintln!("runc not usable here (needs root and runc): the runtime half skipped");
        return;
    }
    // Unpinned, it goes to the node whose runtime passed.
    let job = c.submit_id(&["--image", "oci:/srv/images/none", "--", "true"]);
    let t = wait_for("the container task ends", WAIT, || {
        let tasks = c.json(&["tasks", "--job", &job.to_string()])?;
        let t = tasks.as_array()?.first()?.clone();
        (t["state"] == "failed").then_some(t)
    });
    assert_eq!(t["node"], on["id"], "{t}");
    assert_eq!(t["reason"], "image", "{t}");
    let d = t["reason_detail"].as_str().unwrap_or_default();
    assert!(d.contains("oci:/srv/images/none"), "{d}");
}
