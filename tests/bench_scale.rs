//! What must hold at scale, in a CI-sized form of `hetsched bench scale` (real master
//! processes, in-process slaves speaking the full protocol, default flags): every task reaches
//! exactly one slave once — none lost, none placed twice — the slaves spread over helper
//! processes, the leader holds one descriptor per slave (its commands go over the slaves'
//! own links), and the report carries the figures the command promises.

use serde_json::Value;
use std::process::Command;

#[test]
fn a_hundred_slaves_receive_every_task_exactly_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args([
            "bench",
            "scale",
            "--json",
            "--slaves",
            "100",
            "--slaves-per-process",
            "40",
            "--tasks",
            "2000",
            "--quiet",
            "2s",
            "--timeout",
            "4m",
        ])
        .output()
        .expect("start hetsched bench scale");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench scale failed ({}):\n{stderr}",
        out.status
    );
    let line = stdout.lines().last().unwrap_or_default();
    let v: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}\n{stderr}"));
    eprintln!("{v}");
    assert_eq!(v["slaves"], 100);
    assert_eq!(v["tasks"], 2000);
    assert_eq!(v["lost"], 0, "every task reached a slave");
    assert_eq!(
        v["placed_twice"], 0,
        "no task reached two slaves or two attempts"
    );
    assert_eq!(v["completed"], 2000);
    assert_eq!(v["slave_processes"], 3, "100 slaves at most 40 a process");
    // One descriptor per slave and a few of its own; a connection of the leader's own to
    // each slave would make it two per slave.
    for k in ["leader_open_files", "leader_open_files_end"] {
        let fds = v[k].as_u64().unwrap_or(u64::MAX);
        assert!(fds < 100 + 60, "{k} = {fds}: more than one per slave");
    }
    for k in [
        "placed_per_sec",
        "submit_to_dispatch_p50_ms",
        "submit_to_dispatch_p99_ms",
        "leader_cpu_per_heartbeat_us",
        "leader_cpu_per_slave_per_sec_us",
        "leader_rss_mib",
        "snapshot_bytes",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} = {}", v[k]);
    }
}
