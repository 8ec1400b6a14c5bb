//! `bench scale`'s slave processes: `hetsched bench scale-slaves` (hidden) runs a share of
//! the in-process slaves (`bench_e2e`'s, each speaking the full wire protocol), so that no
//! process holds more descriptors than its limit allows. It writes a progress line every
//! 200 ms and, when its standard input ends, a last line with what its slaves received;
//! `bench scale` adds them up.

use super::bench_e2e::inproc::{lock, start_in_process_slave, Seen, SeenRef};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `hetsched bench scale-slaves`.
#[derive(clap::Args, Debug)]
pub struct ScaleSlavesArgs {
    /// Number of the first slave (names `inproc-<n + 1>`).
    #[arg(long)]
    pub first: u32,
    /// Slaves in this process.
    #[arg(long)]
    pub count: u32,
    /// The masters' cluster addresses, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub masters: Vec<String>,
    /// CPUs each slave declares.
    #[arg(long)]
    pub cpus: u32,
    /// The launching process's CA (secured clusters); absent: plain TCP.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// A progress line.
#[derive(Serialize, Deserialize, Debug, Default, Clone, Copy)]
pub struct Progress {
    /// Slaves started.
    pub started: u32,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Tasks whose finish the leader acknowledged.
    pub completed: u64,
}

/// The last line: what the slaves received. Times are microseconds since the Unix epoch.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Received {
    /// First arrival of each task: (task, time).
    pub running: Vec<(u64, u64)>,
    /// Every (task, slave, attempt) received.
    pub received: Vec<(u64, u32, u32)>,
    /// Arrival of the last new assignment.
    pub last_placed: Option<u64>,
    /// Assignment messages received.
    pub dispatch_messages: u64,
}

/// One line of a slave process's output.
#[derive(Serialize, Deserialize, Debug)]
pub enum Line {
    /// Every 200 ms.
    Progress(Progress),
    /// Once, at the end.
    Received(Received),
}

/// Microseconds since the Unix epoch now.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Runs `bench scale-slaves`.
pub fn run(a: ScaleSlavesArgs) -> anyhow::Result<()> {
    hetsched_common::telemetry::init_logging("warn");
    super::log_open_file_limit();
    if let Some(ca) = &a.ca {
        crate::cmd::local::security::use_ca(ca)?;
        crate::cmd::local::security::install_client(ca)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let seen: SeenRef = Arc::new(Mutex::new(Seen::default()));
    let started = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (s, st) = (seen.clone(), started.clone());
    rt.spawn(async move {
        for i in a.first..a.first + a.count {
            if let Err(e) = start_in_process_slave(i, a.masters.clone(), a.cpus, s.clone()).await {
                eprintln!("bench scale-slaves: slave {} did not start: {e:#}", i + 1);
                return;
            }
            st.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    // Standard input ends when `bench scale` has its figures (or is gone).
    let (eof_tx, eof_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = eof_tx.send(());
    });
    loop {
        let p = {
            let s = lock(&seen);
            Progress {
                started: started.load(std::sync::atomic::Ordering::Relaxed),
                heartbeats: s.heartbeats,
                completed: s.completed.len() as u64,
            }
        };
        write_line(&Line::Progress(p))?;
        if eof_rx.recv_timeout(Duration::from_millis(200)).is_ok() {
            break;
        }
    }
    write_line(&Line::Received(received(&lock(&seen))))?;
    rt.shutdown_timeout(Duration::from_millis(500));
    Ok(())
}

fn write_line(l: &Line) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(l)?)?;
    out.flush()?;
    Ok(())
}

/// What the slaves received, with times on the wall clock (the processes share it).
fn received(s: &Seen) -> Received {
    let (now, now_us) = (Instant::now(), unix_us());
    let at =
        |t: Instant| now_us.saturating_sub(now.saturating_duration_since(t).as_micros() as u64);
    Received {
        running: s.running.iter().map(|(t, i)| (t.0, at(*i))).collect(),
        received: s
            .received
            .iter()
            .flat_map(|(t, r)| r.iter().map(move |(slave, a)| (t.0, *slave, *a)))
            .collect(),
        last_placed: s.last_placed.map(at),
        dispatch_messages: s.dispatch_messages,
    }
}
