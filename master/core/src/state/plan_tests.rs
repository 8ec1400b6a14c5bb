use super::PlanRules;
use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, free_cpu, job, run, tasks_of};
use crate::state::{Assign, BatchJob, BatchTask, Outcome, Plan, Preemption, TaskRef};
use hetsched_common::{JobId, NodeId, TaskId, TaskReason, TaskState};

const N: NodeId = NodeId(1);

fn apply(l: &mut Log, plan: Plan) -> Outcome {
    PlanRules {
        nodes: &mut l.s.nodes,
        tasks: &mut l.s.tasks,
        jobs: &l.s.jobs,
        batch: &l.s.batch,
        at_ms: 0,
    }
    .apply_plan(plan)
}

fn assign(tasks: &[TaskId], node: NodeId) -> Plan {
    Plan {
        assignments: tasks.iter().map(|t| Assign::to(*t, node)).collect(),
        ..Default::default()
    }
}

fn counts(o: &Outcome) -> (usize, u32, usize) {
    match o {
        Outcome::PlanApplied {
            accepted,
            rejected,
            preempted,
        } => (accepted.len(), *rejected, preempted.len()),
        o => panic!("{o:?}"),
    }
}

#[test]
fn stale_assignments_are_refused_and_the_rest_apply() {
    let mut l = cluster(1, 2);
    let (_, t) = job(&mut l, tasks_of(3, 1));
    let mut plan = assign(&t, N);
    plan.assignments.push(Assign::to(t[0], N));
    plan.assignments.push(Assign::to(t[2], NodeId(9)));
    // Two fit; the third finds no room, the repeat is no longer pending, node 9 is unknown.
    assert_eq!(counts(&apply(&mut l, plan)), (2, 3, 0));
    assert_eq!(free_cpu(&l, N), 0);
    let placed = &l.s.tasks()[&t[0]];
    assert_eq!(
        (placed.status.state, placed.status.node),
        (TaskState::Assigned, Some(N))
    );
    assert!(l.s.pending().contains(&t[2]) && !l.s.pending().contains(&t[0]));
}

/// A 2-core node running a 2-core task at priority 0, and a pending one at priority 5.
fn full_node() -> (Log, TaskId, TaskId) {
    let mut l = cluster(1, 2);
    let (_, low) = job(&mut l, tasks_of(1, 2));
    let (_, high) = job(&mut l, tasks_of(1, 2));
    run(&mut l, low[0], N);
    if let Some(t) = l.s.tasks.get_mut(&high[0]) {
        t.priority = 5;
    }
    (l, low[0], high[0])
}

fn preempt(preemptor: TaskId, victim: TaskId, attempt: u32) -> Plan {
    Plan {
        preempt: vec![Preemption {
            preemptor,
            node: N,
            victims: vec![TaskRef {
                task: victim,
                node: N,
                attempt,
            }],
            take_back: false,
        }],
        ..Default::default()
    }
}

#[test]
fn a_preempted_attempt_holds_its_grant_until_it_stops() {
    let (mut l, low, high) = full_node();
    assert_eq!(counts(&apply(&mut l, preempt(high, low, 1))), (0, 0, 1));
    let victim = &l.s.tasks()[&low];
    assert_eq!(victim.status.reason, Some(TaskReason::Preempted));
    assert_eq!(
        (victim.status.state, victim.preemptions),
        (TaskState::Pending, 1)
    );
    let n = &l.s.nodes()[&N];
    assert!(!n.tasks.contains(&low));
    assert_eq!((n.stopping.len(), n.free.cpu_milli), (1, 0), "still held");
    assert_eq!(l.s.awaiting()[&high].0, N);
}

#[test]
fn a_stale_or_protected_victim_refuses_the_preemption() {
    let (mut l, low, high) = full_node();
    let before = l.s.clone();
    assert_eq!(counts(&apply(&mut l, preempt(high, low, 2))), (0, 1, 0));
    if let Some(t) = l.s.tasks.get_mut(&low) {
        t.protected = true;
    }
    assert_eq!(counts(&apply(&mut l, preempt(high, low, 1))), (0, 1, 0));
    assert_eq!(l.s.nodes(), before.nodes());
}

/// Makes `job` (with `tasks`) a batch job with every task pinned to `N`.
fn gang(l: &mut Log, job: JobId, tasks: &[TaskId]) {
    let bj = BatchJob {
        batch: 1,
        index: 0,
        planned_start_s: Default::default(),
        planned_finish_s: Default::default(),
        speed: Default::default(),
        blocks: Vec::new(),
    };
    l.s.batch.jobs.insert(job, bj);
    for t in tasks {
        let pin = BatchTask {
            node: N,
            blocks: Vec::new(),
        };
        l.s.batch.tasks.insert(*t, pin);
    }
}

#[test]
fn a_gang_is_placed_whole_or_not_at_all() {
    let mut l = cluster(2, 4);
    let (j, t) = job(&mut l, tasks_of(2, 1));
    gang(&mut l, j, &t);
    assert_eq!(counts(&apply(&mut l, assign(&t[..1], N))), (0, 1, 0));
    assert_eq!(
        counts(&apply(&mut l, assign(&t, NodeId(2)))),
        (0, 2, 0),
        "not its pin"
    );
    assert_eq!(counts(&apply(&mut l, assign(&t, N))), (2, 0, 0));
    // Preempting one of them preempts its mate too.
    let (_, high) = job(&mut l, tasks_of(1, 4));
    if let Some(h) = l.s.tasks.get_mut(&high[0]) {
        h.priority = 5;
    }
    assert_eq!(counts(&apply(&mut l, preempt(high[0], t[0], 1))), (0, 0, 2));
    assert!(t.iter().all(|t| l.s.pending().contains(t)));
}
