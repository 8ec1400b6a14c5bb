//! When the link holds pending reports back to batch them (`Link::hold`).

use super::*;
use hetsched_common::TaskReason;

fn link(dir: &std::path::Path) -> Link {
    let store = Store::open(dir).expect("store");
    let (agent, _rx) = mpsc::unbounded_channel();
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
    let mut l = Link::new(vec!["127.0.0.1:1".into()], me, timing, store, agent);
    l.registered = true;
    l
}

fn started(task: u64) -> Report {
    Report::Started {
        task: TaskId(task),
        attempt: 1,
    }
}

fn finished(task: u64) -> Report {
    Report::Finished {
        task: TaskId(task),
        attempt: 1,
        exit_code: 0,
        reason: None::<TaskReason>,
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
