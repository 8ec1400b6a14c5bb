//! Spawn cost of a task with and without its supervisor (BENCHMARKS.md, "Task supervisor").
//!
//! `cargo bench -p hetsched-slave --bench spawn` (optionally `-- N`; set `HETSCHED_BIN` to a
//! built `hetsched` to also measure the pool started as `hetsched supervise`). For each way of
//! starting `true` it reports the agent-side start latency (the time the agent's loop is
//! busy: fork/exec, or the attempt's files and cgroup and the request to the supervisor
//! pool) and the end-to-end time until the exit is known (for supervised tasks: the pool's
//! announcement, then the status file read back). The per-attempt supervisor the figures of
//! issue 9 compare with is gone (issue 49).

use hetsched_common::protocol::Assignment;
use hetsched_common::{JobId, ResourceRequest, TaskId};
use hetsched_slave::attempt::files::{read_json, ExitRecord, STATUS_FILE};
use hetsched_slave::attempt::pool::client::PoolClient;
use hetsched_slave::attempt::{Launch, Launcher, Started};
use hetsched_slave::cgroup::Cgroups;
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
        job_name: String::new(),
        workdir: None,
        image: None,
        run_as: None,
        network: None,
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

/// A launcher and its supervisor pool in a fresh directory.
fn pool_in(
    dir: &std::path::Path,
    program: Vec<OsString>,
    cgroups: Cgroups,
) -> (Launcher, PoolClient) {
    let launcher = Launcher {
        containers: None,
        supervisor: program.clone(),
        attempts_dir: dir.join("attempts"),
        log_dir: dir.join("logs"),
        cgroups,
        probe_files: Default::default(),
    };
    std::fs::create_dir_all(&launcher.log_dir).expect("log dir");
    let pool = PoolClient::new(program, launcher.pool_dir());
    (launcher, pool)
}

/// Starts attempt `a` through the pool.
fn start(launcher: &Launcher, pool: &PoolClient, a: &Assignment) -> Started {
    let (dir, spec) = launcher.prepare(a).expect("prepare");
    pool.launch(&dir, &spec).expect("launch")
}

/// Waits for the pool's announcement of `a`'s end and checks its recorded exit.
async fn collected(launcher: &Launcher, started: Started, a: &Assignment) {
    let _ = started.ended.await;
    let adir = launcher.attempt_dir(a.task, a.attempt);
    let rec: ExitRecord = read_json(&adir.join(STATUS_FILE)).expect("status");
    assert_eq!(rec.exit_code, 0);
    launcher
        .cgroups
        .attempt(&hetsched_slave::attempt::attempt_name(a.task, a.attempt))
        .remove();
}

async fn supervised(n: usize, program: Vec<OsString>, cgroups: Cgroups) -> Stats {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, pool) = pool_in(dir.path(), program, cgroups);
    let mut s = Stats {
        start: Vec::new(),
        total: Vec::new(),
    };
    for i in 0..n {
        let a = assignment(i as u64 + 1);
        let t0 = Instant::now();
        let started = start(&launcher, &pool, &a);
        s.start.push(t0.elapsed());
        collected(&launcher, started, &a).await;
        s.total.push(t0.elapsed());
    }
    s
}

/// Starts `n` tasks back to back (as the agent does when a batch arrives), then waits for all:
/// tasks per second from the first start until every exit is known.
async fn burst(n: usize, program: Option<Vec<OsString>>, cgroups: Cgroups) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let t0 = Instant::now();
    match program {
        None => {
            let mut children = Vec::with_capacity(n);
            for _ in 0..n {
                children.push(
                    tokio::process::Command::new("true")
                        .process_group(0)
                        .spawn()
                        .expect("spawn true"),
                );
            }
            for mut c in children {
                c.wait().await.expect("wait");
            }
        }
        Some(program) => {
            let (launcher, pool) = pool_in(dir.path(), program, cgroups);
            let all: Vec<_> = (0..n)
                .map(|i| {
                    let a = assignment(i as u64 + 1);
                    (start(&launcher, &pool, &a), a)
                })
                .collect();
            for (started, a) in all {
                collected(&launcher, started, &a).await;
            }
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
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
            "pool, hetsched-supervise",
            supervised(n, helper.clone(), Cgroups::none()).await,
        );
        if let Ok(bin) = std::env::var("HETSCHED_BIN") {
            report(
                "pool, hetsched supervise",
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
            let name = format!("pool + cgroup {}", cg.mode().as_str());
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
            "pool, hetsched-supervise",
            burst(n, Some(helper.clone()), Cgroups::none()).await
        );
        if let Ok(bin) = std::env::var("HETSCHED_BIN") {
            println!(
                "{:<34} {:7.0} tasks/s",
                "pool, hetsched supervise",
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
                format!("pool + cgroup {}", cg.mode().as_str()),
                burst(n, Some(helper), cg.clone()).await
            );
            cg.clean_stale(&Default::default());
            cg.remove_own();
        }
    });
}
