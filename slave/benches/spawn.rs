//! Spawn cost of a task with and without its supervisor (BENCHMARKS.md, "Task supervisor").
//!
//! `cargo bench -p hetsched-slave --bench spawn` (optionally `-- N`; set `HETSCHED_BIN` to a
//! built `hetsched` to also measure the `hetsched supervise` subcommand). For each way of
//! starting `true` it reports the agent-side start latency (the time the agent's loop is
//! busy: fork/exec, plus the attempt's files and cgroup for the supervised ways) and the
//! end-to-end time until the exit is known (for supervised tasks: the status file written
//! durably and read back).

use hetsched_common::protocol::Assignment;
use hetsched_common::{JobId, ResourceRequest, TaskId};
use hetsched_slave::cgroup::Cgroups;
use hetsched_slave::exec::Launcher;
use hetsched_slave::supervisor::{read_json, ExitRecord, STATUS_FILE};
use std::ffi::OsString;
use std::time::{Duration, Instant};

struct Stats {
    start: Vec<Duration>,
    total: Vec<Duration>,
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn report(name: &str, mut s: Stats) {
    let n = s.total.len() as f64;
    let total: f64 = s.total.iter().map(Duration::as_secs_f64).sum();
    let start_mean = s.start.iter().map(Duration::as_secs_f64).sum::<f64>() / n * 1e3;
    println!(
        "{name:<34} start mean {start_mean:6.3} ms  p50 {:6.3}  p99 {:6.3} | start→exit known p50 {:6.3} ms  p99 {:6.3} | {:7.0} tasks/s sequential",
        pct(&mut s.start, 0.5),
        pct(&mut s.start, 0.99),
        pct(&mut s.total, 0.5),
        pct(&mut s.total, 0.99),
        n / total,
    );
}

fn assignment(task: u64) -> Assignment {
    Assignment {
        task: TaskId(task),
        job: JobId(1),
        index: 0,
        attempt: 1,
        command: vec!["true".into()],
        env: Default::default(),
        resources: ResourceRequest {
            cpu_milli: 1000,
            mem_mib: 64,
            ..Default::default()
        },
        gpus: vec![],
        queued: false,
        engine: None,
    }
}

async fn direct(n: usize) -> Stats {
    let mut s = Stats {
        start: Vec::new(),
        total: Vec::new(),
    };
    for _ in 0..n {
        let t0 = Instant::now();
        let mut child = tokio::process::Command::new("true")
            .process_group(0)
            .spawn()
            .expect("spawn true");
        s.start.push(t0.elapsed());
        child.wait().await.expect("wait");
        s.total.push(t0.elapsed());
    }
    s
}

async fn supervised(n: usize, supervisor: Vec<OsString>, cgroups: Cgroups) -> Stats {
    let dir = tempfile::tempdir().expect("tempdir");
    let launcher = Launcher {
        supervisor,
        attempts_dir: dir.path().join("attempts"),
        log_dir: dir.path().join("logs"),
        cgroups,
        probe_files: Default::default(),
    };
    std::fs::create_dir_all(&launcher.log_dir).expect("log dir");
    let mut s = Stats {
        start: Vec::new(),
        total: Vec::new(),
    };
    for i in 0..n {
        let a = assignment(i as u64 + 1);
        let t0 = Instant::now();
        let mut l = launcher.launch(&a).expect("launch");
        s.start.push(t0.elapsed());
        l.child.wait().await.expect("wait");
        let adir = launcher.attempt_dir(a.task, a.attempt);
        let rec: ExitRecord = read_json(&adir.join(STATUS_FILE)).expect("status");
        assert_eq!(rec.exit_code, 0);
        launcher
            .cgroups
            .attempt(&hetsched_slave::exec::attempt_name(a.task, a.attempt))
            .remove();
        s.total.push(t0.elapsed());
    }
    s
}

/// Starts `n` tasks back to back (as the agent does when a batch arrives), then waits for all:
/// tasks per second from the first start until every exit is known.
async fn burst(n: usize, supervisor: Option<Vec<OsString>>, cgroups: Cgroups) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let launcher = Launcher {
        supervisor: supervisor.clone().unwrap_or_default(),
        attempts_dir: dir.path().join("attempts"),
        log_dir: dir.path().join("logs"),
        cgroups,
        probe_files: Default::default(),
    };
    std::fs::create_dir_all(&launcher.log_dir).expect("log dir");
    let t0 = Instant::now();
    let mut children = Vec::with_capacity(n);
    for i in 0..n {
        let child = match supervisor {
            None => tokio::process::Command::new("true")
                .process_group(0)
                .spawn()
                .expect("spawn true"),
            Some(_) => {
                launcher
                    .launch(&assignment(i as u64 + 1))
                    .expect("launch")
                    .child
            }
        };
        children.push(child);
    }
    for (i, mut c) in children.into_iter().enumerate() {
        c.wait().await.expect("wait");
        if supervisor.is_some() {
            let a = assignment(i as u64 + 1);
            let adir = launcher.attempt_dir(a.task, a.attempt);
            let rec: ExitRecord = read_json(&adir.join(STATUS_FILE)).expect("status");
            assert_eq!(rec.exit_code, 0);
        }
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    for i in 0..n {
        let a = assignment(i as u64 + 1);
        launcher
            .cgroups
            .attempt(&hetsched_slave::exec::attempt_name(a.task, a.attempt))
            .remove();
    }
    rate
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let helper: Vec<OsString> = vec![env!("CARGO_BIN_EXE_hetsched-supervise").into()];
    println!("{n} sequential starts of `true` each");
    rt.block_on(async {
        report("direct spawn (no supervisor)", direct(n).await);
        report(
            "supervised, hetsched-supervise",
            supervised(n, helper.clone(), Cgroups::none()).await,
        );
        if let Ok(bin) = std::env::var("HETSCHED_BIN") {
            report(
                "supervised, hetsched supervise",
                supervised(n, vec![bin.into(), "supervise".into()], Cgroups::none()).await,
            );
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let cg = Cgroups::detect(
            std::path::Path::new("/sys/fs/cgroup"),
            &own,
            &format!("bench-{}", std::process::id()),
        );
        if cg.mode() != hetsched_slave::cgroup::CgroupMode::None {
            let name = format!("supervised + cgroup {}", cg.mode().as_str());
            report(&name, supervised(n, helper.clone(), cg.clone()).await);
        }
        println!("burst: {n} starts back to back, then every exit collected");
        println!(
            "{:<34} {:7.0} tasks/s",
            "direct spawn (no supervisor)",
            burst(n, None, Cgroups::none()).await
        );
        println!(
            "{:<34} {:7.0} tasks/s",
            "supervised, hetsched-supervise",
            burst(n, Some(helper.clone()), Cgroups::none()).await
        );
        if let Ok(bin) = std::env::var("HETSCHED_BIN") {
            println!(
                "{:<34} {:7.0} tasks/s",
                "supervised, hetsched supervise",
                burst(
                    n,
                    Some(vec![bin.into(), "supervise".into()]),
                    Cgroups::none()
                )
                .await
            );
        }
        if cg.mode() != hetsched_slave::cgroup::CgroupMode::None {
            println!(
                "{:<34} {:7.0} tasks/s",
                format!("supervised + cgroup {}", cg.mode().as_str()),
                burst(n, Some(helper), cg.clone()).await
            );
            cg.clean_stale(&Default::default());
            cg.remove_own();
        }
    });
}
