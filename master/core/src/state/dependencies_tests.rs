use super::*;
use crate::sched::test_log::{assign, node, spec, submit, Log};
use crate::state::{ClusterState, Command, Outcome};
use hetsched_common::NodeId;

/// A log with one node of 64 cores.
fn log() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 64, 0, &[]));
    l
}

/// Submits `count` tasks with `f` applied to the spec; the job and its tasks.
fn job(l: &mut Log, count: u32, f: impl FnOnce(&mut JobSpec)) -> (JobId, Vec<TaskId>) {
    let mut s = spec(count, 1, 0);
    f(&mut s);
    match l.apply_bare(submit(s)) {
        Outcome::Submitted { job, tasks } => (job, tasks),
        o => panic!("{o:?}"),
    }
}

/// Runs `task` on node 1 to exit code `code`.
fn run(l: &mut Log, task: TaskId, code: i32) {
    assign(l, &[task], NodeId(1));
    l.apply_bare(Command::TaskStarted {
        node: NodeId(1),
        task,
        attempt: 1,
    });
    l.apply_bare(Command::TaskFinished {
        node: NodeId(1),
        task,
        attempt: 1,
        exit_code: code,
        reason: None,
    });
}

fn state_of(l: &Log, task: TaskId) -> (TaskState, Option<TaskReason>, Option<String>) {
    let t = l.s.task(task).expect("task");
    (
        t.status.state,
        t.status.reason,
        t.status.reason_detail.clone(),
    )
}

fn cancelled_because(detail: &str) -> (TaskState, Option<TaskReason>, Option<String>) {
    (
        TaskState::Cancelled,
        Some(TaskReason::Dependency),
        Some(detail.to_string()),
    )
}

#[test]
fn a_dependency_on_an_unknown_or_collected_job_is_refused_and_changes_nothing() {
    let mut l = log();
    let next = l.s.jobs.next_id();
    let mut s = spec(1, 1, 0);
    s.after = vec![JobId(7)];
    match l.apply_bare(submit(s)) {
        Outcome::Rejected(why) => assert!(why.contains("--after job-7: no such job"), "{why}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(l.s.jobs.next_id(), next, "no id handed out");
    let (a, at) = job(&mut l, 1, |_| {});
    run(&mut l, at[0], 0);
    l.apply_bare(Command::GcJobs {
        jobs_finished_before_ms: Some(u64::MAX),
        requests_before_ms: None,
        keyed_requests_before_ms: None,
    });
    assert!(l.s.job_was_collected(a));
    let mut s = spec(1, 1, 0);
    s.after_any = vec![a];
    match l.apply_bare(submit(s)) {
        Outcome::Rejected(why) => assert!(why.contains("collected"), "{why}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn after_each_needs_the_same_number_of_tasks() {
    let mut l = log();
    let (a, _) = job(&mut l, 3, |_| {});
    let mut s = spec(2, 1, 0);
    s.after_each = Some(a);
    match l.apply_bare(submit(s)) {
        Outcome::Rejected(why) => assert!(why.contains("3 task(s), this job 2"), "{why}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_failed_job_cancels_its_dependents_transitively_in_the_entry_that_ends_it() {
    let mut l = log();
    let (f, ft) = job(&mut l, 1, |_| {});
    let (b, bt) = job(&mut l, 2, |s| s.after = vec![f]);
    let (_, ct) = job(&mut l, 1, |s| s.after = vec![b]);
    let (_, anyt) = job(&mut l, 1, |s| s.after_any = vec![f]);
    let (_, failt) = job(&mut l, 1, |s| s.after_fail = vec![f]);
    assert!(l.s.pending().contains(&bt[0]));
    let before = l.i;
    run(&mut l, ft[0], 3);
    assert_eq!(l.i, before + 3, "no extra entry");
    assert_eq!(
        state_of(&l, bt[0]),
        cancelled_because("job-1 failed (after)")
    );
    assert_eq!(
        state_of(&l, bt[1]),
        cancelled_because("job-1 failed (after)")
    );
    assert_eq!(
        state_of(&l, ct[0]),
        cancelled_because("job-2 cancelled (after)")
    );
    assert!(!l.s.pending().contains(&ct[0]));
    assert_eq!(
        l.s.task(anyt[0]).map(|t| t.status.state),
        Some(TaskState::Pending)
    );
    assert_eq!(
        l.s.task(failt[0]).map(|t| t.status.state),
        Some(TaskState::Pending)
    );
    let b_job = l.s.job(b).expect("job");
    assert_eq!(l.s.job_state(b_job), "cancelled");
    assert!(b_job.finished_ms.is_some());
    // Nothing still follows b or c: their edges are resolved.
    assert!(!l.s.dependency_book().has_dependents(b));
}

#[test]
fn after_fail_is_cancelled_when_its_job_succeeds_and_after_any_runs_either_way() {
    let mut l = log();
    let (a, at) = job(&mut l, 1, |_| {});
    let (d, dt) = job(&mut l, 1, |s| s.after_fail = vec![a]);
    let (e, _) = job(&mut l, 1, |s| s.after_any = vec![a]);
    run(&mut l, at[0], 0);
    assert_eq!(
        state_of(&l, dt[0]),
        cancelled_because("job-1 succeeded (after_fail)")
    );
    let ej = l.s.job(e).expect("job");
    assert_eq!(
        l.s.dependency_state(ej, 0, &mut JobStates::default()),
        DepState::Met
    );
    let dj = l.s.job(d).expect("job");
    assert_eq!(l.s.job_state(dj), "cancelled");
}

#[test]
fn after_each_follows_task_by_task() {
    let mut l = log();
    let (a, at) = job(&mut l, 3, |_| {});
    let (b, bt) = job(&mut l, 3, |s| s.after_each = Some(a));
    let bj = |l: &Log| l.s.job(b).cloned().expect("job");
    let state = |l: &Log, i| l.s.dependency_state(&bj(l), i, &mut JobStates::default());
    assert!(matches!(state(&l, 0), DepState::Waiting(_)));
    run(&mut l, at[0], 0);
    assert_eq!(state(&l, 0), DepState::Met);
    assert!(
        matches!(state(&l, 1), DepState::Waiting(d) if d == "task 1 of job-1 pending (after_each)")
    );
    run(&mut l, at[1], 9);
    assert_eq!(
        state_of(&l, bt[1]),
        cancelled_because("task 1 of job-1 failed (after_each)")
    );
    assert_eq!(
        l.s.task(bt[0]).map(|t| t.status.state),
        Some(TaskState::Pending)
    );
    assert_eq!(
        l.s.task(bt[2]).map(|t| t.status.state),
        Some(TaskState::Pending)
    );
}

#[test]
fn in_any_mode_a_job_is_cancelled_only_once_no_dependency_can_be_met() {
    let mut l = log();
    let (a, at) = job(&mut l, 1, |_| {});
    let (f, ft) = job(&mut l, 1, |_| {});
    let (d, dt) = job(&mut l, 1, |s| {
        s.after = vec![a, f];
        s.after_mode = AfterMode::Any;
    });
    let dj = |l: &Log| l.s.job(d).cloned().expect("job");
    match l.s.dependency_state(&dj(&l), 0, &mut JobStates::default()) {
        DepState::Waiting(w) => {
            assert_eq!(w, "any of: job-1 pending (after); job-2 pending (after)")
        }
        o => panic!("{o:?}"),
    }
    run(&mut l, ft[0], 1);
    assert_eq!(
        l.s.task(dt[0]).map(|t| t.status.state),
        Some(TaskState::Pending)
    );
    run(&mut l, at[0], 1);
    assert_eq!(
        state_of(&l, dt[0]),
        cancelled_because("none can be met: job-1 failed (after); job-2 failed (after)")
    );
    let _ = f;
}

#[test]
fn a_dependency_that_already_failed_cancels_the_job_at_its_submission() {
    let mut l = log();
    let (f, ft) = job(&mut l, 1, |_| {});
    run(&mut l, ft[0], 2);
    let (d, dt) = job(&mut l, 2, |s| s.after = vec![f]);
    assert_eq!(
        state_of(&l, dt[0]),
        cancelled_because("job-1 failed (after)")
    );
    assert!(l.s.pending().is_empty());
    assert!(l.s.job(d).is_some_and(|j| j.finished_ms.is_some()));
    assert!(!l.s.dependency_book().has_dependents(f));
}

#[test]
fn a_job_with_open_dependents_is_not_collected() {
    let mut l = log();
    let (a, at) = job(&mut l, 1, |_| {});
    let (b, bt) = job(&mut l, 1, |s| s.after = vec![a]);
    run(&mut l, at[0], 0);
    let gc = || Command::GcJobs {
        jobs_finished_before_ms: Some(u64::MAX),
        requests_before_ms: None,
        keyed_requests_before_ms: None,
    };
    assert!(!l.s.gc_due(Some(u64::MAX), None, None), "a is held for b");
    l.apply_bare(gc());
    assert!(l.s.job(a).is_some());
    // A snapshot taken now restores to the same state (the book and the order rebuilt).
    let restored = ClusterState::from_bytes(&l.s.to_bytes()).expect("restore");
    assert_eq!(restored, l.s);
    run(&mut l, bt[0], 0);
    assert!(l.s.gc_due(Some(u64::MAX), None, None));
    l.apply_bare(gc());
    assert!(l.s.job(a).is_none() && l.s.job(b).is_none());
}

#[test]
fn a_job_submitted_after_a_finished_one_holds_it_back_from_collection() {
    let mut l = log();
    let (a, at) = job(&mut l, 1, |_| {});
    run(&mut l, at[0], 0);
    assert!(l.s.gc_due(Some(u64::MAX), None, None));
    let (_, bt) = job(&mut l, 1, |s| s.after = vec![a]);
    assert!(!l.s.gc_due(Some(u64::MAX), None, None));
    assert_eq!(
        l.s.task(bt[0]).map(|t| t.status.state),
        Some(TaskState::Pending),
        "met, waits for resources only"
    );
    let restored = ClusterState::from_bytes(&l.s.to_bytes()).expect("restore");
    assert_eq!(restored, l.s);
}

#[test]
fn a_cancelled_job_cancels_its_dependents_too() {
    let mut l = log();
    let (a, _) = job(&mut l, 2, |_| {});
    let (_, bt) = job(&mut l, 1, |s| s.after = vec![a]);
    l.apply_bare(Command::CancelJob { job: a });
    assert_eq!(
        state_of(&l, bt[0]),
        cancelled_because("job-1 cancelled (after)")
    );
}

#[test]
fn a_long_chain_is_cancelled_without_recursion() {
    let mut l = log();
    let (head, ht) = job(&mut l, 1, |_| {});
    let mut last = head;
    let mut tails = Vec::new();
    for _ in 0..5_000 {
        let (j, t) = job(&mut l, 1, |s| s.after = vec![last]);
        last = j;
        tails.push(t[0]);
    }
    run(&mut l, ht[0], 1);
    assert!(tails.iter().all(|t| l
        .s
        .task(*t)
        .is_some_and(|t| t.status.state == TaskState::Cancelled)));
    assert!(l.s.pending().is_empty());
}

#[test]
fn singleton_holders_and_tasks_under_way() {
    let mut l = log();
    let single = |s: &mut JobSpec| {
        s.name = "etl".into();
        s.singleton = true;
        s.max_running = Some(2);
    };
    let (a, at) = job(&mut l, 3, single);
    let (b, _) = job(&mut l, 1, single);
    let jb = l.s.job(b).cloned().expect("job");
    assert_eq!(l.s.singleton_holder(&jb), None, "nothing under way yet");
    assign(&mut l, &at[..2], NodeId(1));
    assert_eq!(l.s.singleton_holder(&jb), Some(a));
    let ja = l.s.job(a).cloned().expect("job");
    assert_eq!(l.s.tasks_under_way(&ja), 2);
    assert_eq!(
        l.s.singleton_holder(&ja),
        None,
        "its own job does not hold it"
    );
}

#[test]
fn a_fan_in_names_three_waiting_jobs_and_is_cancelled_by_the_one_that_fails() {
    let mut l = log();
    let ups: Vec<(JobId, Vec<TaskId>)> = (0..6).map(|_| job(&mut l, 1, |_| {})).collect();
    let ids: Vec<JobId> = ups.iter().map(|(j, _)| *j).collect();
    let (fan, fan_tasks) = job(&mut l, 1, |s| s.after = ids.clone());
    let waiting = |l: &Log| {
        let j = l.s.job(fan).expect("fan-in");
        l.s.dependency_state(j, 0, &mut JobStates::default())
    };
    assert_eq!(
        waiting(&l),
        DepState::Waiting(
            "job-1 pending (after); job-2 pending (after); job-3 pending (after); and 3 more"
                .into()
        )
    );
    for (_, t) in &ups[..5] {
        run(&mut l, t[0], 0);
    }
    assert_eq!(
        waiting(&l),
        DepState::Waiting("job-6 pending (after)".into())
    );
    assert_eq!(state_of(&l, fan_tasks[0]).0, TaskState::Pending);
    run(&mut l, ups[5].1[0], 1);
    assert_eq!(
        state_of(&l, fan_tasks[0]),
        cancelled_because("job-6 failed (after)")
    );
}
