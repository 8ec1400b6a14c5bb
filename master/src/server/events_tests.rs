//! The journal over an applied state: no sockets.

use super::*;
use crate::server::test_state::TestState;
use hetsched_master_core::state::{Assign, Command, Plan};

fn run(t: &mut TestState, j: &mut Journal, c: Command) -> u64 {
    t.apply(c);
    let index = t.state.last_index();
    j.record(index, &t.state);
    index
}

fn kinds(events: &[Event]) -> Vec<(String, Option<u64>, String)> {
    (events.iter())
        .map(|e| (e.kind.to_string(), e.task.map(|t| t.0), e.state.clone()))
        .collect()
}

#[test]
fn changes_become_events_by_log_index_and_wake_the_jobs_waiters() {
    let (mut t, mut j) = (TestState::new(), Journal::default());
    let node = t.node(1, "a", 2);
    let (job, tasks) = t.job("alice", 1);
    let submitted = t.state.last_index();
    j.record(submitted, &t.state);
    let mut woken = j.wait_job(job);
    let plan = Plan {
        assignments: vec![Assign::to(tasks[0], node)],
        ..Default::default()
    };
    let assigned = run(&mut t, &mut j, Command::ApplyPlan(plan));
    assert_eq!(woken.try_recv(), Ok(()), "the job changed");
    let all = j.since(0, 100, |_| true).expect("kept");
    assert_eq!(
        kinds(&all),
        vec![
            ("task".into(), Some(tasks[0].0), "pending".into()),
            ("job".into(), None, "pending".into()),
            ("task".into(), Some(tasks[0].0), "assigned".into()),
            ("job".into(), None, "running".into()),
        ]
    );
    assert_eq!(all[2].seq, assigned);
    assert_eq!(all[0].user, "alice");
    // Resuming after the submit gives the rest; nothing is repeated.
    assert_eq!(j.since(submitted, 100, |_| true).map(|e| e.len()), Ok(2));
    assert_eq!(j.since(assigned, 100, |_| true).map(|e| e.len()), Ok(0));
    // An entry that changes no task state adds nothing and wakes nobody.
    let mut idle = j.wait_job(job);
    run(&mut t, &mut j, Command::NodeUp { node });
    assert!(idle.try_recv().is_err());
    assert_eq!(j.since(assigned, 100, |_| true).map(|e| e.len()), Ok(0));
    // A caller sees what it may.
    let bob = j.since(0, 100, |e| e.user == "bob").expect("kept");
    assert!(bob.is_empty());
}

#[test]
fn a_since_older_than_the_kept_events_is_gone_with_the_oldest() {
    let (mut t, mut j) = (TestState::new(), Journal::new(3));
    t.node(1, "a", 2);
    let mut last = 0;
    for _ in 0..3 {
        t.job("u", 1);
        last = t.state.last_index();
        j.record(last, &t.state);
    }
    // Each submit is two events (task, job): only the last entry's fit.
    let oldest = j.since(0, 100, |_| true).expect_err("gone");
    assert_eq!(oldest, last - 1);
    assert_eq!(j.since(oldest, 100, |_| true).map(|e| e.len()), Ok(2));
    // A restore starts over at its index.
    j.restored(last, &t.state);
    assert_eq!(j.since(last - 1, 100, |_| true), Err(last));
    assert_eq!(j.since(last, 100, |_| true), Ok(Vec::new()));
}

#[test]
fn the_wakers_of_waits_that_timed_out_are_swept() {
    let mut j = Journal::default();
    for i in 1..=5000 {
        drop(j.wait_job(JobId(i)));
    }
    assert!(j.waiting_jobs() < 2048 + 1, "{}", j.waiting_jobs());
    let live = j.wait_job(JobId(1));
    assert!(j.waiting_jobs() >= 1);
    drop(live);
}
