use super::{AttemptEnd, ReportRules};
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, place, run, tasks_of};
use crate::state::{Assign, Command, CommandEnvelope, Outcome, Plan};
use hetsched_common::protocol::TaskReport;
use hetsched_common::{NodeId, TaskReason, TaskState};

const N: NodeId = NodeId(1);
const AT: u64 = 5_000;
const NOW: u64 = 7_000;

fn rules(l: &mut Log) -> ReportRules<'_> {
    ReportRules {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &mut l.s.jobs,
        at_ms: AT,
        now_ms: NOW,
    }
}

fn exit(code: i32) -> AttemptEnd {
    AttemptEnd {
        exit_code: code,
        reason: None,
        reason_detail: None,
    }
}

#[test]
fn the_last_task_finishing_gives_its_grant_back_and_finishes_the_job() {
    let mut l = cluster(1, 4);
    let (j, t) = job(&mut l, tasks_of(1, 2));
    run(&mut l, t[0], N);
    assert_eq!(
        rules(&mut l).finished(N, t[0], 1, exit(0)),
        Outcome::TaskUpdated
    );
    assert_eq!(l.s.tasks()[&t[0]].status.state, TaskState::Succeeded);
    assert_eq!(free_cpu(&l, N), 4000);
    assert_eq!(l.s.job(j).and_then(|j| j.finished_ms), Some(NOW));
}

#[test]
fn a_failure_with_retries_left_waits_its_backoff_in_the_queue() {
    let mut l = cluster(1, 4);
    let mut spec = tasks_of(1, 2);
    spec.retries = 1;
    spec.backoff_ms = 300;
    let (j, t) = job(&mut l, spec);
    run(&mut l, t[0], N);
    assert_eq!(
        rules(&mut l).finished(N, t[0], 1, exit(3)),
        Outcome::TaskUpdated
    );
    let task = &l.s.tasks()[&t[0]];
    assert_eq!(task.status.state, TaskState::Pending);
    assert_eq!((task.failures, task.not_before_ms), (1, Some(AT + 300)));
    assert_eq!(task.status.exit_code, Some(3));
    assert!(l.s.pending().contains(&t[0]));
    assert_eq!(l.s.job(j).and_then(|j| j.finished_ms), None);
    // Placed once its backoff is over, its second attempt times out: no retry is left.
    let plan = Plan {
        assignments: vec![Assign::to(t[0], N)],
        ..Default::default()
    };
    let at = CommandEnvelope {
        at_ms: AT + 300,
        request: None,
        command: Command::ApplyPlan(plan),
    };
    assert!(matches!(
        l.s.apply(99, at),
        Outcome::PlanApplied { rejected: 0, .. }
    ));
    match rules(&mut l).timed_out(N, t[0], 2) {
        Outcome::TimedOut { retried, .. } => assert!(!retried),
        o => panic!("{o:?}"),
    }
    let task = &l.s.tasks()[&t[0]];
    assert_eq!(
        (task.status.state, task.status.reason),
        (TaskState::Failed, Some(TaskReason::Timeout))
    );
    assert_eq!(l.s.job(j).and_then(|j| j.finished_ms), Some(NOW));
}

#[test]
fn stale_reports_are_fenced_off() {
    let mut l = cluster(1, 4);
    let (_, t) = job(&mut l, tasks_of(1, 2));
    run(&mut l, t[0], N);
    let before = l.s.clone();
    assert!(matches!(
        rules(&mut l).finished(N, t[0], 2, exit(0)),
        Outcome::Ignored(_)
    ));
    assert!(matches!(
        rules(&mut l).lost(NodeId(9), t[0], 1),
        Outcome::Ignored(_)
    ));
    assert_eq!(l.s, before);
}

#[test]
fn a_batch_counts_as_updated_when_any_report_changed_something() {
    let mut l = cluster(1, 4);
    let (_, t) = job(&mut l, tasks_of(2, 1));
    place(&mut l, t[0], N, false);
    let reports = vec![
        TaskReport::Started {
            task: t[0],
            attempt: 7,
        },
        TaskReport::Started {
            task: t[0],
            attempt: 1,
        },
    ];
    assert_eq!(rules(&mut l).reports(N, reports), Outcome::TaskUpdated);
    let task = &l.s.tasks()[&t[0]];
    assert_eq!(
        (task.status.state, task.started_ms),
        (TaskState::Running, Some(AT))
    );
    let stale = vec![TaskReport::Started {
        task: t[1],
        attempt: 1,
    }];
    assert!(matches!(
        rules(&mut l).reports(N, stale),
        Outcome::Ignored(_)
    ));
    assert!(matches!(
        rules(&mut l).reports(NodeId(9), Vec::new()),
        Outcome::Rejected(_)
    ));
}
