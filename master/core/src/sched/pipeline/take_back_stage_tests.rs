use super::*;
use crate::sched::index::Candidates;
use crate::sched::loads::Loads;
use crate::sched::pipeline::feasibility_stage::Feasibility;
use crate::sched::pipeline::pool_round::PoolRound;
use crate::sched::pipeline::queue_stage::QueueStage;
use crate::sched::test_log::{assign, index_of, node, spec, submit, Log};
use crate::state::Outcome;

fn tasks(o: Outcome) -> Vec<TaskId> {
    match o {
        Outcome::Submitted { tasks, .. } => tasks,
        o => panic!("{o:?}"),
    }
}

/// One GPU node (8 CPUs, 2 GPUs, 4 CPUs reserved at 2 per GPU) full with eight one-CPU
/// tasks, four of them on the reserve; a GPU task asking 2 GPUs and 3 CPUs waits.
fn cluster() -> (Log, Vec<TaskId>, TaskId) {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 2, &[]));
    let cpu = tasks(l.apply_bare(submit(spec(8, 1, 0))));
    assign(&mut l, &cpu, NodeId(1));
    let gpu = tasks(l.apply_bare(submit(spec(1, 3, 2))))[0];
    (l, cpu, gpu)
}

fn ids(v: &[TaskRef]) -> Vec<TaskId> {
    v.iter().map(|v| v.task).collect()
}

#[test]
fn the_newest_borrowers_stop_just_enough_for_the_cpus_short() {
    let (l, cpu, gpu) = cluster();
    let index = index_of(&l.s);
    let history = ReserveHistory::new(2000);
    let cfg = PreemptionConfig::default();
    let none = BTreeSet::new();
    let stage = TakeBackStage {
        index: &index,
        reserved: &none,
        cfg: &cfg,
    };
    let req = &l.s.jobs()[&l.s.tasks()[&gpu].job].spec.resources;
    let p = stage
        .take_back(&history, &l.s, gpu, req, None, &BTreeSet::new())
        .expect("a take-back");
    assert!(p.take_back);
    assert_eq!((p.preemptor, p.node), (gpu, NodeId(1)));
    assert_eq!(ids(&p.victims), vec![cpu[7], cpu[6], cpu[5]]);
    // A victim another preemption chose is skipped.
    let taken = BTreeSet::from([cpu[7]]);
    let p = stage.take_back(&history, &l.s, gpu, req, None, &taken);
    assert_eq!(
        p.map(|p| ids(&p.victims)),
        Some(vec![cpu[6], cpu[5], cpu[4]])
    );
    // Not on a node outside what the task may use.
    let elsewhere: Candidates = [NodeId(2)].into_iter().collect();
    let p = stage.take_back(&history, &l.s, gpu, req, Some(&elsewhere), &BTreeSet::new());
    assert_eq!(p, None);
    // Nor on a node held for a waiting preemptor.
    let held = BTreeSet::from([NodeId(1)]);
    let stage = TakeBackStage {
        reserved: &held,
        ..stage
    };
    assert_eq!(
        stage.take_back(&history, &l.s, gpu, req, None, &BTreeSet::new()),
        None
    );
}

#[test]
fn only_a_gpu_task_with_pools_on_and_room_in_the_plan_takes_back() {
    let (mut l, _, gpu) = cluster();
    let cpu_late = tasks(l.apply_bare(submit(spec(1, 1, 0))))[0];
    let index = index_of(&l.s);
    let order: Vec<TaskId> = l.s.pending().iter().copied().collect();
    let mut round = PoolRound::new(
        &l.s,
        Some(Loads::of(&l.s)),
        Some(ReserveHistory::new(2000)),
        &order,
    );
    let cfg = PreemptionConfig::default();
    let none = BTreeSet::new();
    let stage = TakeBackStage {
        index: &index,
        reserved: &none,
        cfg: &cfg,
    };
    let mut feasibility = Feasibility::new(&l.s);
    let mut decided = Decided::default();
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), gpu).expect("admitted");
    let scope = feasibility.scope(head.job);
    let d = stage.decide(round.active(), &decided, &l.s, &head, &scope);
    let Some(Decision::Preempt(p)) = d else {
        panic!("{d:?}");
    };
    assert!(p.take_back);
    assert_eq!(
        stage.decide(None, &decided, &l.s, &head, &scope),
        None,
        "pools off"
    );
    decided.plan.preempt = vec![p; cfg.max_per_plan];
    assert_eq!(
        stage.decide(round.active(), &decided, &l.s, &head, &scope),
        None
    );
    let cpu_head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), cpu_late).expect("admitted");
    let scope = feasibility.scope(cpu_head.job);
    let decided = Decided::default();
    assert_eq!(
        stage.decide(round.active(), &decided, &l.s, &cpu_head, &scope),
        None
    );
}
