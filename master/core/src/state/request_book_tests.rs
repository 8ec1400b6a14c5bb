use super::*;

fn submitted(job: u64, first: u64, count: u64) -> Outcome {
    Outcome::Submitted {
        job: JobId(job),
        tasks: (first..first + count).map(TaskId).collect(),
    }
}

#[test]
fn a_recorded_request_is_answered_as_the_first_time() {
    let mut book = RequestBook::default();
    let req = ClientRequestId(9);
    assert!(!book.applied(req));
    book.record(req, 100, &submitted(3, 10, 4));
    assert!(book.applied(req));
    assert_eq!(book.outcome_of(req), Some(submitted(3, 10, 4)));
    assert!(matches!(
        book.recent()[&req].outcome,
        RequestOutcome::Submitted { count: 4, .. }
    ));
}

#[test]
fn a_retried_cancel_stops_nothing() {
    let mut book = RequestBook::default();
    let cancelled = Outcome::Cancelled {
        job: JobId(1),
        tasks: 2,
        stop: vec![crate::state::TaskRef {
            task: TaskId(1),
            node: hetsched_common::NodeId(1),
            attempt: 1,
        }],
    };
    book.record(ClientRequestId(1), 5, &cancelled);
    assert_eq!(
        book.outcome_of(ClientRequestId(1)),
        Some(Outcome::Cancelled {
            job: JobId(1),
            tasks: 2,
            stop: Vec::new()
        })
    );
}

#[test]
fn outcomes_before_the_cut_are_forgotten_in_time_order() {
    let mut book = RequestBook::default();
    for (req, at) in [(1, 30), (2, 10), (3, 20)] {
        book.record(ClientRequestId(req), at, &Outcome::TaskUpdated);
    }
    assert!(book.any_before(11, None));
    assert!(!book.any_before(10, None));
    assert_eq!(book.forget_before(25, None), 2);
    assert!(!book.applied(ClientRequestId(2)));
    assert!(!book.applied(ClientRequestId(3)));
    assert!(book.applied(ClientRequestId(1)));
    assert!(!book.any_before(30, None));
}

#[test]
fn keyed_outcomes_stay_until_their_own_cut() {
    let mut book = RequestBook::default();
    let keyed = ClientRequestId::from_key("k").expect("key").scoped("alice");
    book.record(keyed, 10, &submitted(1, 1, 1));
    book.record(ClientRequestId(2), 10, &submitted(2, 2, 1));
    assert_eq!(book.keyed(), 1);
    assert!(book.any_before(11, Some(5)), "the automatic one is due");
    assert_eq!(book.forget_before(11, Some(5)), 1);
    assert!(book.applied(keyed), "kept: its window is longer");
    assert!(!book.any_before(11, Some(5)));
    assert!(book.any_before(11, Some(11)));
    assert_eq!(book.forget_before(11, Some(11)), 1);
    assert!(!book.applied(keyed));
    // A log written before keyed ids: one cut for all.
    book.record(keyed, 20, &submitted(1, 1, 1));
    assert_eq!(book.forget_before(21, None), 1);
}

#[test]
fn a_restored_book_keeps_keyed_outcomes_apart() {
    let keyed = ClientRequestId::from_key("k").expect("key").scoped("bob");
    let mut book = RequestBook::default();
    book.record(keyed, 10, &submitted(1, 1, 1));
    book.record(ClientRequestId(2), 10, &submitted(2, 2, 1));
    let mut restored = RequestBook::from_snapshot(book.recent().clone(), BTreeMap::new());
    restored.rebuild(0);
    assert_eq!(restored, book);
}

#[test]
fn legacy_outcomes_fold_in_at_the_snapshots_clock() {
    let legacy = [(ClientRequestId(4), submitted(1, 1, 2))].into();
    let mut book = RequestBook::from_snapshot(BTreeMap::new(), legacy);
    book.rebuild(500);
    assert!(book.legacy().is_empty());
    assert_eq!(book.recent()[&ClientRequestId(4)].at_ms, 500);
    assert!(!book.any_before(500, None));
    assert!(book.any_before(501, None));
}
