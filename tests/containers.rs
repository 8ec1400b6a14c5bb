//! Container tasks (issue 52) on real processes with default flags: each slave probes its
//! OCI runtime at start and `nodes --json` says which passed or why none did; the master
//! never places a container task on a node without one (waiting reason `resources` naming
//! containers); a bad image reference is refused at submit, naming the flag. With runc (as
//! root), on a tiny image the test makes from Debian's static busybox, in an OCI layout and
//! a docker-archive: the task sees the image's files and not the host's, runs as the image's
//! user, its `--mem` ends it with `oom`, `cancel` stops it, an agent kill during it leaves one
//! attempt, 20 tasks of one image unpack it once, a tampered layer ends the task `image`.

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
            slaves: vec![
                slave(&["--no-containers"]),
                slave(&["--image-dir", "/nonexistent"]),
            ],
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
    let job = c.submit_id(&["--image", "oci:/nonexistent/none", "--", "true"]);
    let t = wait_for("the container task ends", WAIT, || {
        let tasks = c.json(&["tasks", "--job", &job.to_string()])?;
        let t = tasks.as_array()?.first()?.clone();
        (t["state"] == "failed").then_some(t)
    });
    assert_eq!(t["node"], on["id"], "{t}");
    assert_eq!(t["reason"], "image", "{t}");
    let d = t["reason_detail"].as_str().unwrap_or_default();
    assert!(d.starts_with("image oci:/nonexistent/none: trust:"), "{d}");
}

const BUSYBOX: &str = "/usr/bin/busybox";

/// The busybox image in `dir`: an OCI layout `dir/bb` (tag `v1`, user `app`), the same as
/// `dir/bb.tar` (docker-archive), and a copy `dir/bad` whose layer was changed afterwards.
fn make_images(dir: &std::path::Path) {
    use hetsched_slave::container::fixture;
    let applets = ["cat", "id", "sleep", "test", "true", "dd", "echo", "ls"];
    let entries = fixture::busybox_entries(BUSYBOX.as_ref(), &applets, "from-the-image\n")
        .expect("busybox entries");
    let config = fixture::Config {
        cmd: vec!["/bin/sh".into()],
        user: "app".into(),
        env: vec!["PATH=/bin".into()],
        ..Default::default()
    };
    fixture::write_oci_layout(&dir.join("bb"), "v1", &entries, &config).expect("oci layout");
    fixture::write_docker_archive(&dir.join("bb.tar"), &entries, &config).expect("archive");
    // Its own files (a layer the store has not unpacked under another name).
    let other =
        fixture::busybox_entries(BUSYBOX.as_ref(), &applets, "tampered\n").expect("entries");
    let layer = fixture::write_oci_layout(&dir.join("bad"), "v1", &other, &config).expect("oci");
    let blob = dir
        .join("bad/blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&blob).expect("layer");
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    std::fs::write(&blob, bytes).expect("tamper");
}

#[test]
fn container_tasks_run_in_their_image_with_the_tasks_cgroup_and_supervision() {
    if !runc_here() || !std::path::Path::new(BUSYBOX).exists() {
        eprintln!("skipped: needs root, runc and busybox-static");
        return;
    }
    let images = Scratch::new("containers-images");
    make_images(images.path());
    let dir = images.path().display().to_string();
    let mut c = Cluster::start_full(
        "containers-run",
        1,
        1,
        2,
        &["--node-timeout-ms", "120000"],
        &["--image-dir", &dir],
    );
    c.wait_leader(WAIT);
    c.wait_nodes_up(1, WAIT);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running(&mut c, &dir)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

/// The one task of `job` once `f` holds for it.
fn task_when(c: &Cluster, job: u64, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, WAIT, || {
        c.tasks()
            .into_iter()
            .find(|t| t["job_id"].as_u64() == Some(job) && f(t))
    })
}

fn ended(c: &Cluster, job: u64) -> Value {
    task_when(c, job, "the task to end", |t| {
        ["succeeded", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
    })
}

fn stdout_of(c: &Cluster, t: &Value) -> String {
    let o = c.cli(&["logs", &t["id"].to_string()]);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Submits `sh -c SCRIPT` in the busybox image; the job.
fn sh_in_image(c: &Cluster, dir: &str, script: &str) -> u64 {
    let image = format!("oci:{dir}/bb:v1");
    c.submit_id(&["--image", &image, "--", "sh", "-c", script])
}

fn running(c: &mut Cluster, dir: &str) {
    let repo = env!("CARGO_MANIFEST_DIR");
    // The image's files, not the host's; the image's user.
    let script = format!(
        "cat /etc/image-marker; id -u; test -e {repo}/Cargo.toml && echo host-visible || echo host-hidden"
    );
    let job = sh_in_image(c, dir, &script);
    let t = ended(c, job);
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(
        stdout_of(c, &t),
        "from-the-image\n1000\nhost-hidden\n",
        "{t}"
    );
    // The store's image is on the node's entry (from its heartbeats).
    let image = format!("oci:{dir}/bb:v1");
    let listed = wait_for("the image in nodes --json", WAIT, || {
        let nodes = c.json(&["nodes"])?;
        let images = nodes.as_array()?.first()?["containers"]["images"].clone();
        images
            .as_array()?
            .iter()
            .find(|i| i["ref"] == image.as_str())
            .cloned()
    });
    assert!(
        listed["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{listed}"
    );
    assert!(
        listed["size_mib"].as_u64().is_some_and(|m| m >= 1),
        "{listed}"
    );
    // docker-archive, --run-as, and the image's cmd when no command is given is covered by
    // the unit tests; here: the archive runs, as --run-as says.
    let job = c.submit_id(&[
        "--image",
        &format!("docker-archive:{dir}/bb.tar"),
        "--run-as",
        "0",
        "--",
        "id",
        "-u",
    ]);
    let t = ended(c, job);
    assert_eq!(
        (t["state"].as_str(), stdout_of(c, &t).as_str()),
        (
            Some("succeeded"),
            "0
"
        ),
        "{t}"
    );
    // The host's network by default (more than loopback here), a namespace of its own with
    // only loopback under --network none (busybox `ls` of sysfs' interfaces, which /sys
    // shows for the container's network namespace).
    let interfaces = |extra: &[&str]| {
        let image = format!("oci:{dir}/bb:v1");
        let mut args = vec!["--image", image.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "ls", "/sys/class/net"]);
        let t = ended(c, c.submit_id(&args));
        assert_eq!(t["state"], "succeeded", "{t}");
        stdout_of(c, &t)
    };
    assert_eq!(interfaces(&["--network", "none"]), "lo\n");
    let host = interfaces(&[]);
    assert!(host.lines().any(|l| l != "lo"), "{host:?}");
    // Its --mem is its cgroup's: a 100 MiB buffer in 32 MiB ends it with `oom`.
    let job = c.submit_id(&[
        "--image",
        &format!("oci:{dir}/bb:v1"),
        "--mem",
        "32",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=100M",
        "count=1",
    ]);
    let t = ended(c, job);
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("failed"), Some("oom")),
        "{t}"
    );
    // cancel stops it (through the runtime), and nothing of it is left.
    let job = c.submit_id(&["--image", &format!("oci:{dir}/bb:v1"), "--", "sleep", "600"]);
    task_when(c, job, "the sleeper to run", |t| t["state"] == "running");
    let o = c.cli(&["cancel", &job.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", output_text(&o));
    let t = ended(c, job);
    assert_eq!(t["state"], "cancelled", "{t}");
    let bundles = c.dir.path().join("slave-1/containers/run");
    wait_for("the bundle to go", WAIT, || {
        std::fs::read_dir(&bundles)
            .map_or(true, |mut d| d.next().is_none())
            .then_some(())
    });
    // An agent kill during it: the container runs on under the supervisor pool, one attempt.
    let job = sh_in_image(c, dir, "sleep 2; echo done");
    task_when(c, job, "the task to run", |t| t["state"] == "running");
    c.slaves[0].kill9();
    c.slaves[0].restart().expect("restart the slave");
    let t = ended(c, job);
    assert_eq!(
        (t["state"].as_str(), t["attempt"].as_u64()),
        (Some("succeeded"), Some(1)),
        "{t}"
    );
    assert_eq!(
        stdout_of(c, &t),
        "done
"
    );
    // 20 tasks of an image the store has not seen: one unpack. (After the restart the slave
    // log counts this run's unpacks only from here.)
    let log = c.dir.path().join("slave-1.log");
    let unpacked = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("image unpacked") && l.contains("bb.tar"))
            .count()
    };
    let before = unpacked();
    let job = c.submit_id(&[
        "--image",
        &format!("docker-archive:{dir}/bb.tar"),
        "--count",
        "20",
        "--cpus",
        "0.1",
        "--mem",
        "16",
        "--",
        "true",
    ]);
    wait_for("20 tasks to succeed", WAIT, || {
        let n = c
            .tasks()
            .iter()
            .filter(|t| t["job_id"].as_u64() == Some(job) && t["state"] == "succeeded")
            .count();
        (n == 20).then_some(())
    });
    assert!(
        unpacked() - before <= 1,
        "unpacked {} times",
        unpacked() - before
    );
    // A tampered layer: reason image, naming the image and the step.
    let job = c.submit_id(&["--image", &format!("oci:{dir}/bad:v1"), "--", "true"]);
    let t = ended(c, job);
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("failed"), Some("image")),
        "{t}"
    );
    let d = t["reason_detail"].as_str().unwrap_or_default();
    assert!(
        d.starts_with(&format!("image oci:{dir}/bad:v1: verify:")),
        "{d}"
    );
}
