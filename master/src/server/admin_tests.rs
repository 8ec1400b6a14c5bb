//! The admin requests' decisions: which are refused off the admin port, the fault
//! configuration, page sizes, membership checks and the answers.

use super::*;
use crate::server::test_state::TestState;
use hetsched_common::protocol::BugSpec;
use hetsched_master_core::state::Command;

#[test]
fn benchmark_fault_bug_and_export_requests_are_refused_on_the_cluster_port() {
    let refused = [
        ClientRequest::BenchCheck {
            client: 1,
            acked: Vec::new(),
        },
        ClientRequest::SetFaults(FaultSpec::default()),
        ClientRequest::SetBugs(BugSpec::default()),
        ClientRequest::ExportLog {
            from: 0,
            max_bytes: 0,
        },
    ];
    for req in &refused {
        let e = refuse_off_admin(req).expect("admin only");
        assert_eq!(e.kind, ErrorKind::Forbidden, "exit 3, HTTP 403");
        assert!(e.message.contains("--admin"), "{}", e.message);
    }
    assert_eq!(refuse_off_admin(&ClientRequest::Usage), None);
}

#[test]
fn faults_are_clamped_and_pages_bounded() {
    let f = FaultSpec {
        seed: 3,
        drop_rate: 7.0,
        delay_ms: 20,
        cut: vec![MasterId(2)],
        isolated: false,
    };
    let c = Admin::faults(&f);
    assert_eq!(c.drop_rate, 1.0);
    assert_eq!(c.delay, std::time::Duration::from_millis(20));
    assert_eq!(c.cut.into_iter().collect::<Vec<_>>(), vec![2]);
    assert_eq!(Admin::page_bytes(0), DEFAULT_PAGE);
    assert_eq!(Admin::page_bytes(10), 10);
    assert_eq!(Admin::page_bytes(u64::MAX), MAX_PAGE);
    let page = hetsched_consensus::LogPage {
        snapshot: Some((4, vec![1, 2])),
        entries: vec![(5, vec![9])],
        next: 6,
        applied: 5,
    };
    let ClientResponse::LogPage(p) = Admin::log_page(MasterId(1), page) else {
        panic!("not a page");
    };
    assert_eq!((p.master, p.next, p.applied), (MasterId(1), 6, 5));
    assert_eq!(p.snapshot.map(|s| s.index), Some(4));
    assert_eq!(p.entries[0].command.as_slice(), &[9]);
}

#[test]
fn members_are_checked_before_they_are_added_and_the_leader_is_marked() {
    assert_eq!(
        Admin::member_to_add(MasterId(0), "127.0.0.1:1").map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
    assert_eq!(
        Admin::member_to_add(MasterId(4), "no port").map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
    assert_eq!(Admin::member_to_add(MasterId(4), "127.0.0.1:7"), Ok(()));
    let member = |id| hetsched_consensus::Member {
        id,
        addr: None,
        voter: true,
        match_index: None,
    };
    let ClientResponse::Members(m) = Admin::members(vec![member(1), member(2)], Some(2)) else {
        panic!("not members");
    };
    assert_eq!(
        m.iter().map(|m| (m.id.0, m.leader)).collect::<Vec<_>>(),
        vec![(1, false), (2, true)]
    );
}

#[test]
fn a_bench_check_names_the_acknowledged_proposals_that_did_not_apply() {
    let mut t = TestState::new();
    for seq in [1, 2, 4] {
        t.apply(Command::Bench {
            client: 9,
            seq,
            record: true,
            payload: Default::default(),
        });
    }
    let a = Admin::new(&t.state);
    assert_eq!(
        a.bench_checked(9, vec![1, 2, 3, 4]),
        ClientResponse::BenchChecked {
            applied: 3,
            missing: vec![3]
        }
    );
    assert_eq!(
        a.bench_checked(8, vec![1]),
        ClientResponse::BenchChecked {
            applied: 0,
            missing: vec![1]
        }
    );
}
