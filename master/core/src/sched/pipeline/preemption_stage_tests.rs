use super::*;
use crate::sched::pipeline::feasibility_stage::Feasibility;
use crate::sched::pipeline::queue_stage::QueueStage;
use crate::sched::test_log::{
    assign, node, spec, submit, submitted_tasks as tasks, Log, HI_LO_PRIORITIES as CONFIG,
};
use crate::state::Command;
use hetsched_common::priority::parse_priority_toml;
use hetsched_common::{JobSpec, NodeId, TaskId};

/// A 2-CPU node full with two low-priority tasks; a high-priority task waits.
fn cluster() -> (Log, Vec<TaskId>, TaskId) {
    let mut l = Log::new();
    l.apply_bare(Command::SetPriorityConfig {
        config: parse_priority_toml(CONFIG).expect("config"),
    });
    l.apply_bare(node(1, 2, 0, &[]));
    let lo = tasks(l.apply_bare(submit(JobSpec {
        user: "lo".into(),
        ..spec(2, 1, 0)
    })));
    assign(&mut l, &lo, NodeId(1));
    let hi = tasks(l.apply_bare(submit(JobSpec {
        user: "hi".into(),
        ..spec(1, 1, 0)
    })))[0];
    (l, lo, hi)
}

fn victims(d: &Option<Decision>) -> Vec<TaskId> {
    match d {
        Some(Decision::Preempt(p)) => p.victims.iter().map(|v| v.task).collect(),
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_preemptor_takes_the_latest_victim_not_chosen_yet_within_the_limit() {
    let (l, lo, hi) = cluster();
    let head = QueueStage::admit(&l.s, 0, &Default::default(), hi).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let cfg = PreemptionConfig::default();
    let mut decided = Decided::default();
    let d = PreemptionStage::decide(&cfg, &decided, &l.s, &head, &scope);
    assert_eq!(victims(&d), vec![lo[1]], "the latest submitted");
    // An earlier preemption of the plan chose it: the other one.
    decided.victims.insert(lo[1]);
    let d = PreemptionStage::decide(&cfg, &decided, &l.s, &head, &scope);
    assert_eq!(victims(&d), vec![lo[0]]);
    // The plan holds its limit of preemptions: none more.
    let one = PreemptionConfig {
        max_per_plan: 1,
        ..cfg
    };
    if let Some(Decision::Preempt(p)) = d {
        decided.plan.preempt.push(p);
    }
    assert_eq!(
        PreemptionStage::decide(&one, &decided, &l.s, &head, &scope),
        None
    );
}

#[test]
fn a_low_priority_task_preempts_nobody() {
    let (mut l, _, _) = cluster();
    let lo = tasks(l.apply_bare(submit(JobSpec {
        user: "lo".into(),
        ..spec(1, 1, 0)
    })))[0];
    let head = QueueStage::admit(&l.s, 0, &Default::default(), lo).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let cfg = PreemptionConfig::default();
    let d = PreemptionStage::decide(&cfg, &Decided::default(), &l.s, &head, &scope);
    assert_eq!(d, None);
}
