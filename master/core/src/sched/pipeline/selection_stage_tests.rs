use super::*;
use crate::sched::loads::Loads;
use crate::sched::multiqueue::ReserveHistory;
use crate::sched::pipeline::feasibility_stage::Feasibility;
use crate::sched::pipeline::pool_round::PoolRound;
use crate::sched::pipeline::queue_stage::QueueStage;
use crate::sched::test_log::{index_of, node, spec, submit, Log};
use hetsched_common::JobSpec;
use std::collections::BTreeSet;

/// Runs `stage` on the first pending task of `l` over `index`, pools off.
fn decide(stage: &mut SelectionStage, index: &mut PlacementIndex, l: &Log) -> Option<Decision> {
    let task = *l.s.pending().first().expect("pending");
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), task).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    stage.decide(index, None, &head, &scope)
}

fn placed_on(d: Option<Decision>) -> u64 {
    match d {
        Some(Decision::Assign(a)) => {
            assert!(!a.queued && !a.borrowed && a.engine.is_none(), "{a:?}");
            a.node.0
        }
        d => panic!("{d:?}"),
    }
}

/// Node 1 with 2 CPUs (serving partitions `small` and `default`), node 2 with 8.
fn two_nodes() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 2, 0, &["small", "default"]));
    l.apply_bare(node(2, 8, 0, &[]));
    l
}

#[test]
fn the_policy_picks_among_the_nodes_that_fit_and_the_take_is_tentative() {
    let mut l = two_nodes();
    l.apply_bare(submit(spec(1, 1, 0)));
    for (policy, node) in [(PolicyKind::BestFit, 1), (PolicyKind::LeastFit, 2)] {
        let mut index = index_of(&l.s);
        let mut stage = SelectionStage::new(policy, 0);
        assert_eq!(placed_on(decide(&mut stage, &mut index, &l)), node);
        let cpus = l.s.nodes()[&NodeId(node)].free.cpu_milli;
        assert_eq!(
            index.free(NodeId(node)).map(|f| f.cpu_milli),
            Some(cpus - 1000)
        );
    }
}

#[test]
fn the_scope_constrains_the_policy_and_nothing_fitting_passes_on() {
    let mut l = two_nodes();
    l.apply_bare(submit(JobSpec {
        partition: "small".into(),
        ..spec(1, 1, 0)
    }));
    let mut index = index_of(&l.s);
    let mut stage = SelectionStage::new(PolicyKind::LeastFit, 0);
    assert_eq!(
        placed_on(decide(&mut stage, &mut index, &l)),
        1,
        "partition small"
    );
    // 3 CPUs fit node 2 only, which the partition excludes.
    let mut l = two_nodes();
    l.apply_bare(submit(JobSpec {
        partition: "small".into(),
        ..spec(1, 3, 0)
    }));
    let mut index = index_of(&l.s);
    assert_eq!(decide(&mut stage, &mut index, &l), None);
    assert_eq!(index.free(NodeId(2)).map(|f| f.cpu_milli), Some(8000));
}

#[test]
fn under_frag_a_cpu_task_goes_to_a_cpu_only_node_first() {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &[]));
    l.apply_bare(node(2, 16, 2, &[]));
    l.apply_bare(submit(spec(1, 2, 0)));
    let mut stage = SelectionStage::new(PolicyKind::Frag, 0);
    assert_eq!(stage.cpu_kind(), PolicyKind::LeastFit);
    stage.rebuild(&l.s);
    let mut index = index_of(&l.s);
    assert_eq!(placed_on(decide(&mut stage, &mut index, &l)), 1);
    // Least-fit alone takes the 16-CPU GPU node.
    let mut plain = SelectionStage::new(PolicyKind::LeastFit, 0);
    let mut index = index_of(&l.s);
    assert_eq!(placed_on(decide(&mut plain, &mut index, &l)), 2);
}

/// Where `policy` places a 4-CPU one-GPU task (naming model T4 when `pinned`) with node 1
/// (5 CPUs, 2 T4s) and node 2 (16 CPUs, 2 T4s) free: best-fit packs node 1, `frag` goes to
/// node 2 (on node 1 the other T4 would be left with one CPU beside it, a fragment).
fn one_gpu_task_on(policy: PolicyKind, pinned: bool) -> u64 {
    let mut l = Log::new();
    l.apply_bare(node(1, 5, 2, &[]));
    l.apply_bare(node(2, 16, 2, &[]));
    let mut s = spec(1, 4, 1);
    if pinned {
        s.resources.gpu.models = vec!["T4".into()];
    }
    l.apply_bare(submit(s));
    let mut stage = SelectionStage::new(policy, 0);
    stage.rebuild(&l.s);
    let mut index = index_of(&l.s);
    placed_on(decide(&mut stage, &mut index, &l))
}

#[test]
fn auto_places_as_frag_until_recent_gpu_tasks_name_models_then_as_best_fit() {
    for pinned in [false, true] {
        assert_eq!(one_gpu_task_on(PolicyKind::BestFit, pinned), 1);
        assert_eq!(one_gpu_task_on(PolicyKind::Frag, pinned), 2);
    }
    // No recent GPU task names a model: frag's choice.
    assert_eq!(one_gpu_task_on(PolicyKind::Auto, false), 2);
    // All of them do: best-fit's.
    assert_eq!(one_gpu_task_on(PolicyKind::Auto, true), 1);
    assert_eq!(
        SelectionStage::new(PolicyKind::Auto, 0).cpu_kind(),
        PolicyKind::LeastFit
    );
}

/// With pools on and no GPU task waiting, a CPU task placed into a GPU node's unused
/// reserve (8 CPUs, 2 GPUs: 4 reserved) is marked borrowed.
fn borrowed(cpus: u64) -> bool {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 2, &[]));
    l.apply_bare(submit(spec(1, cpus, 0)));
    let order: Vec<TaskId> = l.s.pending().iter().copied().collect();
    let mut round = PoolRound::new(
        &l.s,
        Some(Loads::of(&l.s)),
        Some(ReserveHistory::new(2000)),
        &order,
    );
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), order[0]).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let mut index = index_of(&l.s);
    let mut stage = SelectionStage::new(PolicyKind::BestFit, 0);
    match stage.decide(&mut index, round.active(), &head, &scope) {
        Some(Decision::Assign(a)) => a.borrowed,
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_cpu_task_eating_into_the_reserve_is_placed_as_borrowed() {
    assert!(borrowed(6), "2 CPUs left: 2 of the 4 reserved are used");
    assert!(!borrowed(2), "6 CPUs left: the reserve is untouched");
}
