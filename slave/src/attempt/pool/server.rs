//! The slave's long-lived supervisor: one process per slave (`hetsched supervise --pool DIR`)
//! that starts every task attempt, is the parent of each, reaps them, and records how each
//! ended — what a per-attempt supervisor did before it, without an exec of a supervisor and
//! two fsyncs per task.
//!
//! It keeps every guarantee of supervision (docs/DESIGN.md, "Node loss"):
//! - **Tasks outlive the agent**: the pool runs in a session of its own and does not end with
//!   the agent; a restarted agent connects to the same pool.
//! - **Re-adopted**: each attempt directory gets the same `supervisor.json` as before (the
//!   pool's pid and start time, the task's pid) and, at its end, the same `status.json`; an
//!   agent watching an attempt after a restart reads them as it read a per-attempt
//!   supervisor's. An attempt whose pool died without a status is lost, as before.
//! - **Never twice**: the agent still starts an attempt only by creating its directory.
//! - **Durable exits, in batches**: the exits reaped together are appended to the journal
//!   `DIR/exits.jsonl` and made durable by one `fdatasync`, then announced; `status.json` is
//!   written beside (atomically, for readers) and the journal is where a machine crash finds
//!   a result whose `status.json` did not reach the disk.
//!
//! It speaks [`super::protocol`]. Only the newest connection hears exits. The pool exits
//! when it has no task and no agent for [`IDLE_EXIT`].

use super::protocol::{self, JournalEntry, ENV_POOL, JOURNAL, SOCKET};
use crate::attempt::files::{
    self, cannot_start, write_atomically, ExitRecord, Spec, SupervisorRecord, FORMAT_VERSION,
    SPEC_FILE, STATUS_FILE, SUPERVISOR_FILE,
};
use crate::attempt::procfs::{self, proc_start_time};
use crate::attempt::task;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The lock that keeps one pool per directory.
const LOCK: &str = "pool.lock";
/// How long the pool lingers with no task and no agent before it exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);
/// Spare log files kept ready after each start (an attempt takes two).
const SPARES_AHEAD: usize = 4;
/// The journal is compacted (entries of attempts whose directory is gone dropped) past this.
const JOURNAL_COMPACT_BYTES: u64 = 4 << 20;
/// The most threads starting attempts at once (more starts wait for one of them).
const MAX_STARTERS: usize = 64;
/// How long a starting thread waits for another start before it ends.
const STARTER_IDLE: Duration = Duration::from_secs(10);

/// A running task: where its attempt lives and what to clean up after it.
struct Running {
    dir: PathBuf,
    spec: Spec,
}

#[derive(Default)]
struct State {
    running: HashMap<i32, Running>,
    /// Spawns in progress: a child of one may end before it is in `running`.
    spawning: usize,
    /// The newest agent connection (exits are announced there).
    agent: Option<UnixStream>,
    /// When the pool last had a task or an agent.
    busy_at: Option<Instant>,
}

struct Pool {
    dir: PathBuf,
    me: (i32, u64),
    state: Mutex<State>,
    /// Signalled when a spawn ends (the reaper sleeps while nothing runs, and waits for
    /// spawns in progress before it reaps a child it does not know yet).
    started: Condvar,
    /// Serialises journal appends and compaction.
    journal: Mutex<()>,
    /// Empty log files of ended attempts, for the next starts.
    spares: crate::log_spares::Spares,
    /// Start requests and the threads that serve them.
    starts: Mutex<Starts>,
    /// Signalled when a start request is queued.
    start_queued: Condvar,
}

/// Start requests waiting for a thread, and the starting threads.
///
/// Starts overlap, each on a starting thread: a spawn waits for its child's exec, which on
/// a busy machine is a scheduling round trip or more, and one start at a time capped a
/// 16-CPU slave at about 80 tasks/s (BENCHMARKS.md, "Real tasks per second"). The threads
/// are kept between starts (a thread made per start cost its creation, stack and exit
/// every time) and made when every kept one is busy, up to [`MAX_STARTERS`].
#[derive(Default)]
struct Starts {
    /// `start` lines ([`protocol::parse_start`]), oldest first.
    queue: VecDeque<String>,
    /// Threads waiting for a request.
    idle: usize,
    /// Threads alive.
    threads: usize,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pool's entry point (`hetsched supervise --pool DIR`); returns the exit status.
pub fn main(dir: &Path) -> i32 {
    // A session of its own: the agent's death and its terminal's signals do not reach it.
    let _ = nix::unistd::setsid();
    // Its log (`pool.log`) follows the agent's `HETSCHED_LOG`.
    hetsched_common::telemetry::init_logging("warn");
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!(
            "hetsched supervise --pool: cannot create {}: {e}",
            dir.display()
        );
        return 1;
    }
    let lock_file = match std::fs::File::create(dir.join(LOCK)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("hetsched supervise --pool: {e}");
            return 1;
        }
    };
    // One pool per directory: another one running serves the agent already.
    let _held =
        match nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err(_) => return 0,
        };
    let sock = dir.join(SOCKET);
    let _ = std::fs::remove_file(&sock);
    let listener = match UnixListener::bind(&sock) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "hetsched supervise --pool: cannot listen on {}: {e}",
                sock.display()
            );
            return 1;
        }
    };
    let me = std::process::id() as i32;
    let pool = Arc::new(Pool {
        dir: dir.to_path_buf(),
        me: (me, proc_start_time(me).unwrap_or(0)),
        state: Mutex::new(State {
            busy_at: Some(Instant::now()),
            ..Default::default()
        }),
        started: Condvar::new(),
        journal: Mutex::new(()),
        spares: Default::default(),
        starts: Mutex::new(Starts::default()),
        start_queued: Condvar::new(),
    });
    // Spares of an earlier pool (DATA/supervisor → DATA/logs).
    if let Some(data) = dir.parent() {
        crate::log_spares::Spares::clean(&data.join("logs"));
    }
    let p = pool.clone();
    std::thread::spawn(move || reap(&p));
    let p = pool.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let p = p.clone();
            std::thread::spawn(move || serve(p, conn));
        }
    });
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let mut s = lock(&pool.state);
        if !s.running.is_empty() || s.agent.is_some() {
            s.busy_at = Some(Instant::now());
        } else if s.busy_at.is_some_and(|t| t.elapsed() >= IDLE_EXIT) {
            let _ = std::fs::remove_file(&sock);
            if let Some(data) = dir.parent() {
                crate::log_spares::Spares::clean(&data.join("logs"));
            }
            return 0;
        }
    }
}

/// One agent connection: greets it, then starts what it asks for (on the starting threads,
/// [`Starts`]).
fn serve(pool: Arc<Pool>, conn: UnixStream) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    if out
        .write_all(protocol::hello(pool.me.0, pool.me.1).as_bytes())
        .is_err()
    {
        return;
    }
    lock(&pool.state).agent = Some(out);
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
        if protocol::parse_start(&line).is_some() {
            queue_start(&pool, line);
        }
    }
    let mut s = lock(&pool.state);
    s.agent = None;
    s.busy_at = Some(Instant::now());
}

/// Queues a start request for the starting threads, making one when none is free.
fn queue_start(pool: &Arc<Pool>, req: String) {
    let mut q = pool.starts.lock().unwrap_or_else(|p| p.into_inner());
    q.queue.push_back(req);
    if q.queue.len() > q.idle && q.threads < MAX_STARTERS {
        let p = pool.clone();
        match std::thread::Builder::new()
            .name("pool-start".into())
            .spawn(move || starter(&p))
        {
            Ok(_) => q.threads += 1,
            // The request waits for a thread that is alive, if any.
            Err(e) => eprintln!("hetsched supervise --pool: cannot start a thread: {e}"),
        }
    }
    drop(q);
    pool.start_queued.notify_one();
}

/// A starting thread: serves queued requests until none came for [`STARTER_IDLE`].
fn starter(pool: &Pool) {
    loop {
        let mut q = pool.starts.lock().unwrap_or_else(|p| p.into_inner());
        let req = loop {
            if let Some(r) = q.queue.pop_front() {
                break Some(r);
            }
            q.idle += 1;
            let (g, timeout) = pool
                .start_queued
                .wait_timeout(q, STARTER_IDLE)
                .unwrap_or_else(|p| p.into_inner());
            q = g;
            q.idle -= 1;
            if timeout.timed_out() && q.queue.is_empty() {
                break None;
            }
        };
        let Some(req) = req else {
            q.threads -= 1;
            return;
        };
        drop(q);
        if let Some((dir, spec)) = protocol::parse_start(&req) {
            start(pool, dir, spec);
        }
    }
}

/// Starts the attempt in `dir` as `inline` (or its `spec.json`) says; a failure to start is
/// recorded as its exit at once.
fn start(pool: &Pool, dir: &Path, inline: Option<&str>) {
    let spec = match inline {
        Some(s) => serde_json::from_str::<Spec>(s).map_err(|e| e.to_string()),
        None => std::fs::read(dir.join(SPEC_FILE))
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())),
    };
    let spec: Spec = match spec {
        Ok(s) => s,
        Err(e) => {
            let rec = cannot_start(format!("cannot read {SPEC_FILE}: {e}"));
            return ended(pool, vec![(dir.to_path_buf(), rec, None)]);
        }
    };
    // Counted across the spawn: the reaper leaves a child it does not know yet alone until
    // no spawn is in progress (it may be this one's, or one whose exec failed, which the
    // spawn reaps itself).
    lock(&pool.state).spawning += 1;
    let spawned = match task::task_spawn(&spec, &[ENV_POOL], &pool.spares) {
        Ok(r) => r,
        Err(rec) => {
            lock(&pool.state).spawning -= 1;
            return ended(pool, vec![(dir.to_path_buf(), rec, Some(spec))]);
        }
    };
    let done = |s: &mut State| {
        s.spawning -= 1;
        pool.started.notify_all();
    };
    // Where this attempt's log files came from spares (attempts in cgroups only).
    let spare_dir = if spec.cgroup_procs.is_empty() {
        None
    } else {
        spec.stdout.parent().map(Path::to_path_buf)
    };
    match spawned {
        Ok(task_pid) => {
            tracing::debug!(target: "hetsched::trace", dir = %dir.display(), task_pid, "pool: task spawned");
            // Written before the task is recorded as running, so before its status.
            let rec = SupervisorRecord {
                version: FORMAT_VERSION,
                pid: pool.me.0,
                start_time: pool.me.1,
                task_pid,
            };
            if let Err(e) = serde_json::to_vec(&rec)
                .map_err(std::io::Error::other)
                .and_then(|b| write_atomically(&dir.join(SUPERVISOR_FILE), &b))
            {
                eprintln!("hetsched supervise --pool: cannot write {SUPERVISOR_FILE}: {e}");
            }
            let mut s = lock(&pool.state);
            s.running.insert(
                task_pid,
                Running {
                    dir: dir.to_path_buf(),
                    spec,
                },
            );
            done(&mut s);
            drop(s);
            // The task runs: make the next starts' files now, while nobody waits on them.
            if let Some(logs) = spare_dir {
                pool.spares.replenish(&logs, SPARES_AHEAD);
            }
        }
        Err(e) => {
            done(&mut lock(&pool.state));
            let program = spec.argv.first().map(String::as_str).unwrap_or_default();
            let why = format!("cannot start {program:?}: {e}");
            task::note(&spec, &why);
            ended(
                pool,
                vec![(dir.to_path_buf(), cannot_start(why), Some(spec))],
            );
        }
    }
}

/// Reaps every task as it ends, in batches: whatever ended together is journaled with one
/// fdatasync and announced.
fn reap(pool: &Pool) {
    loop {
        {
            let mut s = lock(&pool.state);
            while s.running.is_empty() {
                s = pool.started.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        }
        // Peek (WNOWAIT) at which child ended, then reap it under the state lock, and only
        // once no spawn is in progress if it is not a recorded task yet: it may be a task
        // whose start is being recorded, or a child whose exec failed, which is std's to
        // reap inside `spawn`.
        let mut batch = Vec::new();
        let mut flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        while let Ok(WaitStatus::Exited(pid, _)) | Ok(WaitStatus::Signaled(pid, _, _)) =
            waitid(Id::All, flags)
        {
            let mut s = lock(&pool.state);
            if s.spawning > 0 && !s.running.contains_key(&pid.as_raw()) {
                // Woken when a spawn ends; then look again.
                drop(pool.started.wait(s).unwrap_or_else(|p| p.into_inner()));
                continue;
            }
            let known = s.running.remove(&pid.as_raw());
            let status = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            drop(s);
            let (exit_code, signal) = match status {
                Ok(WaitStatus::Exited(_, code)) => (code, None),
                Ok(WaitStatus::Signaled(_, sig, _)) => (-(sig as i32), Some(sig as i32)),
                _ => (crate::attempt::EXIT_CANNOT_START, None),
            };
            if let Some(r) = known {
                batch.push((pid, exit_code, signal, r));
            }
            flags |= WaitPidFlag::WNOHANG;
        }
        let mut ends = Vec::new();
        for (pid, exit_code, signal, r) in batch {
            // Whatever the task left behind ends with it, as under a per-attempt supervisor.
            let _ = killpg(pid, Signal::SIGKILL);
            procfs::kill_cgroup_members(&r.spec.cgroup_procs);
            let oom_kills = r
                .spec
                .oom_counter
                .as_deref()
                .and_then(|f| crate::small_file::read_to_string(f).ok())
                .map(|s| crate::cgroup::oom_kills_of(&s))
                .unwrap_or(0);
            ends.push((
                r.dir,
                ExitRecord {
                    version: FORMAT_VERSION,
                    exit_code,
                    signal,
                    oom_kills,
                    cannot_start: None,
                },
                Some(r.spec),
            ));
        }
        if !ends.is_empty() {
            ended(pool, ends);
        }
    }
}

/// Records these ends: their output kept (`crate::logs`; before the end is recorded, so a
/// reported result's output is where `hetsched logs` reads it), the journal (one fdatasync),
/// `status.json` files, then the announcement.
fn ended(pool: &Pool, ends: Vec<(PathBuf, ExitRecord, Option<Spec>)>) {
    let mut kept = crate::logs::KeepBatch::default();
    for spec in ends.iter().filter_map(|e| e.2.as_ref()) {
        spec.keep_output(&mut kept);
    }
    kept.finish_into(&pool.spares);
    let journal = pool.dir.join(JOURNAL);
    let _serial = pool.journal.lock().unwrap_or_else(|p| p.into_inner());
    let mut lines = Vec::new();
    for (dir, exit, _) in &ends {
        let attempt = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Ok(l) = serde_json::to_string(&JournalEntry {
            attempt,
            exit: exit.clone(),
        }) {
            lines.push(l);
        }
    }
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&journal)
        .and_then(|mut f| {
            let mut buf = lines.join("\n");
            buf.push('\n');
            f.write_all(buf.as_bytes())?;
            f.sync_data()?;
            f.metadata()
        });
    match r {
        Ok(m) if m.len() > JOURNAL_COMPACT_BYTES => compact(&journal),
        Ok(_) => {}
        Err(e) => eprintln!("hetsched supervise --pool: cannot journal exits: {e}"),
    }
    let mut announce = String::new();
    for (dir, exit, _) in &ends {
        if let Err(e) = serde_json::to_vec(exit)
            .map_err(std::io::Error::other)
            .and_then(|b| write_atomically(&dir.join(STATUS_FILE), &b))
        {
            eprintln!("hetsched supervise --pool: cannot write the exit status: {e}");
        }
        announce.push_str(&protocol::exited(dir));
    }
    let mut s = lock(&pool.state);
    if let Some(out) = &mut s.agent {
        if out.write_all(announce.as_bytes()).is_err() {
            s.agent = None;
        }
    }
}

/// Drops the journal entries of attempts whose directory is gone (their results were
/// acknowledged and forgotten by the agent), durably.
fn compact(journal: &Path) {
    let Ok(text) = std::fs::read_to_string(journal) else {
        return;
    };
    let Some(attempts) = journal
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("attempts"))
    else {
        return;
    };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<JournalEntry>(l)
                .is_ok_and(|e| attempts.join(&e.attempt).exists())
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if let Err(e) = files::write_durably(journal, kept.as_bytes()) {
        eprintln!("hetsched supervise --pool: cannot compact the journal: {e}");
    }
}
