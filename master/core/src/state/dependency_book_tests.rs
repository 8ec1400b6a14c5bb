use super::*;
use hetsched_common::{JobSpec, TaskId};

fn job(id: u64, spec: JobSpec) -> Job {
    Job {
        id: JobId(id),
        spec,
        tasks: vec![TaskId(id * 100)],
        submitted_ms: 0,
        submitted_index: 0,
        finished_ms: None,
        open: 1,
        candidates: Vec::new(),
    }
}

#[test]
fn edges_live_while_the_dependent_is_open() {
    let mut book = DependencyBook::default();
    let c = job(
        3,
        JobSpec {
            after: vec![JobId(1)],
            after_any: vec![JobId(2)],
            after_each: Some(JobId(1)),
            ..JobSpec::default()
        },
    );
    let d = job(
        4,
        JobSpec {
            after_fail: vec![JobId(1)],
            ..JobSpec::default()
        },
    );
    book.add(&c);
    book.add(&d);
    assert_eq!(
        book.dependents(JobId(1)).collect::<Vec<_>>(),
        [JobId(3), JobId(4)]
    );
    assert_eq!(
        book.each_dependents(JobId(1)).collect::<Vec<_>>(),
        [JobId(3)]
    );
    assert!(book.has_dependents(JobId(2)));
    assert!(!book.has_dependents(JobId(3)));
    // Job 3 ends: job 2 has no dependent left, job 1 still has job 4.
    assert_eq!(book.resolve(&c), vec![JobId(2)]);
    assert!(!book.has_dependents(JobId(2)));
    assert_eq!(book.each_dependents(JobId(1)).count(), 0);
    assert_eq!(book.resolve(&d), vec![JobId(1)]);
    assert_eq!(book, DependencyBook::default(), "nothing left behind");
}

#[test]
fn singletons_are_kept_by_user_and_name() {
    let mut book = DependencyBook::default();
    let spec = |user: &str, name: &str| JobSpec {
        user: user.into(),
        name: name.into(),
        singleton: true,
        ..JobSpec::default()
    };
    let (a, b, c) = (
        job(1, spec("ann", "etl")),
        job(2, spec("ann", "etl")),
        job(3, spec("bob", "etl")),
    );
    for j in [&a, &b, &c] {
        book.add(j);
    }
    assert_eq!(
        book.singletons("ann", "etl").collect::<Vec<_>>(),
        [JobId(1), JobId(2)]
    );
    assert_eq!(
        book.singletons("bob", "etl").collect::<Vec<_>>(),
        [JobId(3)]
    );
    assert_eq!(book.singletons("ann", "other").count(), 0);
    book.resolve(&a);
    book.resolve(&b);
    book.resolve(&c);
    assert_eq!(book, DependencyBook::default());
}

#[test]
fn the_book_of_a_restored_state_holds_only_open_jobs() {
    let open = job(
        2,
        JobSpec {
            after: vec![JobId(1)],
            ..JobSpec::default()
        },
    );
    let finished = Job {
        finished_ms: Some(5),
        open: 0,
        ..job(
            3,
            JobSpec {
                after: vec![JobId(1)],
                ..JobSpec::default()
            },
        )
    };
    let book = DependencyBook::of([&open, &finished]);
    assert_eq!(book.dependents(JobId(1)).collect::<Vec<_>>(), [JobId(2)]);
    assert_eq!(book.upstreams().collect::<Vec<_>>(), [JobId(1)]);
}
