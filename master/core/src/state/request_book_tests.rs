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
    assert!(book.any_before(11));
    assert!(!book.any_before(10));
    assert_eq!(book.forget_before(25), 2);
    assert!(!book.applied(ClientRequestId(2)));
    assert!(!book.applied(ClientRequestId(3)));
    assert!(book.applied(ClientRequestId(1)));
    assert!(!book.any_before(30));
}

#[test]
fn legacy_outcomes_fold_in_at_the_snapshots_clock() {
    let legacy = [(ClientRequestId(4), submitted(1, 1, 2))].into();
    let mut book = RequestBook::from_snapshot(BTreeMap::new(), legacy);
    book.rebuild(500);
    assert!(book.legacy().is_empty());
    assert_eq!(book.recent()[&ClientRequestId(4)].at_ms, 500);
    assert!(!book.any_before(500));
    assert!(book.any_before(501));
}
