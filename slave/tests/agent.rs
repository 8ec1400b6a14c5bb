//! The slave against fake masters: registration, dispatch, execution, stop, leader
//! redirects, and results kept across a restart. Every wait polls a condition with a deadline.

use hetsched_common::protocol::{
    Assignment, ErrorKind, ErrorReply, HeldPhase, Message, SlaveCommand, SlaveCommandReply,
    SlaveRequest, SlaveResponse, TaskReport,
};
use hetsched_common::wire::{self, Connection, FrameLimits, Handler};
use hetsched_common::{JobId, MasterId, NodeId, ResourceRequest, TaskId, TaskReason};
use hetsched_slave::{SlaveConfig, Tuning};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(20);

/// What a fake master answers.
#[derive(Clone)]
enum Role {
    /// Registers as node 1, acks everything (finish reports only while `ack_finished`);
    /// answers the first `forget` heartbeats with `UnknownNode`.
    Leader {
        ack_finished: Arc<AtomicBool>,
        forget: Arc<AtomicUsize>,
    },
    /// Answers everything with `NotLeader` pointing there.
    Follower { leader_addr: String },
}

/// A `TaskReports` batch as the `TaskStarted` / `TaskFinished` requests it stands for.
fn expand_reports(req: SlaveRequest) -> Vec<SlaveRequest> {
    match req {
        SlaveRequest::TaskReports { node, reports } => reports
            .into_iter()
            .filter_map(|r| match r {
                TaskReport::Started { task, attempt } => Some(SlaveRequest::TaskStarted {
                    node,
                    task,
                    attempt,
                }),
                TaskReport::Finished {
                    task,
                    attempt,
                    exit_code,
                    reason,
                    ..
                } => Some(SlaveRequest::TaskFinished {
                    node,
                    task,
                    attempt,
                    exit_code,
                    reason,
                }),
                // Compressions (S3.6) stand for no single request; these tests make none.
                TaskReport::Compressed { .. } => None,
                // Asks to start queued tasks (S0.3): these tests queue none.
                TaskReport::WantsStart { .. } => None,
            })
            .collect(),
        other => vec![other],
    }
}

struct FakeMaster {
    addr: String,
    seen: Arc<Mutex<Vec<SlaveRequest>>>,
}

impl FakeMaster {
    async fn start(role: Role) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake master");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen: Arc<Mutex<Vec<SlaveRequest>>> = Arc::default();
        let log = seen.clone();
        let handler: Handler = Arc::new(move |msg, _peer| {
            let role = role.clone();
            let log = log.clone();
            Box::pin(async move {
                let Message::Slave(req) = msg else {
                    return Some(Message::Error(ErrorReply::new(
                        ErrorKind::Unsupported,
                        "fake master",
                    )));
                };
                // Batched reports are logged as the single reports they carry; the batch is
                // answered as its finish report (if any) would be.
                let singles = expand_reports(req.clone());
                let req = singles
                    .iter()
                    .find(|r| matches!(r, SlaveRequest::TaskFinished { .. }))
                    .or(singles.first())
                    .cloned()
                    .unwrap_or(req);
                log.lock().expect("log").extend(singles);
                Some(match role {
                    Role::Follower { leader_addr } => Message::Error(ErrorReply::new(
                        ErrorKind::NotLeader {
                            leader: Some(MasterId(2)),
                            leader_addr: Some(leader_addr),
                        },
                        "not the leader",
                    )),
                    Role::Leader {
                        ack_finished,
                        forget,
                    } => match req {
                        SlaveRequest::Register { .. } => {
                            Message::SlaveReply(SlaveResponse::Registered { node: NodeId(1) })
                        }
                        SlaveRequest::Heartbeat { .. }
                            if forget
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                })
                                .is_ok() =>
                        {
                            Message::Error(ErrorReply::new(ErrorKind::UnknownNode, "who?"))
                        }
                        SlaveRequest::Heartbeat { .. } => {
                            Message::SlaveReply(SlaveResponse::HeartbeatAck {
                                leader: MasterId(1),
                                heartbeat_ms: 0,
                            })
                        }
                        SlaveRequest::TaskFinished { .. }
                            if !ack_finished.load(Ordering::SeqCst) =>
                        {
                            Message::Error(ErrorReply::new(ErrorKind::Unavailable, "no quorum"))
                        }
                        _ => Message::SlaveReply(SlaveResponse::Ack),
                    },
                })
            })
        });
        tokio::spawn(wire::serve(listener, FrameLimits::default(), handler));
        Self { addr, seen }
    }

    fn leader() -> Role {
        Role::Leader {
            ack_finished: Arc::new(AtomicBool::new(true)),
            forget: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<SlaveRequest> {
        self.seen.lock().expect("log").clone()
    }

    /// Waits until some recorded request satisfies `f`, returning `f`'s value.
    async fn wait_for<T>(&self, what: &str, f: impl Fn(&SlaveRequest) -> Option<T>) -> T {
        wait_until(what, || self.seen().iter().find_map(&f)).await
    }
}

async fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A slave in its own actix System on a thread; dropping the handle stops it.
struct Slave {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Slave {
    fn start(masters: Vec<String>, data_dir: &Path) -> Self {
        let cfg = SlaveConfig {
            listen: "127.0.0.1:0".into(),
            advertise: None,
            masters,
            data_dir: data_dir.to_path_buf(),
            cpus: 2,
            mem_mib: 1024,
            gpus: 1,
            gpu_model: Some("V100M16".into()),
            name: Some("test-slave".into()),
            partitions: Vec::new(),
            supervisor: vec![env!("CARGO_BIN_EXE_hetsched-supervise").into()],
            cgroup_root: Some("/sys/fs/cgroup".into()),
            favordynmods: true,
            probes: Default::default(),
            gpu_pool: None,
            containers: Default::default(),
        };
        let tuning = Tuning {
            heartbeat: Duration::from_millis(100),
            stop_grace: Duration::from_millis(500),
            call_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_millis(200),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let system = actix::System::new();
            system.block_on(async move {
                tokio::select! {
                    r = hetsched_slave::run_with(cfg, tuning) => {
                        panic!("slave ended: {r:?}");
                    }
                    _ = stopped => {}
                }
            });
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Slave {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn assignment(task: u64, command: &[&str]) -> Assignment {
    Assignment {
        task: TaskId(task),
        job: JobId(3),
        index: 4,
        attempt: 1,
        command: command.iter().map(|s| s.to_string()).collect(),
        env: [("EXTRA".to_string(), "yes".to_string())].into(),
        resources: ResourceRequest {
            cpu_milli: 500,
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

async fn call(conn: &Connection, cmd: SlaveCommand) -> Message {
    conn.call(Message::ToSlave(cmd), Duration::from_secs(10))
        .await
        .expect("slave answers")
}

/// Waits for the slave's registration and connects to the address it advertised last.
async fn connect_to_slave(master: &FakeMaster) -> Connection {
    // The latest registration: a restarted slave listens on a new port.
    let addr = wait_until("registration", || {
        master.seen().iter().rev().find_map(|r| match r {
            SlaveRequest::Register { addr, .. } => Some(addr.clone()),
            _ => None,
        })
    })
    .await;
    Connection::connect(&addr, Duration::from_secs(5))
        .await
        .expect("connect to slave")
}

fn finished_of(r: &SlaveRequest, want: u64) -> Option<i32> {
    match r {
        SlaveRequest::TaskFinished {
            task, exit_code, ..
        } if task.0 == want => Some(*exit_code),
        _ => None,
    }
}

fn started_count(seen: &[SlaveRequest], want: u64) -> usize {
    seen.iter()
        .filter(|r| matches!(r, SlaveRequest::TaskStarted { task, .. } if task.0 == want))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_an_assigned_task_and_reports_it() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;

    let (key, capacity) = master
        .wait_for("registration", |r| match r {
            SlaveRequest::Register { key, capacity, .. } => Some((*key, capacity.clone())),
            _ => None,
        })
        .await;
    assert_ne!(key, 0);
    assert_eq!(capacity.cpu_milli, 2000);
    // The test host may have a real GPU; otherwise the one offered is emulated and named so.
    assert_eq!(capacity.gpus.len(), 1);
    if capacity.gpus[0].emulated {
        assert_eq!(capacity.gpus[0].model, "V100M16");
    }
    master
        .wait_for("heartbeat as node 1", |r| match r {
            SlaveRequest::Heartbeat { node, .. } if node.0 == 1 => Some(()),
            _ => None,
        })
        .await;

    let out = dir.path().join("out.txt");
    let script = format!(
        "echo $HETSCHED_TASK_ID $HETSCHED_JOB_ID $HETSCHED_TASK_INDEX $HETSCHED_ATTEMPT $EXTRA \
         $SLURM_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_JOB_NAME $SLURM_NTASKS $(pwd) > {}",
        out.display()
    );
    // The job's working directory and name reach the task (Slurm scripts read them).
    let workdir = dir.path().join("work");
    std::fs::create_dir(&workdir).expect("mkdir workdir");
    let mut a = assignment(17, &["sh", "-c", &script]);
    a.workdir = Some(workdir.display().to_string());
    a.job_name = "train".into();
    let accepted = Message::ToSlaveReply(SlaveCommandReply::Accepted);
    assert_eq!(call(&conn, SlaveCommand::Assign(a.clone())).await, accepted);
    // A duplicate is acknowledged and not run twice.
    assert_eq!(call(&conn, SlaveCommand::Assign(a.clone())).await, accepted);

    let code = master
        .wait_for("task 17 finished", |r| finished_of(r, 17))
        .await;
    assert_eq!(code, 0);
    let seen = master.seen();
    let started = seen
        .iter()
        .position(|r| matches!(r, SlaveRequest::TaskStarted { task, attempt: 1, node } if task.0 == 17 && node.0 == 1))
        .expect("TaskStarted reported");
    let finished = seen
        .iter()
        .position(|r| finished_of(r, 17).is_some())
        .expect("TaskFinished reported");
    assert!(started < finished, "started is reported before finished");
    let content = std::fs::read_to_string(&out).expect("task wrote its file");
    let (ids, pwd) = content.trim().rsplit_once(' ').expect("two parts");
    assert_eq!(ids, "17 3 4 1 yes 3 4 train 1");
    assert_eq!(
        std::fs::canonicalize(pwd).expect("pwd"),
        std::fs::canonicalize(&workdir).expect("workdir")
    );

    // Once acknowledged, the result is forgotten: a later heartbeat holds nothing, and the
    // same assignment again is a duplicate of a done attempt, not a second run.
    let n = master.seen().len();
    wait_until("an empty heartbeat after the ack", || {
        master.seen()[n..]
            .iter()
            .any(|r| matches!(r, SlaveRequest::Heartbeat { held, .. } if held.is_empty()))
            .then_some(())
    })
    .await;
    assert_eq!(call(&conn, SlaveCommand::Assign(a)).await, accepted);
    let n = master.seen().len();
    wait_until("two more heartbeats", || {
        let beats = master.seen()[n..]
            .iter()
            .filter(|r| matches!(r, SlaveRequest::Heartbeat { .. }))
            .count();
        (beats >= 2).then_some(())
    })
    .await;
    assert_eq!(started_count(&master.seen(), 17), 1, "ran exactly once");
}

fn is_gone(pid: i32) -> bool {
    // A killed process orphaned to a non-reaping init stays a zombie: dead all the same.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .map(|state| state == "Z" || state == "X")
            .unwrap_or(true),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_kills_the_process_group() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;

    let pidfile = dir.path().join("bg.pid");
    // The background sleep is not the group leader: only a group kill reaches it.
    let script = format!("sleep 100 & echo $! > {}; sleep 100", pidfile.display());
    let a = assignment(5, &["sh", "-c", &script]);
    assert_eq!(
        call(&conn, SlaveCommand::Assign(a)).await,
        Message::ToSlaveReply(SlaveCommandReply::Accepted)
    );
    master
        .wait_for("task 5 started", |r| {
            matches!(r, SlaveRequest::TaskStarted { task, .. } if task.0 == 5).then_some(())
        })
        .await;
    let bg: i32 = wait_until("the background pid", || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    assert!(!is_gone(bg), "background sleep runs");

    let stopped = Message::ToSlaveReply(SlaveCommandReply::Stopped);
    // Wrong attempt: nothing happens, still answered Stopped.
    assert_eq!(
        call(
            &conn,
            SlaveCommand::StopTask {
                task: TaskId(5),
                attempt: 9,
                grace_ms: None,
            }
        )
        .await,
        stopped
    );
    assert!(!is_gone(bg), "a stop of another attempt kills nothing");
    assert_eq!(
        call(
            &conn,
            SlaveCommand::StopTask {
                task: TaskId(5),
                attempt: 1,
                grace_ms: None,
            }
        )
        .await,
        stopped
    );
    let code = master
        .wait_for("task 5 finished", |r| finished_of(r, 5))
        .await;
    assert_eq!(code, -15, "killed by SIGTERM reports -15");
    wait_until("the background sleep to die", || is_gone(bg).then_some(())).await;
    // Not held at all: still Stopped.
    assert_eq!(
        call(
            &conn,
            SlaveCommand::StopTask {
                task: TaskId(99),
                attempt: 1,
                grace_ms: None,
            }
        )
        .await,
        stopped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstartable_command_finishes_with_127() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;
    let a = assignment(8, &["/nonexistent/hetsched-no-such-program"]);
    call(&conn, SlaveCommand::Assign(a)).await;
    let got = master
        .wait_for("task 8 finished", |r| reason_of(r, 8))
        .await;
    assert_eq!(got, (127, Some(TaskReason::CannotStart)));
    let err = std::fs::read_to_string(dir.path().join("logs/task-8-1.err")).expect("err log");
    assert!(err.contains("hetsched-no-such-program"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_not_leader_to_the_leader() {
    let leader = FakeMaster::start(FakeMaster::leader()).await;
    let follower = FakeMaster::start(Role::Follower {
        leader_addr: leader.addr.clone(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![follower.addr.clone()], dir.path());
    leader
        .wait_for("registration at the leader", |r| {
            matches!(r, SlaveRequest::Register { .. }).then_some(())
        })
        .await;
    leader
        .wait_for("heartbeat at the leader", |r| {
            matches!(r, SlaveRequest::Heartbeat { .. }).then_some(())
        })
        .await;
    assert!(
        follower
            .seen()
            .iter()
            .any(|r| matches!(r, SlaveRequest::Register { .. })),
        "the follower was asked first"
    );
}

/// Path of a file `name` in `dir`, as a string for scripts.
fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_result_is_reported_again_after_restart() {
    let ack_finished = Arc::new(AtomicBool::new(false));
    let master = FakeMaster::start(Role::Leader {
        ack_finished: ack_finished.clone(),
        forget: Arc::default(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    // Each run of the task leaves a line: what "not rerun" means. (A start report may be
    // sent again when its answer is lost; it only informs, so counting reports would not say.)
    let runs = file(dir.path(), "runs.txt");
    let script = format!("echo ran >> {}; exit 3", runs.display());
    let key = {
        let _slave = Slave::start(vec![master.addr.clone()], &data);
        let conn = connect_to_slave(&master).await;
        call(
            &conn,
            SlaveCommand::Assign(assignment(21, &["sh", "-c", &script])),
        )
        .await;
        // The master keeps refusing the result: the slave keeps it and retries.
        wait_until("the result to be retried", || {
            let n = master
                .seen()
                .iter()
                .filter(|r| finished_of(r, 21).is_some())
                .count();
            (n >= 2).then_some(())
        })
        .await;
        master
            .wait_for("the result in a heartbeat", |r| {
                heartbeat_holds(r, 21, HeldPhase::Finished { exit_code: 3 })
            })
            .await;
        master
            .wait_for("the key", |r| match r {
                SlaveRequest::Register { key, .. } => Some(*key),
                _ => None,
            })
            .await
        // The slave stops here, result unacknowledged.
    };
    let before = master.seen().len();
    ack_finished.store(true, Ordering::SeqCst);
    let _slave = Slave::start(vec![master.addr.clone()], &data);
    let (key2, node, held) = wait_until("re-registration", || {
        master.seen()[before..].iter().find_map(|r| match r {
            SlaveRequest::Register {
                key, node, held, ..
            } => Some((*key, *node, held.clone())),
            _ => None,
        })
    })
    .await;
    assert_eq!(key2, key, "same identity after restart");
    assert_eq!(node, Some(NodeId(1)), "the node id was kept");
    assert!(held
        .iter()
        .any(|h| h.task.0 == 21 && h.phase == HeldPhase::Finished { exit_code: 3 }));
    let code = wait_until("the result re-reported", || {
        master.seen()[before..]
            .iter()
            .find_map(|r| finished_of(r, 21))
    })
    .await;
    assert_eq!(code, 3);
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "a finished task is not rerun");
    let n = master.seen().len();
    wait_until("an empty heartbeat after the ack", || {
        master.seen()[n..]
            .iter()
            .any(|r| matches!(r, SlaveRequest::Heartbeat { held, .. } if held.is_empty()))
            .then_some(())
    })
    .await;
}

/// `Some` when `r` is a heartbeat holding `task` in `phase`.
fn heartbeat_holds(r: &SlaveRequest, task: u64, phase: HeldPhase) -> Option<()> {
    match r {
        SlaveRequest::Heartbeat { held, .. } => held
            .iter()
            .any(|h| h.task.0 == task && h.phase == phase)
            .then_some(()),
        _ => None,
    }
}

fn reason_of(r: &SlaveRequest, want: u64) -> Option<(i32, Option<TaskReason>)> {
    match r {
        SlaveRequest::TaskFinished {
            task,
            exit_code,
            reason,
            ..
        } if task.0 == want => Some((*exit_code, *reason)),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_task_is_adopted_after_restart_not_rerun() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    let runs = file(dir.path(), "runs.txt");
    // Each run appends its shell's pid (= its process group) and then blocks.
    let script = format!("echo $$ >> {}; sleep 100", runs.display());
    let read_runs = || -> Vec<i32> {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    {
        let _slave = Slave::start(vec![master.addr.clone()], &data);
        let conn = connect_to_slave(&master).await;
        call(
            &conn,
            SlaveCommand::Assign(assignment(31, &["sh", "-c", &script])),
        )
        .await;
        wait_until("the first run", || (read_runs().len() == 1).then_some(())).await;
        // The agent stops here; its task does not.
    }
    let first = read_runs()[0];
    assert!(!is_gone(first), "the task outlived the agent");
    let before = master.seen().len();
    let _slave = Slave::start(vec![master.addr.clone()], &data);
    let held = wait_until("re-registration", || {
        master.seen()[before..].iter().find_map(|r| match r {
            SlaveRequest::Register { held, .. } => Some(held.clone()),
            _ => None,
        })
    })
    .await;
    assert!(
        held.iter()
            .any(|h| h.task.0 == 31 && h.attempt == 1 && h.phase == HeldPhase::Running),
        "held as running after the restart: {held:?}"
    );
    let conn = connect_to_slave(&master).await;
    // Give a wrongful rerun the time to show up before checking there is none.
    let n = master.seen().len();
    wait_until("three heartbeats", || {
        let beats = master.seen()[n..]
            .iter()
            .filter(|r| matches!(r, SlaveRequest::Heartbeat { .. }))
            .count();
        (beats >= 3).then_some(())
    })
    .await;
    assert_eq!(read_runs(), vec![first], "not run again");
    assert!(!is_gone(first), "restarting the agent killed nothing");
    // Never reported started twice. It may be reported none: a start report alone waits
    // (up to `START_REPORT_HOLD`) for a finish to ride with, and this agent stopped within
    // that wait; the re-registration's held list (checked above) tells the leader instead.
    assert!(
        started_count(&master.seen(), 31) <= 1,
        "reported started once at most"
    );
    // The re-adopted task is stopped like any other.
    assert_eq!(
        call(
            &conn,
            SlaveCommand::StopTask {
                task: TaskId(31),
                attempt: 1,
                grace_ms: None,
            }
        )
        .await,
        Message::ToSlaveReply(SlaveCommandReply::Stopped)
    );
    assert_eq!(
        master
            .wait_for("task 31 finished", |r| reason_of(r, 31))
            .await,
        (-15, Some(TaskReason::Signal))
    );
    wait_until("the task to be gone", || is_gone(first).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_whose_supervisor_died_is_reported_lost_and_its_leftovers_killed() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    let runs = file(dir.path(), "runs.txt");
    let script = format!("echo $$ >> {}; sleep 100", runs.display());
    let first = {
        let _slave = Slave::start(vec![master.addr.clone()], &data);
        let conn = connect_to_slave(&master).await;
        call(
            &conn,
            SlaveCommand::Assign(assignment(41, &["sh", "-c", &script])),
        )
        .await;
        wait_until("the run", || {
            std::fs::read_to_string(&runs)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
        })
        .await
    };
    let rec: serde_json::Value = wait_until("the supervisor record", || {
        let p = data.join("attempts/task-41-1/supervisor.json");
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    })
    .await;
    let sup = rec["pid"].as_i64().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the supervisor");
    wait_until("the supervisor to die", || is_gone(sup).then_some(())).await;
    assert!(!is_gone(first), "the task itself still runs");
    let before = master.seen().len();
    let _slave = Slave::start(vec![master.addr.clone()], &data);
    let got = wait_until("the lost report", || {
        master.seen()[before..]
            .iter()
            .find_map(|r| reason_of(r, 41))
    })
    .await;
    assert_eq!(got, (-9, Some(TaskReason::Lost)));
    wait_until("the leftover task to be killed", || {
        is_gone(first).then_some(())
    })
    .await;
    let lines = std::fs::read_to_string(&runs).expect("runs");
    assert_eq!(lines.lines().count(), 1, "not run again under attempt 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_on_unknown_node() {
    let master = FakeMaster::start(Role::Leader {
        ack_finished: Arc::new(AtomicBool::new(true)),
        forget: Arc::new(AtomicUsize::new(1)),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let nodes = wait_until("a second registration", || {
        let regs: Vec<Option<NodeId>> = master
            .seen()
            .iter()
            .filter_map(|r| match r {
                SlaveRequest::Register { node, .. } => Some(*node),
                _ => None,
            })
            .collect();
        (regs.len() >= 2).then_some(regs)
    })
    .await;
    assert_eq!(nodes[0], None, "first start: no id yet");
    assert_eq!(nodes[1], Some(NodeId(1)), "re-registers under its id");
    let n = master.seen().len();
    wait_until("a heartbeat after re-registering", || {
        master.seen()[n..]
            .iter()
            .any(|r| matches!(r, SlaveRequest::Heartbeat { .. }))
            .then_some(())
    })
    .await;
}

/// Whether this host lets the tests use cgroup v1 for real (root, v1 cpu and memory mounted).
fn real_v1_cgroups() -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let v1 = Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists()
        && Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    if !(root && v1) {
        eprintln!("skipped: needs root and a cgroup v1 hierarchy");
    }
    root && v1
}

/// utime + stime of `pid` in seconds (USER_HZ is 100 on Linux).
fn cpu_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_core_limit_holds_on_real_v1_cgroups() {
    if !real_v1_cgroups() {
        return;
    }
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;
    let pidfile = dir.path().join("spin.pid");
    // A pure shell busy loop: one process, no forks, always runnable.
    let script = format!("echo $$ > {}; while :; do :; done", pidfile.display());
    let mut a = assignment(51, &["sh", "-c", &script]);
    a.resources.cpu_milli = 500;
    call(&conn, SlaveCommand::Assign(a)).await;
    let pid: i32 = wait_until("the spinner's pid", || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    let (t0, c0) = (Instant::now(), cpu_seconds(pid).expect("cpu time"));
    // Long enough to average over many 100 ms CFS periods.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (wall, cpu) = (
        t0.elapsed().as_secs_f64(),
        cpu_seconds(pid).expect("cpu time") - c0,
    );
    let rate = cpu / wall;
    eprintln!("0.5-CPU task used {cpu:.2} CPU-s in {wall:.2} s = {rate:.3} CPU-s/s");
    assert!(
        rate <= 0.6,
        "limited to 0.5 CPU, used {rate:.3} CPU-s per second"
    );
    assert!(rate > 0.0, "it ran");
    call(
        &conn,
        SlaveCommand::StopTask {
            task: TaskId(51),
            attempt: 1,
            grace_ms: None,
        },
    )
    .await;
    master
        .wait_for("task 51 finished", |r| reason_of(r, 51))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_over_its_memory_limit_ends_with_reason_oom() {
    if !real_v1_cgroups() {
        return;
    }
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;
    // dd allocates (and fills) a 256 MiB buffer: far over a 32 MiB limit.
    let mut a = assignment(
        52,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"],
    );
    a.resources.mem_mib = 32;
    call(&conn, SlaveCommand::Assign(a)).await;
    let (code, reason) = master
        .wait_for("task 52 finished", |r| reason_of(r, 52))
        .await;
    assert_eq!(reason, Some(TaskReason::Oom), "exit code {code}");
    assert_eq!(code, -9, "the OOM killer's SIGKILL");
}

/// A task's output is written on disk, not tmpfs: tmpfs pages are charged to the task's
/// memory cgroup and cannot be written back, so output kept there would count against
/// `--mem` (this task was OOM-killed when its stdout lived on tmpfs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_larger_than_the_memory_limit_does_not_count_against_it() {
    if !real_v1_cgroups() {
        return;
    }
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;
    // 96 MiB to stdout, three times a 32 MiB limit, 1 MiB at a time, each written back
    // (`sync` of the file) before the next. On disk the written pages are then clean and
    // reclaimable; on tmpfs they could never be reclaimed. Without the per-MiB write-back
    // the test measured the disk instead: cgroup v1 has no dirty-page throttling per
    // memory cgroup, so when write-back lags (a loaded CI machine) the cgroup fills with
    // dirty pages faster than reclaim can clean them, and the task is OOM-killed even on disk.
    let mut a = assignment(
        53,
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 96 ]; do head -c 1048576 /dev/zero || exit 1; \
             sync /dev/stdout || exit 1; i=$((i+1)); done",
        ],
    );
    a.resources.mem_mib = 32;
    call(&conn, SlaveCommand::Assign(a)).await;
    let (code, reason) = master
        .wait_for("task 53 finished", |r| reason_of(r, 53))
        .await;
    assert_eq!(
        (code, reason),
        (0, None),
        "output counted against the limit"
    );
    let kept = std::fs::metadata(dir.path().join("logs/task-53-1.out")).expect("kept stdout");
    assert_eq!(kept.len(), 96 * 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_assignments_is_accepted_whole_and_each_runs_once() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _slave = Slave::start(vec![master.addr.clone()], dir.path());
    let conn = connect_to_slave(&master).await;
    master
        .wait_for("heartbeat as node 1", |r| match r {
            SlaveRequest::Heartbeat { node, .. } if node.0 == 1 => Some(()),
            _ => None,
        })
        .await;
    let batch = vec![
        assignment(41, &["true"]),
        assignment(42, &["sh", "-c", "exit 3"]),
    ];
    let accepted = Message::ToSlaveReply(SlaveCommandReply::Accepted);
    assert_eq!(
        call(&conn, SlaveCommand::AssignBatch(batch.clone())).await,
        accepted
    );
    // Sent again (the master missed the answer): acknowledged, not run twice.
    assert_eq!(
        call(&conn, SlaveCommand::AssignBatch(batch)).await,
        accepted
    );
    assert_eq!(master.wait_for("task 41", |r| finished_of(r, 41)).await, 0);
    assert_eq!(master.wait_for("task 42", |r| finished_of(r, 42)).await, 3);
    let finishes = master
        .seen()
        .iter()
        .filter(|r| finished_of(r, 41).is_some() || finished_of(r, 42).is_some())
        .count();
    assert_eq!(finishes, 2, "each task reported finished once");
}

/// The attempt directories live on tmpfs (`runtime_dir`); a machine restart empties it. A
/// held attempt that may have started — here one still queued in the store, whose start
/// would not have been flushed yet — is then reported lost, never started (again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_runtime_files_are_lost_held_attempts_are_reported_lost_not_started() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    let runs = file(dir.path(), "runs.txt");
    let script = |t: u64| format!("echo {t} $$ >> {}; sleep 100", runs.display());
    let read_runs = || -> Vec<(u64, i32)> {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (t, p) = l.trim().split_once(' ')?;
                Some((t.parse().ok()?, p.parse().ok()?))
            })
            .collect()
    };
    let pool = {
        let _slave = Slave::start(vec![master.addr.clone()], &data);
        let conn = connect_to_slave(&master).await;
        call(
            &conn,
            SlaveCommand::Assign(assignment(61, &["sh", "-c", &script(61)])),
        )
        .await;
        // Needs every core: waits in the local queue behind task 61.
        let mut waits = assignment(62, &["sh", "-c", &script(62)]);
        waits.resources.cpu_milli = 2000;
        assert_eq!(
            call(&conn, SlaveCommand::Assign(waits)).await,
            Message::ToSlaveReply(SlaveCommandReply::Accepted)
        );
        wait_until("task 61 to run", || (read_runs().len() == 1).then_some(())).await;
        let rec: serde_json::Value = wait_until("the supervisor record", || {
            let p = data.join("attempts/task-61-1/supervisor.json");
            serde_json::from_slice(&std::fs::read(p).ok()?).ok()
        })
        .await;
        rec["pid"].as_i64().expect("pid") as i32
    };
    // The machine "restarts": every process dies, tmpfs is emptied; the disk stays.
    let task = read_runs()[0].1;
    for pid in [pool, task] {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        wait_until("the process to die", || is_gone(pid).then_some(())).await;
    }
    let runtime = std::fs::read_link(data.join("attempts")).expect("attempts is a symlink");
    std::fs::remove_dir_all(&runtime).expect("empty the runtime directory");
    let before = master.seen().len();
    let _slave = Slave::start(vec![master.addr.clone()], &data);
    for t in [61, 62] {
        let got = wait_until("the lost report", || {
            master.seen()[before..].iter().find_map(|r| reason_of(r, t))
        })
        .await;
        assert_eq!(got.1, Some(TaskReason::Lost), "task {t}: {got:?}");
    }
    // Give a wrongful start the time to show up before checking there is none.
    let n = master.seen().len();
    wait_until("three heartbeats", || {
        let beats = master.seen()[n..]
            .iter()
            .filter(|r| matches!(r, SlaveRequest::Heartbeat { .. }))
            .count();
        (beats >= 3).then_some(())
    })
    .await;
    assert_eq!(read_runs(), vec![(61, task)], "nothing started again");
    assert_eq!(started_count(&master.seen(), 62), 0);
}

/// The data directory a slave wrote before the attempt files moved to `attempt/` (issue 49),
/// committed as written; see its README for how it was made.
const FIXTURE_PRE_ATTEMPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/data-pre-attempt"
);

/// Copies `src` into `dst` recursively, following symlinks (the attempts directory is one,
/// to tmpfs) and skipping what git cannot hold (the pool's socket) and what names this machine
/// (`.owner`: the data directory; `.boot_id`: this boot).
fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(src).expect("read_dir").flatten() {
        let name = e.file_name();
        if name == ".owner" || name == ".boot_id" {
            continue;
        }
        let Ok(meta) = std::fs::metadata(e.path()) else {
            continue;
        };
        if meta.is_dir() {
            copy_tree(&e.path(), &dst.join(&name));
        } else if meta.is_file() {
            std::fs::copy(e.path(), dst.join(&name)).expect("copy");
        }
    }
}

/// The supervisor record of an attempt of the slave in `data`: (supervisor pid, task pid).
async fn supervisor_of(data: &Path, task: u64) -> (i32, i32) {
    let rec: serde_json::Value = wait_until("the supervisor record", || {
        let p = data.join(format!("attempts/task-{task}-1/supervisor.json"));
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    })
    .await;
    let pid = |k: &str| rec[k].as_i64().and_then(|p| i32::try_from(p).ok());
    (pid("pid").expect("pid"), pid("task_pid").expect("task_pid"))
}

/// Writes [`FIXTURE_PRE_ATTEMPT`] anew into `$HETSCHED_FIXTURE_OUT` with the build at hand:
/// task 71 finished (exit 3), its result never acknowledged; task 73 ended (exit 5) while the
/// agent was down, recorded by the pool; task 72 running when the pool and the task were
/// killed (no exit recorded). Run by hand:
/// `HETSCHED_FIXTURE_OUT=DIR cargo test -p hetsched-slave --test agent -- --ignored writes_the_pre_attempt_fixture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the committed fixture; run by hand"]
async fn writes_the_pre_attempt_fixture() {
    let out =
        PathBuf::from(std::env::var_os("HETSCHED_FIXTURE_OUT").expect("HETSCHED_FIXTURE_OUT"));
    let master = FakeMaster::start(Role::Leader {
        ack_finished: Arc::new(AtomicBool::new(false)),
        forget: Arc::default(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    let (pool, t73) = {
        let _slave = Slave::start(vec![master.addr.clone()], &data);
        let conn = connect_to_slave(&master).await;
        for (task, cmd) in [
            (71, &["sh", "-c", "exit 3"][..]),
            (72, &["sleep", "1000"][..]),
            (
                73,
                &[
                    "sh",
                    "-c",
                    "trap 'exit 5' USR1; while :; do sleep 0.1; done",
                ][..],
            ),
        ] {
            assert_eq!(
                call(&conn, SlaveCommand::Assign(assignment(task, cmd))).await,
                Message::ToSlaveReply(SlaveCommandReply::Accepted)
            );
        }
        master
            .wait_for("71's result in a heartbeat", |r| {
                heartbeat_holds(r, 71, HeldPhase::Finished { exit_code: 3 })
            })
            .await;
        let (pool, _) = supervisor_of(&data, 72).await;
        let (_, t73) = supervisor_of(&data, 73).await;
        (pool, t73)
        // The agent stops here.
    };
    let (_, t72) = supervisor_of(&data, 72).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(t73),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .expect("signal task 73");
    wait_until("73's recorded exit", || {
        data.join("attempts/task-73-1/status.json")
            .exists()
            .then_some(())
    })
    .await;
    for pid in [pool, t72] {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill");
        wait_until("the process to die", || is_gone(pid).then_some(())).await;
    }
    copy_tree(&data, &out);
}

/// A data directory written before the attempt files moved (the committed fixture) is read
/// by this build as after an agent restart: the unacknowledged result is reported again, the
/// exit the pool recorded while the agent was down is reported, and the attempt whose pool
/// died with no record is reported lost; nothing is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_the_pre_attempt_slave_is_read() {
    let master = FakeMaster::start(FakeMaster::leader()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = file(dir.path(), "data");
    copy_tree(Path::new(FIXTURE_PRE_ATTEMPT), &data);
    // The one machine-specific value the slave acts on: the leader it knew (a fake master's
    // port, long gone, perhaps another test's now). Point it at this test's master.
    {
        let store = hetsched_slave::store::Store::open(&data.join("db")).expect("open store");
        store.set_leader_hint(&master.addr).expect("hint");
        store.flush().await.expect("flush");
    }
    let _slave = Slave::start(vec![master.addr.clone()], &data);
    let held = master
        .wait_for("registration", |r| match r {
            SlaveRequest::Register { held, .. } => Some(held.clone()),
            _ => None,
        })
        .await;
    let phase = |t: u64| held.iter().find(|h| h.task.0 == t).map(|h| h.phase);
    assert_eq!(
        phase(71),
        Some(HeldPhase::Finished { exit_code: 3 }),
        "{held:?}"
    );
    assert_eq!(phase(72), Some(HeldPhase::Running), "{held:?}");
    assert_eq!(phase(73), Some(HeldPhase::Running), "{held:?}");
    for (t, want) in [
        (71, (3, Some(TaskReason::Exit))),
        (73, (5, Some(TaskReason::Exit))),
        (72, (-9, Some(TaskReason::Lost))),
    ] {
        let got = master
            .wait_for("the task's result", |r| reason_of(r, t))
            .await;
        assert_eq!(got, want, "task {t}");
    }
    let n = master.seen().len();
    wait_until("an empty heartbeat after the acks", || {
        master.seen()[n..]
            .iter()
            .any(|r| matches!(r, SlaveRequest::Heartbeat { held, .. } if held.is_empty()))
            .then_some(())
    })
    .await;
    for t in [71, 72, 73] {
        assert_eq!(started_count(&master.seen(), t), 0, "task {t} not started");
    }
}
