//! What must hold (S0.2, engines booked): a command task holding the only GPU
//! (`CUDA_VISIBLE_DEVICES`, here an emulated GPU, labelled so) and a program task whose
//! best engine is that GPU never run on it at the same time. The GPU is eight times faster
//! than a core for gemm, so the second-best kind (the CPU) does not pay off: the program
//! waits for the GPU, then runs its calls there, on the unit it booked.
//! (Profiles are opt-in until they become the default: the slave gets `--profile`.)

mod support;

use std::time::{Duration, Instant};
use support::*;

#[test]
fn a_command_task_holding_the_only_gpu_and_a_program_never_share_it() {
    let c = Cluster::start("engine-booking", 1, 0, 2);
    let engines = c.dir.path().join("engines-gpu.toml");
    std::fs::write(
        &engines,
        "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
    )
    .expect("write engines file");
    let slave = start_proc(
        "gpu-node",
        [
            "slave",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--masters",
            &c.masters_arg(),
            "--data-dir",
            &c.dir.path().join("gpu-node").display().to_string(),
            "--cpus",
            "4",
            "--mem",
            "2048",
            "--name",
            "gpu-node",
            "--gpus",
            "1",
            "--engines",
            &engines.display().to_string(),
            "--profile",
            "--profile-budget",
            "6s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        c.dir.path(),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.wait_leader(Duration::from_secs(30));
        c.wait_nodes_up(1, Duration::from_secs(60));
        wait_for("the GPU slave's profile", Duration::from_secs(120), || {
            let p = c.json(&["profiles"])?;
            p["nodes"]
                .as_array()?
                .iter()
                .any(|n| n["table"]["rows"].as_array().is_some_and(|r| !r.is_empty()))
                .then_some(())
        });
        // The command task takes the only GPU and holds it for a few seconds.
        let (started, ended) = (
            c.dir.path().join("cmd-started"),
            c.dir.path().join("cmd-ended"),
        );
        let script = format!(
            "touch {}; sleep 4; touch {}",
            started.display(),
            ended.display()
        );
        let cmd = c
            .json(&[
                "submit", "--gpus", "1", "--cpus", "1", "--", "sh", "-c", &script,
            ])
            .expect("submit the GPU command");
        let cmd_job = cmd["job_id"].as_u64().expect("job id");
        wait_for(
            "the command to hold the GPU",
            Duration::from_secs(30),
            || started.exists().then_some(()),
        );
        let program = c.dir.path().join("gemm.toml");
        let calls: String = (1..=3)
            .map(|i| format!("[[call]]\napi = \"gemm\"\nargs = {{ n = 96, seed = {i} }}\n\n"))
            .collect();
        std::fs::write(&program, calls).expect("write program");
        let p = c
            .json(&[
                "submit",
                "--cpus",
                "1",
                "--program",
                &program.display().to_string(),
            ])
            .expect("submit the program");
        let p_job = p["job_id"].as_u64().expect("job id");
        // Watch both: the program never runs while the command holds the GPU (unless on the
        // CPU, which the records would show).
        let mut overlapped = false;
        let t0 = Instant::now();
        let (cmd_task, p_task) = loop {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "tasks did not finish"
            );
            let tasks = c.tasks();
            let find = |job: u64| tasks.iter().find(|t| t["job_id"] == job).cloned();
            let (Some(ct), Some(pt)) = (find(cmd_job), find(p_job)) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let holding = !ended.exists() && ct["state"] == "running";
            if holding && matches!(pt["state"].as_str(), Some("running" | "succeeded")) {
                overlapped = true;
            }
            let done =
                |t: &serde_json::Value| matches!(t["state"].as_str(), Some("succeeded" | "failed"));
            if done(&ct) && done(&pt) {
                break (ct, pt);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(cmd_task["state"], "succeeded", "{cmd_task}");
        assert_eq!(p_task["state"], "succeeded", "{p_task}");
        let recs = c
            .json(&["calls", &format!("task-{}", p_task["id"])])
            .expect("calls --json");
        let recs = recs["calls"].as_array().expect("records").clone();
        assert_eq!(recs.len(), 3, "{recs:?}");
        let on_gpu = recs.iter().filter(|r| r["engine"] == "gpu").count();
        assert!(
            !(overlapped && on_gpu > 0),
            "the program ran on the GPU while the command held it: {recs:?}"
        );
        // The CPU is eight times slower: waiting paid off, and the calls ran on the GPU the
        // program booked (emulated, labelled so).
        assert!(!overlapped, "the program did not wait for the GPU");
        for r in &recs {
            assert_eq!(r["engine"], "gpu", "{r}");
            assert_eq!(r["emulated"], true, "{r}");
        }
    }));
    if let Err(panic) = result {
        c.dump_logs();
        eprintln!("--- gpu-node ---\n{}", slave.log_text());
        std::panic::resume_unwind(panic);
    }
}
