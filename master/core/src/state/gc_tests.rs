use super::GcRules;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, job, run, tasks_of};
use crate::state::{Command, Outcome, Plan, Preemption, TaskRef};
use hetsched_common::{JobId, NodeId};

const N: NodeId = NodeId(1);

fn collect(l: &mut Log, jobs_before: Option<u64>) -> Outcome {
    GcRules {
        jobs: &mut l.s.jobs,
        tasks: &mut l.s.tasks,
        batch: &mut l.s.batch,
        flows: &mut l.s.flows,
        requests: &mut l.s.requests,
        nodes: &l.s.nodes,
    }
    .collect(jobs_before, None, None)
}

fn cancel(l: &mut Log, job: JobId) {
    l.apply_bare(Command::CancelJob { job });
}

#[test]
fn finished_jobs_go_with_their_tasks_and_open_ones_stay() {
    let mut l = cluster(1, 4);
    let (done, d) = job(&mut l, tasks_of(2, 1));
    let (open, o) = job(&mut l, tasks_of(1, 1));
    cancel(&mut l, done);
    assert_eq!(
        collect(&mut l, None),
        Outcome::Collected {
            jobs: 0,
            tasks: 0,
            requests: 0
        }
    );
    assert_eq!(
        collect(&mut l, Some(1)),
        Outcome::Collected {
            jobs: 1,
            tasks: 2,
            requests: 0
        }
    );
    assert!(l.s.job(done).is_none() && d.iter().all(|t| l.s.task(*t).is_none()));
    assert!(l.s.job_was_collected(done) && l.s.task_was_collected(d[0]));
    assert!(l.s.job(open).is_some() && l.s.task(o[0]).is_some());
}

#[test]
fn a_job_whose_preempted_attempt_still_stops_waits() {
    let mut l = cluster(1, 2);
    let (victim, v) = job(&mut l, tasks_of(1, 2));
    let (_, high) = job(&mut l, tasks_of(1, 2));
    run(&mut l, v[0], N);
    if let Some(t) = l.s.tasks.get_mut(&high[0]) {
        t.priority = 5;
    }
    let plan = Plan {
        preempt: vec![Preemption {
            preemptor: high[0],
            node: N,
            victims: vec![TaskRef {
                task: v[0],
                node: N,
                attempt: 1,
            }],
            take_back: false,
        }],
        ..Default::default()
    };
    l.apply_bare(Command::ApplyPlan(plan));
    cancel(&mut l, victim);
    assert!(matches!(
        collect(&mut l, Some(1)),
        Outcome::Collected { jobs: 0, .. }
    ));
    l.apply_bare(Command::TaskLost {
        node: N,
        task: v[0],
        attempt: 1,
    });
    assert!(matches!(
        collect(&mut l, Some(1)),
        Outcome::Collected { jobs: 1, .. }
    ));
}
