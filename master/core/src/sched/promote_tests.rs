//! S0.3 promotion through the log (docs/DESIGN.md, S0.3): a task queued on a slave takes its
//! node's resources only when the leader commits its start — on room freeing, or on the
//! slave's `WantsStart` ask — and never the room a waiting preemptor was promised. Here
//! rather than in `state` because the preemption is planned by the scheduler.

use super::preemption::{plan_preemption, PreemptionConfig};
use super::test_log::{
    assign, node, spec, submit, submitted_tasks as tasks, Log, HI_LO_PRIORITIES,
};
use crate::state::{Assign, Command, Outcome, Plan};
use hetsched_common::priority::parse_priority_toml;
use hetsched_common::protocol::TaskReport;
use hetsched_common::{JobSpec, NodeId, TaskId};
use std::collections::BTreeSet;

/// Queues `tasks` on `node` beyond its free resources.
fn queue_on(l: &mut Log, tasks: &[TaskId], node: NodeId) {
    let plan = Plan {
        assignments: tasks
            .iter()
            .map(|t| Assign {
                queued: true,
                ..Assign::to(*t, node)
            })
            .collect(),
        queue_depth: 4,
        ..Default::default()
    };
    match l.apply_bare(Command::ApplyPlan(plan)) {
        Outcome::PlanApplied { rejected: 0, .. } => {}
        o => panic!("{o:?}"),
    }
}

fn finished(task: TaskId, attempt: u32) -> TaskReport {
    TaskReport::Finished {
        task,
        attempt,
        exit_code: 0,
        reason: None,
        reason_detail: None,
        usage: None,
    }
}

fn ask(task: TaskId, attempt: u32) -> TaskReport {
    TaskReport::WantsStart { task, attempt }
}

#[test]
fn a_queued_task_starts_only_once_the_leader_committed_it_and_its_ask_is_answered() {
    let mut l = Log::new();
    l.apply_bare(node(1, 1, 0, &[]));
    let n = NodeId(1);
    let t = tasks(l.apply_bare(submit(spec(3, 1, 0))));
    assign(&mut l, &t[..1], n);
    queue_on(&mut l, &t[1..], n);
    // No room: the ask changes nothing and is not worth a log entry.
    assert!(!l.s.promotable(n, &[(t[1], 1)]));
    let o = l.apply_bare(Command::TaskReports {
        node: n,
        reports: vec![ask(t[1], 1)],
    });
    assert!(matches!(o, Outcome::Ignored(_)), "{o:?}");
    assert!(l.s.promoted(n, &[(t[1], 1)]).is_empty());
    // The end that frees the core and the ask in one entry: the head takes the core.
    l.apply_bare(Command::TaskReports {
        node: n,
        reports: vec![finished(t[0], 1), ask(t[1], 1)],
    });
    assert_eq!(l.s.promoted(n, &[(t[1], 1), (t[2], 1)]), vec![(t[1], 1)]);
    let node1 = &l.s.nodes()[&n];
    assert_eq!(node1.free.cpu_milli, 0);
    assert_eq!(node1.queued, vec![t[2]]);
    // A stale ask (an older attempt) is ignored; asked again, a promoted one is answered.
    assert!(l.s.promoted(n, &[(t[1], 0)]).is_empty());
    assert!(!l.s.promotable(n, &[(t[1], 1), (t[2], 1)]));
}

#[test]
fn promotion_leaves_a_waiting_preemptors_room_alone() {
    let mut l = Log::new();
    l.apply_bare(Command::SetPriorityConfig {
        config: parse_priority_toml(HI_LO_PRIORITIES).expect("config"),
    });
    l.apply_bare(node(1, 2, 0, &[]));
    let n = NodeId(1);
    let lo = tasks(l.apply_bare(submit(JobSpec {
        user: "lo".into(),
        ..spec(2, 1, 0)
    })));
    assign(&mut l, &lo, n);
    let queued = tasks(l.apply_bare(submit(JobSpec {
        user: "lo".into(),
        ..spec(1, 1, 0)
    })));
    queue_on(&mut l, &queued, n);
    let hi = tasks(l.apply_bare(submit(JobSpec {
        user: "hi".into(),
        ..spec(1, 2, 0)
    })))[0];
    let p = plan_preemption(
        &l.s,
        hi,
        None,
        &BTreeSet::new(),
        &PreemptionConfig::default(),
    )
    .expect("a preemption");
    let victims = p.victims.clone();
    l.apply_bare(Command::ApplyPlan(Plan {
        preempt: vec![p],
        ..Default::default()
    }));
    assert!(l.s.awaiting().contains_key(&hi));
    // The victims stop, and the queued task asks in the same batch: the room is the
    // preemptor's.
    let mut reports: Vec<TaskReport> = victims
        .iter()
        .map(|v| finished(v.task, v.attempt))
        .collect();
    reports.push(ask(queued[0], 1));
    l.apply_bare(Command::TaskReports { node: n, reports });
    assert_eq!(
        l.s.nodes()[&n].free.cpu_milli,
        2000,
        "victims gave their cores back"
    );
    assert!(l.s.promoted(n, &[(queued[0], 1)]).is_empty());
    assert!(!l.s.promotable(n, &[(queued[0], 1)]));
    assert_eq!(l.s.nodes()[&n].queued, queued);
    // The preemptor takes its room; once it ends, the queued task gets its turn.
    assign(&mut l, &[hi], n);
    let hi_attempt = l.s.tasks()[&hi].status.attempt;
    l.apply_bare(Command::TaskReports {
        node: n,
        reports: vec![finished(hi, hi_attempt), ask(queued[0], 1)],
    });
    assert_eq!(l.s.promoted(n, &[(queued[0], 1)]), vec![(queued[0], 1)]);
}

#[test]
fn a_promoted_task_not_yet_started_can_still_be_stolen_and_gives_its_room_back() {
    let mut l = Log::new();
    l.apply_bare(node(1, 1, 0, &[]));
    l.apply_bare(node(2, 1, 0, &[]));
    let (a, thief) = (NodeId(1), NodeId(2));
    let t = tasks(l.apply_bare(submit(spec(2, 1, 0))));
    assign(&mut l, &t[..1], a);
    queue_on(&mut l, &t[1..], a);
    // t[0] ends: t[1] is promoted on `a` in the same entry, before its slave heard of it.
    l.apply_bare(Command::TaskReports {
        node: a,
        reports: vec![finished(t[0], 1)],
    });
    assert!(l.s.nodes()[&a].tasks.contains(&t[1]));
    // The victim released it (it had not started): the steal moves it.
    let o = l.apply_bare(Command::StealTask {
        task: t[1],
        attempt: 1,
        from: a,
        to: thief,
    });
    assert!(
        matches!(o, Outcome::Stolen { assigned: Some(r), .. } if r.node == thief && r.attempt == 2),
        "{o:?}"
    );
    assert_eq!(
        l.s.nodes()[&a].free.cpu_milli,
        1000,
        "its room is back on the victim"
    );
    assert!(l.s.nodes()[&a].tasks.is_empty());
}

/// Issue 53 × S0.3: with the node's queue full of a user behind in fair share, a task of a
/// user ahead takes a queued place: the plan takes the queued attempt back (pending again,
/// its slave told to drop it) and queues the task there; the promotion then starts it first.
/// With fair share off (no factors) the queue keeps its order and the task waits.
#[test]
fn a_user_ahead_in_fair_share_takes_the_queued_places_of_a_user_behind() {
    use crate::sched::index::PolicyKind;
    use crate::sched::multiqueue::Ordering;
    use crate::sched::{IndexedScheduler, Scheduler};
    use std::collections::BTreeMap;
    let user = |u: &str, count| JobSpec {
        user: u.into(),
        ..spec(count, 1, 0)
    };
    let run = |factors: Option<f64>| {
        let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0)
            .with_ordering(Ordering::Drf)
            .with_queue_depth(2);
        let mut l = Log::new();
        let n = NodeId(1);
        l.apply(&mut sched, node(1, 2, 0, &[]));
        let c = tasks(l.apply(&mut sched, submit(user("c", 2))));
        let plan = sched.plan(&l.s);
        l.apply(&mut sched, Command::ApplyPlan(plan));
        let a = tasks(l.apply(&mut sched, submit(user("a", 3))));
        let plan = sched.plan(&l.s);
        l.apply(&mut sched, Command::ApplyPlan(plan));
        assert_eq!(
            l.s.nodes()[&n].queued,
            a[..2],
            "a's first two wait in the queue"
        );
        if let Some(f) = factors {
            sched.set_fair_share(BTreeMap::from([("a".to_string(), f)]));
        }
        let b = tasks(l.apply(&mut sched, submit(user("b", 2))));
        let plan = sched.plan(&l.s);
        let o = l.apply(&mut sched, Command::ApplyPlan(plan.clone()));
        (l, c, a, b, plan, o)
    };
    let (mut l, c, a, b, plan, o) = run(Some(0.5));
    assert_eq!(plan.unqueue.len(), 2, "{plan:?}");
    let Outcome::PlanApplied {
        rejected: 0,
        preempted,
        ..
    } = o
    else {
        panic!("{o:?}")
    };
    let dropped: BTreeSet<TaskId> = preempted.iter().map(|r| r.task).collect();
    assert_eq!(
        dropped,
        a[..2].iter().copied().collect(),
        "the slave drops them"
    );
    let n = NodeId(1);
    assert_eq!(
        l.s.nodes()[&n].queued,
        b,
        "b's tasks hold the queue, in order"
    );
    for t in &a {
        assert_eq!(
            l.s.tasks()[t].status.state,
            hetsched_common::TaskState::Pending
        );
    }
    // c's first task ends: b's first is promoted into the room.
    l.apply_bare(Command::TaskReports {
        node: n,
        reports: vec![finished(c[0], 1)],
    });
    assert!(l.s.nodes()[&n].tasks.contains(&b[0]), "b starts first");
    // Fair share off: the queue keeps a's tasks and b's wait.
    let (l, _, a, _, plan, _) = run(None);
    assert!(
        plan.unqueue.is_empty() && plan.assignments.is_empty(),
        "{plan:?}"
    );
    assert_eq!(l.s.nodes()[&NodeId(1)].queued, a[..2]);
}
