//! What must hold (S0.6): slave A has only CPU engines, slave B an emulated GPU with
//! speed 8 for gemm. A program of gemm calls pinned to A (`submit --nodes A`) has its calls
//! run on B, and the results come back with the CPU digests; with B SIGKILLed mid-program
//! the remaining calls complete on A, and every call is in the program's record once.

mod support;

use hetsched_common::program::read_program;
use hetsched_slave::engine::kernels;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;
use support::*;

/// Starts a slave named `name`; `gpu` gives it one emulated GPU that runs gemm 8× faster.
fn start_slave(c: &Cluster, name: &str, gpu: bool, http: Option<&str>) -> Proc {
    let mut args = vec![
        "slave".to_string(),
        "--listen".into(),
        format!("127.0.0.1:{}", free_port()),
        "--masters".into(),
        c.masters_arg(),
        "--data-dir".into(),
        c.dir.path().join(name).display().to_string(),
        "--cpus".into(),
        "2".into(),
        "--mem".into(),
        "1024".into(),
        "--name".into(),
        name.into(),
        "--profile".into(),
        "--profile-budget".into(),
        "8s".into(),
    ];
    if gpu {
        let engines = c.dir.path().join("engines-gpu.toml");
        std::fs::write(
            &engines,
            "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
        )
        .expect("write engines file");
        args.extend([
            "--gpus".into(),
            "1".into(),
            "--engines".into(),
            engines.display().to_string(),
        ]);
    }
    if let Some(h) = http {
        args.extend(["--http".into(), h.into()]);
    }
    start_proc(name, args, c.dir.path())
}

/// A program of `calls` gemm calls of size `n`, each with its own seed.
fn gemm_program(dir: &Path, calls: usize, n: u64) -> String {
    let text: String = (0..calls)
        .map(|i| {
            format!(
                "[[call]]\napi = \"gemm\"\nargs = {{ n = {n}, seed = {} }}\n\n",
                i + 1
            )
        })
        .collect();
    let path = dir.join(format!("gemm-{calls}x{n}.toml"));
    std::fs::write(&path, text).expect("write program");
    path.display().to_string()
}

/// Both slaves up, both profiles at the masters (B's GPU time is what makes A forward), and
/// A's forwarder holding B's table (A's `/metrics` at `http_a`).
fn wait_ready(c: &Cluster, http_a: &str) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(2, Duration::from_secs(60));
    wait_for("both slaves' profiles", Duration::from_secs(120), || {
        let p = c.json(&["profiles"])?;
        let nodes = p["nodes"].as_array()?;
        let with_rows = nodes
            .iter()
            .filter(|n| n["table"]["rows"].as_array().is_some_and(|r| !r.is_empty()))
            .count();
        (with_rows == 2).then_some(())
    });
    wait_for(
        "A's forwarder to know B's table",
        Duration::from_secs(60),
        || {
            metrics_text(http_a)
                .lines()
                .any(|l| l.starts_with("hetsched_slave_forward_peer_tables ") && !l.ends_with(" 0"))
                .then_some(())
        },
    );
}

/// Submits the program pinned to `node`; returns the task id.
fn submit_pinned(c: &Cluster, node: &str, program: &str) -> u64 {
    let s = c
        .json(&["submit", "--nodes", node, "--program", program])
        .expect("submit");
    let job = s["job_id"].as_u64().expect("job id");
    wait_for("the task", Duration::from_secs(30), || {
        c.tasks()
            .into_iter()
            .find(|t| t["job_id"] == job)
            .and_then(|t| t["id"].as_u64())
    })
}

fn wait_finished(c: &Cluster, id: u64) -> Value {
    wait_for("the program task to end", Duration::from_secs(240), || {
        c.tasks()
            .into_iter()
            .find(|t| t["id"] == id && matches!(t["state"].as_str(), Some("succeeded" | "failed")))
    })
}

fn records(c: &Cluster, id: u64) -> Vec<Value> {
    let calls = c
        .json(&["calls", &format!("task-{id}")])
        .expect("calls --json");
    calls["calls"].as_array().expect("records").clone()
}

/// Every call of the program has exactly one record, in order, with the CPU's digest.
fn assert_each_call_once_with_cpu_digests(records: &[Value], program: &str) {
    let program = read_program(Path::new(program)).expect("program");
    assert_eq!(records.len(), program.calls.len(), "{records:?}");
    for (i, (r, call)) in records.iter().zip(&program.calls).enumerate() {
        assert_eq!(r["index"], i as u64, "{r}");
        let cpu_digest = kernels::digest(&kernels::run(call));
        assert_eq!(r["digest"], cpu_digest.as_str(), "call {i}: {r}");
    }
}

fn metrics_text(addr: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    if write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn with_logs(c: &Cluster, slaves: &[&Proc], f: impl FnOnce()) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    if let Err(panic) = result {
        c.dump_logs();
        for s in slaves {
            eprintln!("--- {} ---\n{}", s.name, s.log_text());
        }
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn forward_gemm_calls_from_a_cpu_slave_to_the_gpu_slave() {
    let c = Cluster::start("forward", 1, 0, 2);
    let http_a = format!("127.0.0.1:{}", free_port());
    let a = start_slave(&c, "cpu-node", false, Some(&http_a));
    let b = start_slave(&c, "gpu-node", true, None);
    with_logs(&c, &[&a, &b], || {
        wait_ready(&c, &http_a);
        let program = gemm_program(c.dir.path(), 6, 128);
        let id = submit_pinned(&c, "cpu-node", &program);
        let task = wait_finished(&c, id);
        assert_eq!(task["state"], "succeeded", "{task}");
        let nodes = c.json(&["nodes"]).expect("nodes");
        let a_id = nodes
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == "cpu-node"))
            .and_then(|n| n["id"].as_u64());
        assert_eq!(task["node"].as_u64(), a_id, "pinned to A: {task}");

        let recs = records(&c, id);
        assert_each_call_once_with_cpu_digests(&recs, &program);
        for r in &recs {
            assert_eq!(r["forwarded"], true, "{r}");
            assert_eq!(r["node"], "gpu-node", "{r}");
            assert_eq!(r["engine"], "gpu", "{r}");
            assert_eq!(r["emulated"], true, "{r}");
        }
        let task = wait_for("the call summary", Duration::from_secs(30), || {
            c.tasks()
                .into_iter()
                .find(|t| t["id"] == id && !t["calls"].is_null())
        });
        assert_eq!(task["calls"]["total"], 6, "{task}");
        assert_eq!(task["calls"]["forwarded"], 6, "{task}");
        assert_eq!(task["calls"]["by_engine"]["gpu"], 6, "{task}");

        let m = metrics_text(&http_a);
        assert!(
            m.lines()
                .any(|l| l.starts_with("hetsched_slave_forwards_total")
                    && l.contains("direction=\"out\"")
                    && l.contains("outcome=\"done\"")
                    && l.ends_with(" 6")),
            "{m}"
        );
    });
}

#[test]
fn forward_target_killed_mid_program_remaining_calls_run_locally_once_each() {
    let c = Cluster::start("forward-kill", 1, 0, 2);
    let http_a = format!("127.0.0.1:{}", free_port());
    let a = start_slave(&c, "cpu-node", false, Some(&http_a));
    let mut b = start_slave(&c, "gpu-node", true, None);
    let b_log = b.log.clone();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_ready(&c, &http_a);
        let program = gemm_program(c.dir.path(), 40, 160);
        let id = submit_pinned(&c, "cpu-node", &program);
        // Some calls came back from B: kill it in the middle of the program.
        let done_before = wait_for("calls forwarded to B", Duration::from_secs(120), || {
            let recs = c.json(&["calls", &format!("task-{id}")])?;
            let n = recs["calls"]
                .as_array()?
                .iter()
                .filter(|r| r["node"] == "gpu-node")
                .count();
            (n >= 3).then_some(n)
        });
        b.kill9();
        let task = wait_finished(&c, id);
        assert_eq!(task["state"], "succeeded", "{task}");
        let recs = records(&c, id);
        assert_each_call_once_with_cpu_digests(&recs, &program);
        let on_b = recs.iter().filter(|r| r["node"] == "gpu-node").count();
        let on_a = recs.iter().filter(|r| r["node"] == "cpu-node").count();
        assert!(on_b >= done_before, "{on_b} < {done_before}");
        assert!(on_a >= 1, "the calls after the kill ran on A: {recs:?}");
        assert_eq!(on_a + on_b, 40);
        for r in &recs {
            let forwarded = r["node"] == "gpu-node";
            assert_eq!(r["forwarded"], forwarded, "{r}");
            assert_eq!(r["engine"], if forwarded { "gpu" } else { "cpu" }, "{r}");
        }
        // The last call ran on A (B was gone by then).
        assert_eq!(recs[39]["node"], "cpu-node", "{:?}", recs[39]);
        let task = wait_for("the call summary", Duration::from_secs(30), || {
            c.tasks()
                .into_iter()
                .find(|t| t["id"] == id && !t["calls"].is_null())
        });
        assert_eq!(task["calls"]["total"], 40, "{task}");
        assert_eq!(task["calls"]["forwarded"], on_b as u64, "{task}");
    }));
    if let Err(panic) = result {
        c.dump_logs();
        eprintln!("--- cpu-node ---\n{}", a.log_text());
        eprintln!(
            "--- gpu-node ---\n{}",
            std::fs::read_to_string(&b_log).unwrap_or_default()
        );
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn forward_margin_must_be_a_non_negative_fraction() {
    let dir = Scratch::new("forward-margin");
    for bad in ["-1", "NaN", "inf", "lots"] {
        let out = std::process::Command::new(BIN)
            .args([
                "slave",
                "--listen",
                "127.0.0.1:1",
                "--masters",
                "127.0.0.1:2",
                "--data-dir",
                &dir.path().join("s").display().to_string(),
                "--cpus",
                "1",
                "--mem",
                "64",
                &format!("--forward-margin={bad}"),
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run hetsched");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("forward-margin"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
}

/// S0.6 with bytes: the calls' arguments go to the peer and the results come back (the
/// caller's digests are of the bytes it received, equal to a local run's), and the link the
/// transfers measured shows in `nodes --json` on the caller's entry, within 2× of what the
/// records' transfers show. (Profiles are opt-in until they become the default: `--profile`.)
#[test]
fn forwarded_calls_move_their_bytes_and_measure_the_link() {
    let c = Cluster::start("forward-bytes", 1, 0, 2);
    let http_a = format!("127.0.0.1:{}", free_port());
    let a = start_slave(&c, "cpu-node", false, Some(&http_a));
    let b = start_slave(&c, "gpu-node", true, None);
    with_logs(&c, &[&a, &b], || {
        wait_ready(&c, &http_a);
        // Big enough that the compute, not the transfer, dominates on a loaded machine.
        let n = 256u64;
        let program = gemm_program(c.dir.path(), 6, n);
        let id = submit_pinned(&c, "cpu-node", &program);
        let task = wait_finished(&c, id);
        assert_eq!(task["state"], "succeeded", "{task}");
        let recs = records(&c, id);
        // Digests equal a local run's (the CPU kernel on this machine).
        assert_each_call_once_with_cpu_digests(&recs, &program);
        let mut samples = Vec::new();
        for r in &recs {
            assert_eq!(r["forwarded"], true, "{r}");
            let t = &r["transfer"];
            assert_eq!(t["arg_bytes"], 8 * n * n, "A and B went out: {r}");
            assert_eq!(t["result_bytes"], 4 * n * n, "C came back: {r}");
            let bytes = (t["arg_bytes"].as_u64().unwrap_or(0)
                + t["result_bytes"].as_u64().unwrap_or(0)) as f64;
            let us = t["transfer_us"].as_u64().expect("transfer_us").max(1) as f64;
            samples.push(bytes * 1e6 / us);
        }
        // What the transfers show: all their bytes over all their time.
        let (bytes, us) = recs.iter().fold((0.0, 0.0), |(b, u), r| {
            let t = &r["transfer"];
            (
                b + (t["arg_bytes"].as_u64().unwrap_or(0) + t["result_bytes"].as_u64().unwrap_or(0))
                    as f64,
                u + t["transfer_us"].as_u64().unwrap_or(0) as f64,
            )
        });
        let median = bytes * 1e6 / us.max(1.0);
        let link = wait_for("the link in nodes --json", Duration::from_secs(30), || {
            let nodes = c.json(&["nodes"])?;
            let gpu_id =
                nodes.as_array()?.iter().find(|n| n["name"] == "gpu-node")?["id"].as_u64()?;
            let cpu = nodes.as_array()?.iter().find(|n| n["name"] == "cpu-node")?;
            cpu["links"]
                .as_array()?
                .iter()
                .find(|l| l["node"] == gpu_id && l["bytes_per_s"].as_u64() > Some(0))
                .cloned()
        });
        let measured = link["bytes_per_s"].as_u64().unwrap_or(0) as f64;
        eprintln!("link {link}; transfers: {median:.0} B/s overall, per call {samples:?}");
        assert!(
            measured <= 2.0 * median && measured >= median / 2.0,
            "nodes --json says {measured} B/s, the transfers show {median} B/s"
        );
        assert!(link["rtt_us"].as_u64() > Some(0), "{link}");
    });
}
