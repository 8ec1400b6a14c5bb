//! When the link holds pending reports back to batch them (`Link::hold`).

use super::*;
use hetsched_common::TaskReason;

fn link(dir: &std::path::Path) -> Link {
    let (agent, _rx) = mpsc::unbounded_channel();
    link_to(dir, "127.0.0.1:1", agent)
}

fn link_to(dir: &std::path::Path, master: &str, agent: mpsc::UnboundedSender<AgentMsg>) -> Link {
    let store = Store::open(dir).expect("store");
    let me = Identity {
        key: 1,
        name: "s".into(),
        addr: "127.0.0.1:1".into(),
        capacity: NodeResources::default(),
        partitions: Vec::new(),
        labels: BTreeMap::new(),
    };
    let timing = LinkTiming {
        heartbeat: Duration::from_secs(1),
        call_timeout: Duration::from_secs(1),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
    };
    let mut l = Link::new(vec![master.into()], me, timing, store, agent);
    l.registered = true;
    l
}

/// A port for a fake master: its listener (served once the test has its handler) and its
/// address.
async fn fake_master_port() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind fake master");
    let addr = listener.local_addr().expect("addr").to_string();
    (listener, addr)
}

/// The agent's side of a link whose slave holds nothing and has nothing queued to ask for.
fn idle_agent() -> mpsc::UnboundedSender<AgentMsg> {
    let (agent, mut agent_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = agent_rx.recv().await {
            match m {
                AgentMsg::Held { reply } => {
                    let _ = reply.send(Vec::new());
                }
                AgentMsg::Asks { reply } => {
                    let _ = reply.send(Vec::new());
                }
                _ => {}
            }
        }
    });
    agent
}

fn started(task: u64) -> TaskReport {
    TaskReport::Started {
        task: TaskId(task),
        attempt: 1,
    }
}

fn finished(task: u64) -> TaskReport {
    TaskReport::Finished {
        task: TaskId(task),
        attempt: 1,
        exit_code: 0,
        reason: None::<TaskReason>,
        reason_detail: None,
        usage: None,
    }
}

#[test]
fn start_reports_wait_for_a_finish_and_finishes_linger_briefly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = link(dir.path());
    assert_eq!(l.hold(false), None, "nothing pending: nothing to hold");
    l.pending.push_back(started(1));
    assert_eq!(
        l.hold(false),
        Some(START_REPORT_HOLD),
        "a start alone waits"
    );
    assert_eq!(l.hold(true), None, "a heartbeat round sends it");
    l.pending.push_back(finished(1));
    assert_eq!(l.hold(false), Some(REPORT_LINGER), "a finish goes soon");
    l.registered = false;
    assert_eq!(l.hold(false), None, "registration is not held back");
    l.registered = true;
    for t in 2..FULL_BATCH as u64 {
        l.pending.push_back(finished(t));
    }
    assert_eq!(l.pending.len(), FULL_BATCH);
    assert_eq!(l.hold(false), None, "a full batch goes at once");
}

/// The agent writes a result without flushing and hands its report over at once
/// (`agent/commit.rs`): the link must make it durable before the report leaves. The fake
/// master flushes the slave's store the moment a batch arrives and records how many bytes
/// that flush still found unflushed: none, if the link flushed first.
#[tokio::test]
async fn a_finish_report_leaves_only_once_its_result_is_flushed() {
    use crate::store::{StoredPhase, StoredTask};
    use hetsched_common::wire::{self, FrameLimits, Handler};
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().expect("tempdir");
    let (listener, addr) = fake_master_port().await;
    let mut l = link_to(dir.path(), &addr, idle_agent());
    l.node = Some(NodeId(1));
    let unflushed_at_arrival: Arc<Mutex<Vec<usize>>> = Arc::default();
    let seen = unflushed_at_arrival.clone();
    let store = l.store.clone();
    let handler: Handler = Arc::new(move |msg, _peer| {
        let seen = seen.clone();
        let store = store.clone();
        Box::pin(async move {
            if let Message::Slave(SlaveRequest::TaskReports { .. }) = msg {
                seen.lock().expect("seen").push(store.flush_counting());
            }
            Some(Message::SlaveReply(SlaveResponse::Ack))
        })
    });
    tokio::spawn(wire::serve(listener, FrameLimits::default(), handler));

    let assignment = crate::store::test_assignment(1, 1);
    l.store
        .put_task(&StoredTask {
            seq: 1,
            assignment,
            phase: StoredPhase::Finished {
                exit_code: 0,
                reason: None,
                usage: None,
                detail: None,
            },
        })
        .expect("write the result");
    l.pending.push_back(finished(1));
    l.deliver().await.expect("deliver");
    assert_eq!(
        *unflushed_at_arrival.lock().expect("seen"),
        vec![0],
        "one batch arrived, and the result it reports was durable by then"
    );
}

/// The link offers the leader its connection for commands once per connection: the fake
/// master keeps the way back it got with `Attach` and calls a command over it, which the
/// link's handler answers; an older master (answering `Malformed`) turns the offer off.
#[tokio::test]
async fn the_link_takes_commands_once_attached_and_stops_offering_to_older_masters() {
    use hetsched_common::protocol::{ErrorReply, SlaveCommand, SlaveCommandReply};
    use hetsched_common::wire::{self, Connection, FrameLimits, Handler};
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().expect("tempdir");
    let (listener, addr) = fake_master_port().await;
    let (agent, _agent_rx) = mpsc::unbounded_channel();
    let commands: Handler = Arc::new(|msg, _peer| {
        Box::pin(async move {
            matches!(msg, Message::ToSlave(SlaveCommand::StopTask { .. }))
                .then_some(Message::ToSlaveReply(SlaveCommandReply::Stopped))
        })
    });
    let mut l = link_to(dir.path(), &addr, agent).with_commands(commands);
    l.node = Some(NodeId(1));
    let links: Arc<Mutex<Vec<Arc<Connection>>>> = Arc::default();
    let older = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (kept, old) = (links.clone(), older.clone());
    let master: Handler = Arc::new(move |msg, peer| {
        let (kept, old) = (kept.clone(), old.clone());
        Box::pin(async move {
            if old.load(std::sync::atomic::Ordering::SeqCst) {
                return Some(Message::Error(ErrorReply::new(
                    ErrorKind::Malformed,
                    "unknown variant `Attach`",
                )));
            }
            if let Message::Slave(SlaveRequest::Attach { node: NodeId(1) }) = msg {
                kept.lock()
                    .expect("links")
                    .push(peer.link.expect("way back"));
            }
            Some(Message::SlaveReply(SlaveResponse::Ack))
        })
    });
    tokio::spawn(wire::serve(listener, FrameLimits::default(), master));

    l.offer_commands().await.expect("offer");
    l.offer_commands().await.expect("offer again");
    let back = {
        let got = links.lock().expect("links");
        assert_eq!(got.len(), 1, "offered once on one connection");
        got[0].clone()
    };
    let stop = Message::ToSlave(SlaveCommand::StopTask {
        task: TaskId(3),
        attempt: 1,
        grace_ms: None,
    });
    let r = back
        .call(stop, Duration::from_secs(5))
        .await
        .expect("command");
    assert!(
        matches!(r, Message::ToSlaveReply(SlaveCommandReply::Stopped)),
        "{r:?}"
    );
    // A new connection (the old one gone) to a master that does not know `Attach`.
    older.store(true, std::sync::atomic::Ordering::SeqCst);
    l.client = LeaderClient::new(vec![addr.clone()])
        .with_commands(Arc::new(|_, _| Box::pin(async { None })));
    l.offer_commands().await.expect("offer to an older master");
    assert!(!l.attach, "an older master turns the offer off");
}

/// Issue 54: a leader with many slaves asks each to beat less often. The link beats at the
/// longer of its own period and the asked one, back to its own when a leader asks nothing
/// (an older master, or a smaller cluster), and never slower than `MAX_HEARTBEAT_MS`.
#[tokio::test]
async fn the_heartbeat_period_follows_what_the_leader_asks_within_bounds() {
    use hetsched_common::wire::{self, FrameLimits, Handler};
    use hetsched_common::MasterId;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().expect("tempdir");
    let (listener, addr) = fake_master_port().await;
    let asks = Arc::new(AtomicU64::new(0));
    let a = asks.clone();
    let master: Handler = Arc::new(move |msg, _peer| {
        let a = a.clone();
        Box::pin(async move {
            matches!(msg, Message::Slave(SlaveRequest::Heartbeat { .. })).then(|| {
                Message::SlaveReply(SlaveResponse::HeartbeatAck {
                    leader: MasterId(1),
                    heartbeat_ms: a.load(Ordering::SeqCst),
                })
            })
        })
    });
    tokio::spawn(wire::serve(listener, FrameLimits::default(), master));
    let mut l = link_to(dir.path(), &addr, idle_agent());
    l.node = Some(NodeId(1));
    let own = Duration::from_secs(1);
    for (asked, period) in [
        (0, own),
        (500, own),
        (4_000, Duration::from_secs(4)),
        (u64::MAX, Duration::from_millis(MAX_HEARTBEAT_MS)),
        (0, own),
    ] {
        asks.store(asked, Ordering::SeqCst);
        l.heartbeat().await.expect("heartbeat");
        assert_eq!(l.heartbeat_period(), period, "asked {asked} ms");
    }
}
