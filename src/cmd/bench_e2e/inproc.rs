//! `--in-process-slaves`: slaves inside the bench process that speak the real wire protocol
//! (register, heartbeat with what they hold, accept assignments, report started and
//! finished) but start no process; what they see is recorded for the measurements.

use super::client::BenchClient;
use anyhow::Context;
use hetsched_common::protocol::{
    Assignment, ErrorKind, ErrorReply, HeldPhase, HeldTask, Message, SlaveCommand,
    SlaveCommandReply, SlaveRequest, SlaveResponse, TaskReport, MAX_HEARTBEAT_MS,
};
use hetsched_common::wire::{self, FrameLimits, Handler};
use hetsched_common::{Attempt, NodeId, NodeResources, TaskId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What the in-process slaves record, shared by all of them.
#[derive(Default)]
pub(crate) struct Seen {
    /// First arrival of each task's assignment.
    pub(crate) running: HashMap<TaskId, Instant>,
    /// Tasks whose finish report the leader acknowledged.
    pub(crate) completed: HashSet<TaskId>,
    /// Arrival of the last new assignment.
    pub(crate) last_placed: Option<Instant>,
    /// Assignment messages received (a batch counts once).
    pub(crate) dispatch_messages: u64,
    /// Every distinct (slave, attempt) that received each task: more than one is a task
    /// placed twice (`bench scale` counts them).
    pub(crate) received: HashMap<TaskId, Vec<(u32, Attempt)>>,
    /// Heartbeats sent by all the slaves.
    pub(crate) heartbeats: u64,
}

pub(crate) type SeenRef = Arc<Mutex<Seen>>;

pub(crate) fn lock(seen: &SeenRef) -> std::sync::MutexGuard<'_, Seen> {
    match seen.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One in-process slave: a listener for the masters' commands and a link task.
struct InProcSlave {
    /// Its number (0-based), as in its name `inproc-<index + 1>`.
    index: u32,
    reports: mpsc::UnboundedSender<(TaskId, Attempt)>,
    held: Arc<Mutex<BTreeMap<(TaskId, Attempt), ()>>>,
    /// Attempts whose finish the leader acknowledged: a late re-sent assignment of one is
    /// acknowledged without running again, as a real slave's done records do.
    done: Mutex<HashSet<(TaskId, Attempt)>>,
    /// S0.3: queued assignments waiting for the leader's promotion (asked with every
    /// delivery; started once promoted, as a real slave does).
    waiting: Mutex<Vec<(TaskId, Attempt)>>,
    seen: SeenRef,
}

impl InProcSlave {
    /// Accepts an assignment (again, for a duplicate) and queues its reports.
    fn accept(&self, a: &Assignment) {
        let done = match self.done.lock() {
            Ok(g) => g.contains(&(a.task, a.attempt)),
            Err(p) => p.into_inner().contains(&(a.task, a.attempt)),
        };
        if done {
            return;
        }
        let new = {
            let mut held = match self.held.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            held.insert((a.task, a.attempt), ()).is_none()
        };
        if new {
            let mut seen = lock(&self.seen);
            let r = seen.received.entry(a.task).or_default();
            if !r.contains(&(self.index, a.attempt)) {
                r.push((self.index, a.attempt));
            }
        }
        if new && a.queued {
            let mut w = match self.waiting.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            w.push((a.task, a.attempt));
            return;
        }
        if new {
            self.start(a.task, a.attempt);
        }
    }

    /// Runs (task, attempt): recorded, then reported started and finished.
    fn start(&self, task: TaskId, attempt: Attempt) {
        {
            let now = Instant::now();
            let mut s = lock(&self.seen);
            s.running.entry(task).or_insert(now);
            s.last_placed = Some(now);
            drop(s);
            let _ = self.reports.send((task, attempt));
        }
    }

    /// The queued attempts to ask the leader to start.
    fn asks(&self) -> Vec<(TaskId, Attempt)> {
        match self.waiting.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The leader promoted these: they start.
    fn promoted(&self, tasks: &[(TaskId, Attempt)]) {
        {
            let mut w = match self.waiting.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            w.retain(|t| !tasks.contains(t));
        }
        for &(task, attempt) in tasks {
            self.start(task, attempt);
        }
    }
}

/// The certificate of in-process slave `i` (named as it registers), issued from the
/// launcher's CA when the cluster runs secured (this process then has a TLS setup).
fn in_process_certs(i: u32) -> anyhow::Result<Option<Arc<hetsched_common::wire::tls::TlsSetup>>> {
    use hetsched_common::certs::Role;
    if hetsched_common::wire::tls::current().is_none() {
        return Ok(None);
    }
    let ca = crate::cmd::local::security::process_ca()?;
    let name = format!("inproc-{}", i + 1);
    let dir = ca.join("inproc").join(&name);
    crate::cmd::local::security::issue(&ca, Role::Slave, &name, &dir)?;
    let setup = hetsched_common::wire::tls::load(&dir, Role::Slave, Some(&name))?;
    Ok(Some(Arc::new(setup)))
}

pub(crate) async fn start_in_process_slave(
    i: u32,
    masters: Vec<String>,
    cpus: u32,
    seen: SeenRef,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind an in-process slave")?;
    let addr = listener.local_addr()?.to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let slave = Arc::new(InProcSlave {
        index: i,
        reports: tx,
        held: Arc::new(Mutex::new(BTreeMap::new())),
        done: Mutex::new(HashSet::new()),
        waiting: Mutex::new(Vec::new()),
        seen: seen.clone(),
    });
    // On a secured cluster an in-process slave has its own slave certificate, as a real one.
    let tls = in_process_certs(i)?;
    let s = slave.clone();
    let handler: Handler = Arc::new(move |msg, _peer| {
        let s = s.clone();
        Box::pin(async move {
            Some(match msg {
                Message::ToSlave(SlaveCommand::Assign(a)) => {
                    lock(&s.seen).dispatch_messages += 1;
                    s.accept(&a);
                    Message::ToSlaveReply(SlaveCommandReply::Accepted)
                }
                Message::ToSlave(SlaveCommand::AssignBatch(batch)) => {
                    lock(&s.seen).dispatch_messages += 1;
                    for a in &batch {
                        s.accept(a);
                    }
                    Message::ToSlaveReply(SlaveCommandReply::Accepted)
                }
                Message::ToSlave(SlaveCommand::StopTask { .. }) => {
                    Message::ToSlaveReply(SlaveCommandReply::Stopped)
                }
                _ => Message::Error(ErrorReply::new(
                    ErrorKind::Unsupported,
                    "an in-process bench slave serves assignments only",
                )),
            })
        })
    });
    let served = tls.clone();
    let commands = handler.clone();
    tokio::spawn(async move {
        let _ = match served {
            Some(t) => wire::serve_tls(listener, FrameLimits::default(), t, handler).await,
            None => wire::serve(listener, FrameLimits::default(), handler).await,
        };
    });
    let me = LinkSlave {
        index: i,
        addr,
        cpus,
        commands,
    };
    tokio::spawn(slave_link(me, masters, slave, rx, tls));
    Ok(())
}

/// What an in-process slave's link says about it.
struct LinkSlave {
    index: u32,
    /// Its port's address.
    addr: String,
    cpus: u32,
    /// Answers the leader's commands on the link, as on the port.
    commands: Handler,
}

/// Registers, heartbeats, takes the leader's commands on its link (as a real slave does,
/// `SlaveRequest::Attach`), and reports every accepted task as started and finished
/// (exit 0).
async fn slave_link(
    me: LinkSlave,
    masters: Vec<String>,
    slave: Arc<InProcSlave>,
    mut rx: mpsc::UnboundedReceiver<(TaskId, Attempt)>,
    tls: Option<Arc<hetsched_common::wire::tls::TlsSetup>>,
) {
    let LinkSlave {
        index: i,
        addr,
        cpus,
        commands,
    } = me;
    // A slave's patience, not a client's: a handshake with a busy leader may take seconds,
    // and one given up is one begun again.
    let mut client = BenchClient::new(masters)
        .with_connect_timeout(Duration::from_secs(10))
        .with_commands(commands);
    if let Some(t) = tls {
        client = client.with_tls(t);
    }
    let mut attached: Option<u64> = None;
    let key = 0xE2E0_0000 + i as u64 + ((std::process::id() as u64) << 32);
    let register = |held: Vec<HeldTask>| {
        Message::Slave(SlaveRequest::Register {
            key,
            node: None,
            name: format!("inproc-{}", i + 1),
            addr: addr.clone(),
            capacity: NodeResources {
                cpu_milli: cpus as u64 * 1000,
                mem_mib: 1 << 20,
                ..Default::default()
            },
            labels: BTreeMap::new(),
            held,
            partitions: Vec::new(),
        })
    };
    let mut node: Option<NodeId> = None;
    // Spread over the period by slave number, as independent slaves' heartbeats are: a
    // thousand slaves started together must not beat in one burst.
    let phase = Duration::from_millis((i as u64).wrapping_mul(397) % 400);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + phase, OWN_PERIOD);
    // Issue 54: the period the leader asks for, followed as a real slave's link does.
    let (mut asked, mut period) = (Duration::ZERO, OWN_PERIOD);
    let mut last_beat = Instant::now();
    let mut queue: Vec<(TaskId, Attempt)> = Vec::new();
    loop {
        if node.is_none() {
            // A few registrations at a time per process: thousands of TLS handshakes at
            // once outlast their deadlines, are retried, and keep the masters from
            // registering anyone (or from holding an election).
            let _turn = registering().acquire().await;
            match client
                .call(register(held_now(&slave)), Duration::from_secs(60))
                .await
            {
                Ok(Message::SlaveReply(SlaveResponse::Registered { node: n })) => node = Some(n),
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(n) = node else { continue };
        tokio::select! {
            _ = beat.tick() => {
                if !heartbeat(&mut client, &slave, n, &mut last_beat, &mut asked).await {
                    node = None;
                } else if attached != Some(client.connections_opened()) {
                    let m = Message::Slave(SlaveRequest::Attach { node: n });
                    if let Ok(Message::SlaveReply(SlaveResponse::Ack)) =
                        client.call(m, Duration::from_secs(5)).await
                    {
                        attached = Some(client.connections_opened());
                    }
                }
            }
            r = rx.recv() => match r {
                Some(r) => queue.push(r),
                None => return,
            },
        }
        while let Ok(r) = rx.try_recv() {
            queue.push(r);
        }
        if OWN_PERIOD.max(asked) != period {
            period = OWN_PERIOD.max(asked);
            beat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        }
        if queue.is_empty() && !slave.asks().is_empty() {
            // Nothing to report, but queued tasks to ask for (as a heartbeat would).
            deliver(&mut client, &slave, n, &[]).await;
        }
        let mut failed = Vec::new();
        for chunk in std::mem::take(&mut queue).chunks(2048) {
            if !deliver(&mut client, &slave, n, chunk).await {
                failed.extend_from_slice(chunk);
            }
            // A long backlog must not starve liveness.
            if last_beat.elapsed() > period
                && !heartbeat(&mut client, &slave, n, &mut last_beat, &mut asked).await
            {
                node = None;
            }
        }
        queue = failed;
    }
}

/// The in-process slaves' own heartbeat period (a real slave's default).
const OWN_PERIOD: Duration = Duration::from_millis(400);

/// Registrations one process has in flight at once.
const REGISTERING_AT_ONCE: usize = 32;

fn registering() -> &'static tokio::sync::Semaphore {
    static TURNS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    TURNS.get_or_init(|| tokio::sync::Semaphore::new(REGISTERING_AT_ONCE))
}

/// What an in-process slave holds: everything accepted and not acknowledged finished.
fn held_now(slave: &InProcSlave) -> Vec<HeldTask> {
    let held = match slave.held.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let waiting = slave.asks();
    held.keys()
        .map(|&(task, attempt)| HeldTask {
            task,
            attempt,
            phase: if waiting.contains(&(task, attempt)) {
                HeldPhase::Queued
            } else {
                HeldPhase::Running
            },
        })
        .collect()
}

/// One heartbeat; false when the leader does not know the node (register again). The
/// period the leader asks for (issue 54; zero: the slave's own) goes to `asked`.
async fn heartbeat(
    client: &mut BenchClient,
    slave: &InProcSlave,
    node: NodeId,
    last_beat: &mut Instant,
    asked: &mut Duration,
) -> bool {
    let hb = Message::Slave(SlaveRequest::Heartbeat {
        node,
        held: held_now(slave),
        samples: Vec::new(),
        engine_load: Vec::new(),
        links: Vec::new(),
        images: Vec::new(),
    });
    *last_beat = Instant::now();
    lock(&slave.seen).heartbeats += 1;
    match client.call(hb, Duration::from_secs(5)).await {
        Ok(Message::Error(ErrorReply {
            kind: ErrorKind::UnknownNode,
            ..
        })) => false,
        Ok(Message::SlaveReply(SlaveResponse::HeartbeatAck { heartbeat_ms, .. })) => {
            *asked = Duration::from_millis(heartbeat_ms.min(MAX_HEARTBEAT_MS));
            true
        }
        _ => true,
    }
}

/// Reports the tasks as started and finished (exit 0), all in one message as a real
/// slave's link batches them; what is not acknowledged is reconciled through heartbeats.
async fn deliver(
    client: &mut BenchClient,
    slave: &InProcSlave,
    node: NodeId,
    tasks: &[(TaskId, Attempt)],
) -> bool {
    let mut reports: Vec<TaskReport> = tasks
        .iter()
        .flat_map(|&(task, attempt)| {
            [
                TaskReport::Started { task, attempt },
                TaskReport::Finished {
                    task,
                    attempt,
                    exit_code: 0,
                    reason: None,
                    reason_detail: None,
                    usage: None,
                },
            ]
        })
        .collect();
    // S0.3: the room these ends free goes to queued tasks in the same entry.
    reports.extend(
        slave
            .asks()
            .into_iter()
            .map(|(task, attempt)| TaskReport::WantsStart { task, attempt }),
    );
    let msg = Message::Slave(SlaveRequest::TaskReports { node, reports });
    let reply = client.call(msg, Duration::from_secs(30)).await;
    if let Ok(Message::SlaveReply(SlaveResponse::Promoted { tasks })) = &reply {
        slave.promoted(tasks);
    }
    if let Ok(Message::SlaveReply(SlaveResponse::Ack | SlaveResponse::Promoted { .. })) = reply {
        // Done before no longer held: a re-send in between is never taken as new.
        if let Ok(mut d) = slave.done.lock() {
            d.extend(tasks.iter().copied());
        }
        if let Ok(mut h) = slave.held.lock() {
            for t in tasks {
                h.remove(t);
            }
        }
        lock(&slave.seen)
            .completed
            .extend(tasks.iter().map(|t| t.0));
        true
    } else {
        false
    }
}
