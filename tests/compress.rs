//! What must hold (S3.6), on real processes: a GPU task on an emulated GPU whose
//! utilisation falls while a CPU task on the same slave declares high memory bandwidth; the
//! CPU task goes from 8 to 4 CPUs within a few samples, visible in `tasks --json` and in its
//! `HETSCHED_CPUS_FILE` (and, as root on cgroup v1, in its cgroup's CPU quota); a new CPU
//! task does not get the freed cores until the GPU task ends. With default flags: the slave
//! measures the node's memory bandwidth itself (no `--membw-total`).

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

#[test]
fn compress_halves_a_contending_cpu_task_and_holds_the_cores_for_the_gpu_task() {
    // 12 CPUs, one emulated GPU, the node's memory bandwidth measured by the slave
    // (emulated per-task probe: tasks write theirs to HETSCHED_MEMBW_FILE).
    let c = Cluster::start_full("compress", 1, 1, 12, &[], &["--gpus", "1"]);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn task(c: &Cluster, id: u64) -> Option<Value> {
    c.tasks().into_iter().find(|t| t["id"].as_u64() == Some(id))
}

/// Submits a one-task job; returns the task's id.
fn submit(c: &Cluster, args: &[&str]) -> u64 {
    let job = c.json(args).expect("submit")["job_id"]
        .as_u64()
        .expect("job id");
    wait_for("the job's task", Duration::from_secs(30), || {
        c.json(&["tasks", "--job", &job.to_string()])?
            .as_array()?
            .first()?["id"]
            .as_u64()
    })
}

/// The CPU quota file of the cgroup (v1 `cpu` controller) process `pid` is in.
fn quota_file(pid: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{}/cgroup", pid.trim())).ok()?;
    let path = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    })?;
    ["cpu", "cpu,cpuacct"]
        .iter()
        .map(|m| {
            Path::new("/sys/fs/cgroup")
                .join(m)
                .join(path.trim_start_matches('/'))
                .join("cpu.cfs_quota_us")
        })
        .find(|p| p.exists())
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));
    let nodes = c.json(&["nodes"]).expect("nodes");
    assert_eq!(nodes[0]["probes"]["gpu"], "emulated", "{nodes}");
    assert_eq!(nodes[0]["probes"]["membw"], "emulated", "{nodes}");
    let total = nodes[0]["membw_total_mbps"]
        .as_u64()
        .expect("a measured total");
    assert!(total > 0, "{nodes}");
    assert_eq!(nodes[0]["membw_total_source"], "triad", "{nodes}");
    let dir = c.dir.path();
    let contend = dir.join("contend");
    let gpu_stop = dir.join("gpu-stop");
    let cpu_stop = dir.join("cpu-stop");
    let cpus_path = dir.join("cpu-task-cpus-file");
    let cpu_pid = dir.join("cpu-task-pid");

    // The GPU task: 80 % for its first 10 s (its baseline is the mean of its first 5
    // one-second samples), then 60 % while the CPU task contends.
    let gpu_script = format!(
        "start=$(date +%s); while [ ! -e {stop} ]; do \
           if [ $(( $(date +%s) - start )) -ge 10 ] && [ -e {contend} ]; then u=60; else u=80; fi; \
           echo $u > \"$HETSCHED_GPU_UTIL_FILE\"; sleep 0.2; done",
        stop = gpu_stop.display(),
        contend = contend.display()
    );
    let gpu = submit(
        c,
        &[
            "submit",
            "--gpus",
            "1",
            "--cpus",
            "2",
            "--",
            "sh",
            "-c",
            &gpu_script,
        ],
    );
    wait_for("the GPU task running", Duration::from_secs(60), || {
        (task(c, gpu)?["state"] == "running").then_some(())
    });

    // The CPU task: 8 CPUs, 90 % of the node's bandwidth.
    let cpu_script = format!(
        "echo $$ > {pid}; echo \"$HETSCHED_CPUS_FILE\" > {cpus}; touch {contend}; \
         while [ ! -e {stop} ]; do echo {bw} > \"$HETSCHED_MEMBW_FILE\"; sleep 0.2; done",
        bw = total * 9 / 10,
        pid = cpu_pid.display(),
        cpus = cpus_path.display(),
        contend = contend.display(),
        stop = cpu_stop.display()
    );
    let cpu = submit(c, &["submit", "--cpus", "8", "--", "sh", "-c", &cpu_script]);
    let cpus_file = wait_for("the CPU task running", Duration::from_secs(60), || {
        (task(c, cpu)?["state"] == "running").then_some(())?;
        let p = std::fs::read_to_string(&cpus_path).ok()?;
        let p = PathBuf::from(p.trim());
        p.exists().then_some(p)
    });
    let t = task(c, cpu).expect("cpu task");
    assert_eq!(t["cpus"].as_f64(), Some(8.0), "{t}");
    assert_eq!(t["compressed"], false, "{t}");
    assert_eq!(
        std::fs::read_to_string(&cpus_file)
            .expect("cpus file")
            .trim(),
        "8"
    );
    let pid = wait_for("the CPU task's pid", Duration::from_secs(30), || {
        std::fs::read_to_string(&cpu_pid)
            .ok()
            .filter(|p| !p.trim().is_empty())
    });
    let quota =
        quota_file(&pid).filter(|q| std::fs::read_to_string(q).is_ok_and(|v| v.trim() == "800000"));
    match &quota {
        Some(q) => eprintln!("checking the CPU quota in {}", q.display()),
        None => eprintln!(
            "not checking a cgroup quota: the CPU task is not in a v1 cpu cgroup with an 8-CPU \
             quota (not root, or no cgroup v1 here)"
        ),
    }

    // Within a few samples after the GPU task's utilisation falls: 8 → 4 CPUs.
    let started = Instant::now();
    let t = wait_for("the CPU task compressed", Duration::from_secs(60), || {
        let t = task(c, cpu)?;
        (t["compressed"] == true).then_some(t)
    });
    eprintln!("compressed after {:?}", started.elapsed());
    assert_eq!(t["cpus"].as_f64(), Some(4.0), "{t}");
    assert_eq!(t["state"], "running", "{t}");
    wait_for("HETSCHED_CPUS_FILE at 4", Duration::from_secs(30), || {
        let v = std::fs::read_to_string(&cpus_file).ok()?;
        (v.trim() == "4").then_some(())
    });
    if let Some(q) = &quota {
        assert_eq!(
            std::fs::read_to_string(q).expect("quota").trim(),
            "400000",
            "the cgroup quota follows the compression"
        );
    }
    // The 4 freed cores are held for the GPU task: 12 − 2 − 4 − 4 held = 2 free.
    let node_free = || -> Option<f64> {
        let n = c.json(&["nodes"])?;
        Some(n[0]["free"]["cpu_milli"].as_f64()? / 1000.0)
    };
    wait_for("2 free CPUs on the node", Duration::from_secs(30), || {
        (node_free()? == 2.0).then_some(())
    });
    let newcomer = submit(c, &["submit", "--cpus", "4", "--", "sleep", "1"]);
    // It does not start while the GPU task runs (several scheduling rounds): it waits in
    // the master's queue or, with the default slave queues (S0.3), queued on the slave,
    // which the leader does not promote into the held cores.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let t = task(c, newcomer).expect("new task");
        assert!(
            t["state"] == "pending" || t["state"] == "assigned",
            "the freed cores went to a new CPU task: {t}"
        );
        assert_eq!(node_free(), Some(2.0), "the held cores stay held: {t}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // The GPU task ends: the held cores return and the new task runs.
    std::fs::write(&gpu_stop, "").expect("stop the GPU task");
    wait_for("the GPU task succeeded", Duration::from_secs(60), || {
        (task(c, gpu)?["state"] == "succeeded").then_some(())
    });
    wait_for("the new CPU task ran", Duration::from_secs(60), || {
        let s = task(c, newcomer)?;
        matches!(s["state"].as_str(), Some("running" | "succeeded")).then_some(())
    });
    std::fs::write(&cpu_stop, "").expect("stop the CPU task");
    wait_for("the CPU task succeeded", Duration::from_secs(60), || {
        (task(c, cpu)?["state"] == "succeeded").then_some(())
    });
}
