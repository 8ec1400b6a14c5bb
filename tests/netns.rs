//! Network namespaces (root only; each test prints why and passes where root, `ip` or, for
//! the chaos tool, `nft` is missing): `hetsched up --netns` runs its demo with every master and
//! slave in its own namespace and removes them all at the end; a launcher killed with -9
//! leaves namespaces that the next start sweeps; Ctrl-C removes them too; `chaos run --netns`
//! injects real partitions (nftables rules) and still finds no violation on a healthy build,
//! and finds the deliberate bug.

mod support;

use hetsched::local::netns;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::{wait_for, Scratch, BIN};

/// Whether these tests can run here; prints why not.
fn usable(tools: &[&str]) -> bool {
    match netns::check_available(tools) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// `ip` with `args`: its stdout.
fn ip(args: &[&str]) -> String {
    let ip = netns::find_tool("ip").expect("ip");
    let out = Command::new(ip).args(args).output().expect("run ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The namespaces in `ip netns list` that launcher `pid` made.
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("hs-{pid}-");
    ip(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Waits up to `limit` for `child` to exit.
fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `hetsched up --netns ARGS`, its stdout and stderr in files under `dir`.
fn up(dir: &std::path::Path, name: &str, args: &[&str]) -> Child {
    let file = |ext: &str| std::fs::File::create(dir.join(format!("{name}.{ext}"))).expect("file");
    Command::new(BIN)
        .args(["up", "--netns", "--data-dir"])
        .arg(dir.join(name))
        .args(args)
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(file("out"))
        .stderr(file("err"))
        .spawn()
        .expect("start hetsched up")
}

fn read(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

/// Whether a process runs whose command line names `dir` (a cluster's data dir).
fn runs_under(dir: &std::path::Path) -> bool {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle.as_str()))
        })
    })
}

#[test]
fn up_netns_runs_the_demo_in_namespaces_and_removes_them() {
    if !usable(&["ip"]) {
        return;
    }
    let dir = Scratch::new("netns-up");
    let mut child = up(dir.path(), "up", &[]);
    let pid = child.id();
    // While it runs: 3 masters and 2 slaves, each in its own namespace.
    let mut seen = std::collections::BTreeSet::new();
    let end = Instant::now() + Duration::from_secs(120);
    let status = loop {
        seen.extend(namespaces_of(pid));
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < end, "up --netns ran over 120 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (read(dir.path(), "up.out"), read(dir.path(), "up.err"));
    assert!(status.success(), "{status}: stdout {out} stderr {err}");
    assert_eq!(seen.len(), 5, "{seen:?}");
    for want in ["master-1", "master-2", "master-3", "slave-1", "slave-2"] {
        assert!(seen.iter().any(|n| n.ends_with(want)), "{want}: {seen:?}");
    }
    // Each on its own address, the masters reached there.
    let line = err
        .lines()
        .find(|l| l.contains("network namespaces on bridge"))
        .unwrap_or_default();
    let addrs: std::collections::BTreeSet<&str> = line
        .split(", ")
        .filter_map(|n| n.rsplit(' ').next())
        .filter(|a| a.starts_with("10.213."))
        .collect();
    assert_eq!(addrs.len(), 5, "{line}");
    assert!(err.contains("masters: 10.213."), "{err}");
    // A job ran.
    assert!(
        out.lines()
            .any(|l| l.contains(" hello ") && l.contains("succeeded")),
        "{out}"
    );
    // Every namespace, veth and the bridge are gone.
    assert_eq!(netns::names_of(Some(pid)), Vec::<String>::new());
    assert!(!runs_under(&dir.path().join("up")), "a process outlived up");
}

#[test]
fn a_crashed_launchers_namespaces_are_swept_and_ctrl_c_removes_its_own() {
    if !usable(&["ip"]) {
        return;
    }
    let dir = Scratch::new("netns-sweep");
    let ready = |name: &str| {
        let (dir, name) = (dir.path().to_path_buf(), name.to_string());
        move || {
            read(&dir, &format!("{name}.err"))
                .contains("press Ctrl-C")
                .then_some(())
        }
    };
    let mut a = up(dir.path(), "a", &["--no-demo"]);
    wait_for("launcher a's cluster", Duration::from_secs(60), ready("a"));
    let a_pid = a.id();
    assert_eq!(namespaces_of(a_pid).len(), 5);
    // kill -9: nothing of the launcher's runs to clean up.
    a.kill().expect("kill -9 a");
    a.wait().expect("reap a");
    assert_eq!(namespaces_of(a_pid).len(), 5, "leftovers");
    assert!(
        runs_under(&dir.path().join("a")),
        "a's processes outlive it"
    );
    // The next start sweeps them.
    let mut b = up(dir.path(), "b", &["--no-demo"]);
    wait_for("launcher b's cluster", Duration::from_secs(60), ready("b"));
    assert_eq!(netns::names_of(Some(a_pid)), Vec::<String>::new());
    assert!(!runs_under(&dir.path().join("a")), "a's processes swept");
    assert_eq!(namespaces_of(b.id()).len(), 5);
    // Ctrl-C: b stops its cluster and removes its namespaces.
    let b_pid = b.id();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b_pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT b");
    wait_exit(&mut b, Duration::from_secs(30));
    let err = read(dir.path(), "b.err");
    assert!(err.contains("namespaces removed"), "{err}");
    assert_eq!(netns::names_of(Some(b_pid)), Vec::<String>::new());
    assert!(!runs_under(&dir.path().join("b")), "b's processes stopped");
}

/// `hetsched chaos run --netns ARGS --json`: exit status and the report.
fn chaos(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let child = Command::new(BIN)
        .args(["chaos", "run", "--netns", "--json"])
        .args(args)
        .env("HETSCHED_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hetsched chaos");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or(serde_json::Value::Null);
    assert_eq!(
        netns::names_of(Some(pid)),
        Vec::<String>::new(),
        "namespaces left: {stderr}"
    );
    (out.status.code(), v, stderr)
}

#[test]
fn chaos_netns_real_partitions_of_the_leader_find_no_violation() {
    if !usable(&["ip", "nft"]) {
        return;
    }
    let seed = 4;
    let (code, v, err) = chaos(&[
        "--scenario",
        "partition-leader",
        "--seed",
        &seed.to_string(),
        "--duration",
        "40s",
    ]);
    assert_eq!(code, Some(0), "seed {seed}: {v} {err}");
    assert_eq!(v["violations"], serde_json::json!([]), "{v}");
    let injected = v["faults_injected"].as_u64().unwrap_or(0);
    assert!(injected > 0, "{v}");
    // Every injected fault was a real one: nftables rules named after it.
    let real = v["timeline"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|e| e["event"].as_str())
                .filter(|e| e.starts_with("partition-leader: net-partition-leader: master-"))
                .count() as u64
        })
        .unwrap_or(0);
    assert_eq!(real, injected, "{v}");
    assert!(v["tasks_completed"].as_u64().unwrap_or(0) >= 1, "{v}");
}

#[test]
fn chaos_netns_finds_the_deliberate_bug() {
    if !usable(&["ip", "nft"]) {
        return;
    }
    let (code, v, err) = chaos(&[
        "--scenario",
        "partition-leader",
        "--seed",
        "2",
        "--duration",
        "12s",
        "--settle",
        "30s",
        "--bug",
        "ack-before-commit",
    ]);
    assert_eq!(code, Some(1), "{v} {err}");
    let rules: Vec<&str> = v["violations"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["rule"].as_str()).collect())
        .unwrap_or_default();
    assert!(rules.contains(&"acked-lost"), "{v}");
    assert!(
        err.contains("replay: hetsched chaos run") && err.contains("--netns"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(v["run_dir"].as_str().unwrap_or_default());
}
