//! `bench scale`'s helper processes (`bench scale-slaves`): started, followed through their
//! progress lines, and asked for what their slaves received; and, when slaves do not come
//! up, which limit stopped them.

use super::bench_scale::ScaleArgs;
use super::bench_scale_slaves::{Line, Progress, Received};
use anyhow::{bail, Context};
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Descriptors a helper process needs besides two per slave (its runtime, logs, clients).
const SPARE_FDS: u64 = 128;

/// What one helper process said last.
#[derive(Default)]
struct Said {
    progress: Progress,
    received: Option<Received>,
    /// Its output ended.
    ended: bool,
}

/// The helper processes.
pub(super) struct Fleet {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    said: Vec<Arc<Mutex<Said>>>,
    logs: Vec<PathBuf>,
}

/// What all the slaves received, merged.
pub(super) struct Merged {
    /// First arrival of each task (µs since the epoch).
    pub running: HashMap<u64, u64>,
    /// Tasks received by more than one slave or under more than one attempt.
    pub placed_twice: u64,
    /// Arrival of the last new assignment (µs since the epoch).
    pub last_placed: u64,
    /// Assignment messages.
    pub dispatch_messages: u64,
    /// Finishes acknowledged.
    pub completed: u64,
}

/// The processes whose limits may stop the slaves.
pub(super) struct Procs {
    pub leader: i32,
    pub fleet: Vec<i32>,
}

fn lock(s: &Mutex<Said>) -> std::sync::MutexGuard<'_, Said> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Fleet {
    /// Starts `ceil(slaves / slaves_per_process)` helper processes, or says which limit
    /// forbids it.
    pub(super) fn start(
        a: &ScaleArgs,
        masters: &[String],
        ca: Option<&Path>,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let per = a.slaves_per_process.min(a.slaves);
        let hard = hetsched_common::wire::fdlimit::open_files()
            .map(|o| o.hard)
            .unwrap_or(u64::MAX);
        let need = 2 * per as u64 + SPARE_FDS;
        if need > hard {
            bail!(
                "a helper process of {per} slaves needs about {need} descriptors, and the hard open-file limit is {hard}: lower --slaves-per-process to {} or raise the hard open-file limit (ulimit -Hn as root, LimitNOFILE=, /etc/security/limits.conf)",
                hard.saturating_sub(SPARE_FDS) / 2
            );
        }
        let exe = std::env::current_exe().context("this executable")?;
        let mut fleet = Fleet {
            children: Vec::new(),
            stdins: Vec::new(),
            said: Vec::new(),
            logs: Vec::new(),
        };
        let mut first = 0;
        while first < a.slaves {
            let count = per.min(a.slaves - first);
            let log = dir.join(format!("slaves-{}.log", fleet.children.len() + 1));
            let mut cmd = Command::new(&exe);
            cmd.args(["bench", "scale-slaves", "--first", &first.to_string()])
                .args([
                    "--count",
                    &count.to_string(),
                    "--cpus",
                    &a.slave_cpus.to_string(),
                ])
                .args(["--masters", &masters.join(",")]);
            if let Some(ca) = ca {
                cmd.arg("--ca").arg(ca);
            }
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).context("helper log")?)
                .spawn()
                .context("cannot start a slave process")?;
            let out = child.stdout.take().context("helper output")?;
            let said = Arc::new(Mutex::new(Said::default()));
            let s = said.clone();
            std::thread::spawn(move || follow(out, &s));
            fleet.stdins.push(child.stdin.take());
            fleet.children.push(child);
            fleet.said.push(said);
            fleet.logs.push(log);
            first += count;
        }
        Ok(fleet)
    }

    /// Helper processes.
    pub(super) fn len(&self) -> usize {
        self.children.len()
    }

    /// Their process ids.
    pub(super) fn pids(&self) -> Vec<i32> {
        self.children.iter().map(|c| c.id() as i32).collect()
    }

    /// Their progress, added up.
    pub(super) fn progress(&self) -> Progress {
        let mut p = Progress::default();
        for s in &self.said {
            let s = lock(s).progress;
            p.started += s.started;
            p.heartbeats += s.heartbeats;
            p.completed += s.completed;
        }
        p
    }

    /// Whether a helper process ended before it was asked to.
    pub(super) fn failed(&self) -> bool {
        self.said.iter().any(|s| lock(s).ended)
    }

    /// The last lines of the helpers' logs (why one ended).
    fn log_tails(&self) -> String {
        let mut out = Vec::new();
        for l in &self.logs {
            let text = std::fs::read_to_string(l).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            if !tail.is_empty() {
                out.push(format!(
                    "{}: {}",
                    l.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
        }
        out.join("; ")
    }

    /// Ends the helpers and merges what their slaves received.
    pub(super) fn finish(mut self) -> anyhow::Result<Merged> {
        self.stdins.clear();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut m = Merged {
            running: HashMap::new(),
            placed_twice: 0,
            last_placed: 0,
            dispatch_messages: 0,
            completed: 0,
        };
        let mut received: HashMap<u64, HashSet<(u32, u32)>> = HashMap::new();
        for s in &self.said {
            let r = loop {
                let mut g = lock(s);
                if let Some(r) = g.received.take() {
                    break r;
                }
                if g.ended || Instant::now() > deadline {
                    bail!("a slave process gave no account: {}", self.log_tails());
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(20));
            };
            m.completed += lock(s).progress.completed;
            for (t, at) in r.running {
                let e = m.running.entry(t).or_insert(at);
                *e = (*e).min(at);
            }
            for (t, slave, attempt) in r.received {
                received.entry(t).or_default().insert((slave, attempt));
            }
            m.last_placed = m.last_placed.max(r.last_placed.unwrap_or(0));
            m.dispatch_messages += r.dispatch_messages;
        }
        m.placed_twice = received.values().filter(|r| r.len() > 1).count() as u64;
        for c in &mut self.children {
            let _ = c.wait();
        }
        self.children.clear();
        Ok(m)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Reads a helper's lines until its output ends.
fn follow(out: std::process::ChildStdout, said: &Mutex<Said>) {
    for line in std::io::BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::Progress(p)) => lock(said).progress = p,
            Ok(Line::Received(r)) => lock(said).received = Some(r),
            Err(_) => {}
        }
    }
    lock(said).ended = true;
}

/// Descriptors process `pid` has open.
pub(super) fn open_fds(pid: i32) -> Option<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64)
}

/// The soft open-file limit of process `pid`.
fn fd_limit(pid: i32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Which limit stopped the slaves, as far as the processes show it.
pub(super) fn limit_hint(p: &Procs, fleet: &Fleet, slaves: u32) -> String {
    let mut hints = Vec::new();
    let near = |pid: i32| match (open_fds(pid), fd_limit(pid)) {
        (Some(open), Some(limit)) if open + 16 >= limit => Some((open, limit)),
        _ => None,
    };
    if let Some((open, limit)) = near(p.leader) {
        hints.push(format!("the leader (pid {}) holds {open} descriptors of its limit {limit}: raise the masters' hard open-file limit (ulimit -Hn as root, LimitNOFILE= in the unit, /etc/security/limits.conf)", p.leader));
    }
    for &pid in &p.fleet {
        if let Some((open, limit)) = near(pid) {
            hints.push(format!("slave process {pid} holds {open} descriptors of its limit {limit}: lower --slaves-per-process or raise the hard open-file limit"));
        }
    }
    if let Some((lo, hi)) = port_range() {
        if 2 * slaves as u64 + 1024 > hi.saturating_sub(lo) {
            hints.push(format!("{slaves} slaves use about {} local ports and net.ipv4.ip_local_port_range is {lo}-{hi}: widen it (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\")", 2 * slaves));
        }
    }
    if fleet.failed() {
        hints.push(format!("a slave process ended: {}", fleet.log_tails()));
    }
    if hints.is_empty() {
        hints.push("no descriptor or port limit reached; the leader may be too slow to register them in time (raise --timeout)".into());
    }
    hints.join("; ")
}

fn port_range() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}
