//! Running out of file descriptors (issue 54): a master whose open-file limit is reached
//! keeps answering the clients it has, its accept loop waits rather than spins (CPU near
//! idle), it warns at most once a second, and it accepts again once descriptors free up.
//! Lowers a running master's soft limit with `prlimit` (util-linux).

mod support;

use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use hetsched_common::wire::Connection;
use std::time::{Duration, Instant};
use support::{wait_for, Cluster};

/// utime + stime of `pid`, in clock ticks (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    let after = stat.rsplit_once(") ").expect("stat's command field").1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn prlimit(pid: i32, limit: &str) {
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}")])
        .output()
        .expect("run prlimit (util-linux)");
    assert!(out.status.success(), "prlimit: {out:?}");
}

fn warnings(log: &str) -> usize {
    log.matches("accept failed").count()
}

async fn status_answers(c: &Connection) -> bool {
    let req = Message::Client(ClientRequest::Status { stale: true });
    matches!(
        c.call(req, Duration::from_secs(5)).await,
        Ok(Message::ClientReply(ClientResponse::Status(_)))
    )
}

#[test]
fn a_master_out_of_descriptors_keeps_serving_and_does_not_spin() {
    let c = Cluster::start("open-files", 1, 0, 1);
    c.wait_leader(Duration::from_secs(20));
    let pid = c.masters[0].pid().expect("master runs");
    let addr = c.master_addrs[0].clone();
    let ca = hetsched::local::security::process_ca().expect("the test CA");
    hetsched::local::security::install_client(&ca).expect("client TLS");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let conn = rt
        .block_on(Connection::connect(&addr, Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect before the limit: {e}"));
    assert!(
        rt.block_on(status_answers(&conn)),
        "status before the limit"
    );
    let status = c.json(&["status"]).expect("status --json");
    let limits = &status["open_files"];
    assert!(limits["soft"].as_u64().is_some_and(|s| s > 0), "{status}");
    assert_eq!(
        limits["soft"], limits["hard"],
        "soft raised to hard: {status}"
    );

    // A few descriptors of room (the soft limit only: raising a hard limit back takes a
    // privilege a container may lack), then many more connections than that.
    let hard = limits["hard"].as_u64().expect("hard limit");
    let room = open_fds(pid) + 6;
    prlimit(pid, &format!("{room}:{hard}"));
    let flood: Vec<std::net::TcpStream> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    assert!(
        flood.len() > 20,
        "the kernel queues connections past the limit"
    );
    wait_for(
        "the master to run out of descriptors",
        Duration::from_secs(20),
        || {
            c.masters[0]
                .log_text()
                .contains("out of file descriptors")
                .then_some(())
        },
    );

    // Measured over a window: the accept loop's CPU and its warnings while at the limit.
    let (ticks0, warned0, started) = (
        cpu_ticks(pid),
        warnings(&c.masters[0].log_text()),
        Instant::now(),
    );
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(4) {
        assert!(
            rt.block_on(status_answers(&conn)),
            "an existing client is answered at the limit"
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_s = (cpu_ticks(pid) - ticks0) as f64 / 100.0;
    let warned = warnings(&c.masters[0].log_text()) - warned0;
    eprintln!(
        "at the limit for {secs:.1} s: {answered} answers, {cpu_s:.2} s CPU, {warned} warnings"
    );
    assert!(
        cpu_s < 0.25 * secs,
        "the master spins at its limit: {cpu_s:.2} s CPU in {secs:.1} s"
    );
    assert!(
        warned as f64 <= secs.ceil() + 1.0,
        "{warned} warnings in {secs:.1} s: at most one a second"
    );

    // Room again: the queued connections are accepted and new clients served.
    drop(flood);
    prlimit(pid, &format!("{hard}:{hard}"));
    wait_for("a new client to be served", Duration::from_secs(20), || {
        c.json(&["status"]).map(|_| ())
    });
}
