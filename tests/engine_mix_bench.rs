//! Benchmark (ignored by default; BENCHMARKS.md#engine-mix has the command): a heterogeneous mix of API
//! programs on two slaves — `cpu-node` (CPU only) and `gpu-node` (one emulated GPU, gemm 8×
//! a core, labelled emulated) — run twice in one go: with engine choice and forwarding on
//! (profiles, S0.1–S0.2 booking, S0.6 forwarding with measured links) and with both off (no
//! profiles, `--no-forward`: programs placed like commands, each call on its own node's best
//! engine). Prints both makespans and their ratio, and the calls' summed recorded time.
//! An emulated GPU computes with the CPU kernel and only models a shorter time, so the
//! wall-clock makespan cannot show its speed; the recorded (modelled) call time does.

mod support;

use std::time::{Duration, Instant};
use support::*;

fn start_slave(c: &Cluster, name: &str, gpu: bool, on: bool) -> Proc {
    let mut args: Vec<String> = [
        "slave",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
        "--masters",
        &c.masters_arg(),
        "--data-dir",
        &c.dir.path().join(name).display().to_string(),
        "--cpus",
        "2",
        "--mem",
        "2048",
        "--name",
        name,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if on {
        args.extend(["--profile", "--profile-budget", "6s"].map(String::from));
    } else {
        args.push("--no-forward".into());
    }
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
    start_proc(name, args, c.dir.path())
}

/// Runs the mix on a fresh cluster; returns the makespan (first submit → last finish) and
/// the calls' summed recorded durations, s (modelled for the emulated GPU).
fn makespan(on: bool) -> (Duration, f64) {
    let c = Cluster::start(if on { "mix-on" } else { "mix-off" }, 1, 0, 2);
    let a = start_slave(&c, "cpu-node", false, on);
    let b = start_slave(&c, "gpu-node", true, on);
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(2, Duration::from_secs(60));
    if on {
        wait_for("both profiles", Duration::from_secs(120), || {
            let p = c.json(&["profiles"])?;
            let n = p["nodes"]
                .as_array()?
                .iter()
                .filter(|n| n["table"]["rows"].as_array().is_some_and(|r| !r.is_empty()))
                .count();
            (n == 2).then_some(())
        });
        // The forwarder fetches the peers' tables every 2 s.
        std::thread::sleep(Duration::from_secs(3));
    }
    let gemm = c.dir.path().join("gemm.toml");
    std::fs::write(
        &gemm,
        (1..=3)
            .map(|i| format!("[[call]]\napi = \"gemm\"\nargs = {{ n = 192, seed = {i} }}\n\n"))
            .collect::<String>(),
    )
    .expect("write");
    let sort = c.dir.path().join("sort.toml");
    std::fs::write(
        &sort,
        "[[call]]\napi = \"sort\"\nargs = { items = 200000, seed = 1 }\n\n[[call]]\napi = \"sha256\"\nargs = { bytes = 2000000, seed = 2 }\n",
    )
    .expect("write");
    let t0 = Instant::now();
    let mut jobs = Vec::new();
    for i in 0..8 {
        let p = if i % 4 == 3 { &sort } else { &gemm };
        let s = c
            .json(&[
                "submit",
                "--cpus",
                "1",
                "--program",
                &p.display().to_string(),
            ])
            .expect("submit");
        jobs.push(s["job_id"].as_u64().expect("job id"));
    }
    wait_for("the mix to finish", Duration::from_secs(600), || {
        let tasks = c.tasks();
        jobs.iter()
            .all(|j| {
                tasks
                    .iter()
                    .any(|t| t["job_id"] == *j && t["state"] == "succeeded")
            })
            .then_some(())
    });
    let took = t0.elapsed();
    let mut forwarded = 0;
    let mut on_gpu = 0;
    let mut call_s = 0.0;
    for t in c.tasks() {
        eprintln!(
            "  task {} on node {} calls {}",
            t["id"], t["node"], t["calls"]
        );
        let Some(recs) = c.json(&["calls", &format!("task-{}", t["id"])]) else {
            continue;
        };
        for r in recs["calls"].as_array().into_iter().flatten() {
            forwarded += u32::from(r["forwarded"] == true);
            on_gpu += u32::from(r["engine"] == "gpu");
            call_s += r["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
        }
    }
    eprintln!(
        "engine choice + forwarding {}: makespan {:.2} s, calls on the GPU {on_gpu}, forwarded {forwarded}, summed call time {call_s:.2} s",
        if on { "on" } else { "off" },
        took.as_secs_f64()
    );
    drop((a, b));
    (took, call_s)
}

#[test]
#[ignore = "benchmark: cargo test --test engine_mix_bench -- --ignored --nocapture"]
fn engine_choice_and_forwarding_beat_a_cluster_without_them() {
    let (off, off_calls) = makespan(false);
    let (on, on_calls) = makespan(true);
    eprintln!(
        "makespan off / on = {:.2} ({:.2} s / {:.2} s); summed call time off / on = {:.2}",
        off.as_secs_f64() / on.as_secs_f64(),
        off.as_secs_f64(),
        on.as_secs_f64(),
        off_calls / on_calls.max(1e-9)
    );
}
