use super::{ProposeFailure, Proposed, ReportGroups, IN_FLIGHT};
use hetsched_common::protocol::{ErrorKind, ErrorReply, TaskReport};
use hetsched_common::{NodeId, TaskId};
use hetsched_master_core::state::{Command, Outcome};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// A stand-in for Raft: records each proposed command, waits for a permit from `gate`
/// before it "applies", and answers with `answer`'s verdict.
struct FakeLog {
    proposed: Arc<Mutex<Vec<Command>>>,
    gate: Arc<Semaphore>,
}

impl FakeLog {
    fn start(answer: fn(&Command) -> Proposed) -> (Self, ReportGroups) {
        let proposed = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        let (p, g) = (proposed.clone(), gate.clone());
        let groups = ReportGroups::start(Box::new(move |c: Command| {
            let (p, g) = (p.clone(), g.clone());
            Box::pin(async move {
                let verdict = answer(&c);
                p.lock().expect("log").push(c);
                if let Ok(permit) = g.acquire().await {
                    permit.forget();
                }
                verdict
            })
        }));
        (Self { proposed, gate }, groups)
    }

    fn open(&self) {
        self.gate.add_permits(1_000);
    }

    fn proposed(&self) -> Vec<Command> {
        self.proposed.lock().expect("log").clone()
    }

    async fn wait_for_proposals(&self, n: usize) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while self.proposed().len() < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{n} proposals: got {:?}", self.proposed());
    }
}

fn finished(task: u64) -> TaskReport {
    TaskReport::Finished {
        task: TaskId(task),
        attempt: 1,
        exit_code: 0,
        reason: None,
        reason_detail: None,
        usage: None,
    }
}

fn applied(_: &Command) -> Proposed {
    Ok(Outcome::TaskUpdated)
}

/// Fills every in-flight place with one batch each, then sends `n` more: they wait.
async fn busy_then(
    log: &FakeLog,
    groups: &ReportGroups,
    n: u64,
) -> Vec<tokio::task::JoinHandle<Result<Outcome, ErrorReply>>> {
    let mut calls = Vec::new();
    for i in 0..IN_FLIGHT as u64 {
        let g = groups.clone();
        calls.push(tokio::spawn(async move {
            g.propose(NodeId(i + 1), vec![finished(i)]).await
        }));
        // One at a time: each goes alone.
        log.wait_for_proposals(i as usize + 1).await;
    }
    let sent = Arc::new(AtomicUsize::new(0));
    for i in 0..n {
        let (g, sent) = (groups.clone(), sent.clone());
        calls.push(tokio::spawn(async move {
            // Counted and sent in one poll: once the count is n, every batch waits.
            sent.fetch_add(1, Ordering::SeqCst);
            g.propose(NodeId(100 + i), vec![finished(100 + i)]).await
        }));
    }
    while sent.load(Ordering::SeqCst) < n as usize {
        tokio::task::yield_now().await;
    }
    calls
}

#[tokio::test]
async fn a_batch_alone_is_proposed_at_once_as_its_own_entry() {
    let (log, groups) = FakeLog::start(applied);
    log.open();
    let r = groups.propose(NodeId(7), vec![finished(1)]).await;
    assert_eq!(r, Ok(Outcome::TaskUpdated));
    assert_eq!(
        log.proposed(),
        vec![Command::TaskReports {
            node: NodeId(7),
            reports: vec![finished(1)],
        }]
    );
}

#[tokio::test]
async fn batches_that_arrive_while_entries_commit_go_out_together_in_order() {
    let (log, groups) = FakeLog::start(applied);
    let calls = busy_then(&log, &groups, 5).await;
    assert_eq!(log.proposed().len(), IN_FLIGHT, "the five wait");
    log.open();
    for c in calls {
        assert_eq!(c.await.expect("join"), Ok(Outcome::TaskUpdated));
    }
    let proposed = log.proposed();
    assert_eq!(proposed.len(), IN_FLIGHT + 1, "{proposed:?}");
    let Command::GroupedTaskReports { groups } = &proposed[IN_FLIGHT] else {
        panic!("one grouped entry: {proposed:?}");
    };
    let nodes: Vec<u64> = groups.iter().map(|g| g.node.0).collect();
    assert_eq!(nodes, [100, 101, 102, 103, 104]);
    assert_eq!(groups[2].reports, vec![finished(102)]);
}

#[tokio::test]
async fn a_group_too_large_for_one_entry_goes_batch_by_batch() {
    fn refuse_groups(c: &Command) -> Proposed {
        match c {
            Command::GroupedTaskReports { .. } => Err(ProposeFailure {
                reply: ErrorReply::new(ErrorKind::Invalid, "too large"),
                too_large: Some(Box::new(c.clone())),
            }),
            _ => Ok(Outcome::TaskUpdated),
        }
    }
    let (log, groups) = FakeLog::start(refuse_groups);
    let calls = busy_then(&log, &groups, 3).await;
    log.open();
    for c in calls {
        assert_eq!(c.await.expect("join"), Ok(Outcome::TaskUpdated));
    }
    let kinds: Vec<&str> = log
        .proposed()
        .iter()
        .map(|c| match c {
            Command::GroupedTaskReports { .. } => "grouped",
            Command::TaskReports { .. } => "alone",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["alone", "alone", "grouped", "alone", "alone", "alone"]
    );
}

#[tokio::test]
async fn every_batch_of_an_entry_that_did_not_apply_gets_its_error() {
    fn lose_groups(c: &Command) -> Proposed {
        match c {
            Command::GroupedTaskReports { .. } => Err(ProposeFailure {
                reply: ErrorReply::new(ErrorKind::Unknown, "leadership lost"),
                too_large: None,
            }),
            _ => Ok(Outcome::TaskUpdated),
        }
    }
    let (log, groups) = FakeLog::start(lose_groups);
    let calls = busy_then(&log, &groups, 3).await;
    log.open();
    let answers: Vec<_> = futures_join(calls).await;
    assert_eq!(
        answers[..IN_FLIGHT],
        vec![Ok(Outcome::TaskUpdated); IN_FLIGHT]
    );
    for a in &answers[IN_FLIGHT..] {
        let e = a.as_ref().expect_err("the grouped entry failed");
        assert_eq!(e.kind, ErrorKind::Unknown, "{e:?}");
    }
}

async fn futures_join(
    calls: Vec<tokio::task::JoinHandle<Result<Outcome, ErrorReply>>>,
) -> Vec<Result<Outcome, ErrorReply>> {
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.expect("join"));
    }
    out
}
