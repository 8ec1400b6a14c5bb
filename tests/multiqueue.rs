//! What must hold, on real processes: a CPU burst borrows a GPU node's reserved CPUs;
//! a GPU task arrives; the borrowers are stopped (reason `preempted`) and re-run before CPU
//! tasks that queued earlier; the GPU task runs within 15 s. Also `"queue"` and
//! `"borrowed"` in `tasks --json`, `"queues"` in `status --json`, and the slave's
//! `--gpu-pool` as `"gpu_pool"` in `nodes --json`.

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::*;

#[test]
fn a_gpu_task_takes_back_reserved_cpus_from_a_cpu_burst_and_the_borrowers_rerun_first() {
    // One slave: 4 CPUs, 2 (emulated) GPUs; 1 CPU per GPU reserved to start with. It
    // announces the multi-GPU pool (by count it would be single); with one pool in the
    // cluster the pools do not separate, so the one-GPU task below still runs there.
    let c = Cluster::start_full(
        "multiqueue",
        1,
        1,
        4,
        &[
            "--queueing",
            "pipeline",
            "--gpu-cpu-reserve",
            "1",
            "--preempt-grace",
            "2s",
            // No slave queues (S0.3): tasks that do not fit stay in the master's queues.
            "--queue-depth",
            "0",
        ],
        &["--gpus", "2", "--gpu-pool", "multi"],
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));
    let file = c.dir.path().join("runs.txt");
    let script = |secs: u32| {
        format!(
            "echo \"$HETSCHED_TASK_ID $HETSCHED_ATTEMPT\" >> {}; sleep {secs}",
            file.display()
        )
    };
    let tasks_of = |job: u64| -> Vec<Value> {
        c.json(&["tasks", "--job", &job.to_string()])
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    let submit = |args: &[&str]| -> u64 {
        c.json(args).expect("submit")["job_id"]
            .as_u64()
            .expect("job id")
    };

    // The burst: 4 one-CPU tasks; with the GPU queues empty they borrow the 2 reserved CPUs.
    let s = script(30);
    let burst = submit(&[
        "submit", "--user", "batch", "--cpus", "1", "--count", "4", "--", "sh", "-c", &s,
    ]);
    let burst_ids: Vec<u64> = wait_for("4 burst tasks running", Duration::from_secs(60), || {
        let ts = tasks_of(burst);
        (ts.len() == 4 && ts.iter().all(|t| t["state"] == "running")).then(|| {
            let mut ids: Vec<u64> = ts.iter().filter_map(|t| t["id"].as_u64()).collect();
            ids.sort_unstable();
            ids
        })
    });
    assert!(tasks_of(burst).iter().all(|t| t["queue"] == "cpu"));
    let nodes = c.json(&["nodes"]).expect("nodes --json");
    assert_eq!(nodes[0]["gpu_pool"], "multi", "{nodes}");
    // The first two took the CPU pool's 2 CPUs; the two newest hold the reserve.
    let mut borrowed: Vec<u64> = tasks_of(burst)
        .iter()
        .filter(|t| t["borrowed"] == true)
        .filter_map(|t| t["id"].as_u64())
        .collect();
    borrowed.sort_unstable();
    assert_eq!(borrowed, vec![burst_ids[2], burst_ids[3]], "borrowers");

    // Two more CPU tasks queue behind the burst.
    let s = script(1);
    let later = submit(&[
        "submit", "--user", "batch", "--cpus", "1", "--count", "2", "--", "sh", "-c", &s,
    ]);
    wait_for("the queue counts", Duration::from_secs(30), || {
        let st = c.json(&["status"])?;
        (st["queues"]["cpu"] == 2 && st["queues"]["gpu-single"] == 0).then_some(())
    });

    // A GPU task asking 1 GPU and 2 CPUs: the 2 newest borrowers are stopped.
    let submitted = Instant::now();
    let s = script(3);
    let gpu = submit(&[
        "submit", "--user", "ml", "--cpus", "2", "--gpus", "1", "--", "sh", "-c", &s,
    ]);
    assert_eq!(tasks_of(gpu)[0]["queue"], "gpu-single");
    wait_for("the GPU task to run", Duration::from_secs(15), || {
        tasks_of(gpu)
            .iter()
            .any(|t| t["state"] == "running" || t["state"] == "succeeded")
            .then_some(())
    });
    eprintln!("GPU task running {:?} after submit", submitted.elapsed());
    assert_eq!(
        tasks_of(gpu)[0]["borrowed"],
        false,
        "it runs on its reserve"
    );
    let mut preempted: Vec<u64> = tasks_of(burst)
        .iter()
        .filter(|t| t["preemptions"] == 1)
        .filter_map(|t| t["id"].as_u64())
        .collect();
    preempted.sort_unstable();
    assert_eq!(
        preempted,
        vec![burst_ids[2], burst_ids[3]],
        "the newest borrowers"
    );

    // Once the GPU task ends, the taken-back tasks run before the later CPU tasks.
    wait_for("every task succeeded", Duration::from_secs(180), || {
        [burst, later, gpu]
            .iter()
            .flat_map(|j| tasks_of(*j))
            .all(|t| t["state"] == "succeeded")
            .then_some(())
    });
    let later_ids: Vec<u64> = tasks_of(later)
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    let runs = std::fs::read_to_string(&file).expect("runs");
    let starts: Vec<(u64, u64)> = runs
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().map(|x| x.parse::<u64>().ok());
            Some((it.next()??, it.next()??))
        })
        .collect();
    let pos = |want: &dyn Fn(&(u64, u64)) -> bool| {
        starts
            .iter()
            .position(want)
            .unwrap_or_else(|| panic!("missing start in {starts:?}"))
    };
    let first_later = later_ids
        .iter()
        .map(|id| pos(&|s: &(u64, u64)| s.0 == *id))
        .min()
        .expect("later tasks");
    for v in &preempted {
        let rerun = pos(&|s: &(u64, u64)| s.0 == *v && s.1 == 2);
        assert!(
            rerun < first_later,
            "taken-back task {v} re-ran after a later task: {starts:?}"
        );
    }
}
