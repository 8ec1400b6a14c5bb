//! What must hold: random bytes and oversized frames sent to every listening port are
//! rejected with an error in the log, and the process keeps serving.

mod support;

use hetsched_common::rng::{seed_from_env, SplitMix64};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::*;

/// Sends `bytes` on a fresh connection and reads until the server closes. `Err` carries the
/// connect error. The launcher's clusters run secured: the bytes travel inside the TLS
/// session of the test process's certificate, so they reach the framing layer (plain bytes
/// on a TLS port are refused before it; tests/security.rs checks that).
fn send_and_drain(addr: &str, bytes: &[u8]) -> std::io::Result<()> {
    let s = TcpStream::connect(addr)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    match hetsched_common::wire::tls::current() {
        None => {
            let mut s = s;
            let _ = s.write_all(bytes);
            // The server answers with an error frame (where it can) and closes.
            let _ = s.read_to_end(&mut buf);
        }
        Some(setup) => {
            let name = hetsched_common::wire::tls::server_name(addr);
            let conn = rustls::ClientConnection::new(setup.client.clone(), name)
                .map_err(std::io::Error::other)?;
            let mut t = rustls::StreamOwned::new(conn, s);
            let _ = t.write_all(bytes);
            let _ = t.flush();
            let _ = t.read_to_end(&mut buf);
        }
    }
    Ok(())
}

/// Panics with what the process behind `addr` was doing: whether it still runs, and its log.
fn fail_unreachable(c: &mut Cluster, addr: &str, err: std::io::Error) -> ! {
    let idx = c
        .master_addrs
        .iter()
        .chain(&c.slave_addrs)
        .position(|a| a == addr);
    let n_masters = c.masters.len();
    let p = match idx {
        Some(i) if i < n_masters => &mut c.masters[i],
        Some(i) => &mut c.slaves[i - n_masters],
        None => panic!("cannot connect to {addr}: {err}"),
    };
    let running = p.is_running();
    let log = p.log_text();
    panic!(
        "cannot connect to {addr} ({}, running: {running}): {err}\nlast log lines:\n{}",
        p.name,
        log.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn garbage_and_oversized_frames_are_rejected_and_serving_goes_on() {
    let seed = seed_from_env("HETSCHED_TEST_SEED");
    eprintln!("seed: {seed} (set HETSCHED_TEST_SEED to replay)");
    let mut c = Cluster::start("badinput", 3, 1, 2);
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));

    let mut rng = SplitMix64::new(seed);
    let ports: Vec<String> = c
        .master_addrs
        .iter()
        .chain(&c.slave_addrs)
        .cloned()
        .collect();
    for addr in &ports {
        // Oversized: a length prefix of 1 GiB.
        let mut frames = vec![
            vec![0x40, 0, 0, 0, 1, 2, 3],
            // A frame whose payload is not an envelope.
            vec![0, 0, 0, 4, 0xc1, 0xff, 0x00, 0x13],
        ];
        // Random bytes.
        for _ in 0..5 {
            // At least a full length prefix, so the server never waits for the rest of a frame.
            let n = rng.range(5, 200) as usize;
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            // Keep the length prefix small so the frame is complete and gets decoded.
            if bytes.len() > 4 {
                let len = (bytes.len() - 4) as u32;
                bytes[..4].copy_from_slice(&len.to_be_bytes());
            }
            frames.push(bytes);
        }
        for bytes in &frames {
            if let Err(e) = send_and_drain(addr, bytes) {
                fail_unreachable(&mut c, addr, e);
            }
        }
    }

    // Every process still runs and the cluster still serves.
    for p in c.procs_mut() {
        assert!(p.is_running(), "{} died on bad input", p.name);
    }
    c.wait_nodes_up(1, Duration::from_secs(30));
    let job = c
        .json(&["submit", "--count", "2", "--", "true"])
        .expect("submit after garbage");
    assert!(job["job_id"].as_u64().is_some());
    wait_for(
        "tasks to succeed after garbage",
        Duration::from_secs(60),
        || {
            let t = c.tasks();
            (t.len() == 2 && t.iter().all(|t| t["state"] == "succeeded")).then_some(())
        },
    );
    // Each process logged the rejection.
    for p in c.masters.iter().chain(&c.slaves) {
        let log = p.log_text();
        assert!(
            log.contains("rejected frame"),
            "{} did not log the rejected frames:\n{}",
            p.name,
            log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
    }
}
