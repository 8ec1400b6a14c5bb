use super::*;
use crate::sched::test_log::{index_of, node, spec, submit, Log};
use hetsched_common::NodeId;

/// One GPU node (8 CPUs, 2 GPUs: a reserve of 4 CPUs at 2 per GPU); a GPU task that could
/// use its GPUs but fits nowhere (more memory than the node has) and two CPU tasks wait.
fn cluster() -> (Log, Vec<TaskId>) {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 2, &[]));
    let mut waiting = spec(1, 2, 1);
    waiting.resources.mem_mib = 1_000_000;
    l.apply_bare(submit(waiting));
    l.apply_bare(submit(spec(2, 1, 0)));
    let order = l.s.pending().iter().copied().collect();
    (l, order)
}

fn free_cpu(index: &PlacementIndex) -> u64 {
    index.free(NodeId(1)).map_or(0, |f| f.cpu_milli)
}

#[test]
fn a_cpu_task_does_not_see_the_unused_reserve_while_a_gpu_task_waits() {
    let (l, order) = cluster();
    let mut index = index_of(&l.s);
    let mut round = PoolRound::new(
        &l.s,
        Some(Loads::of(&l.s)),
        Some(ReserveHistory::new(2000)),
        &order,
    );
    assert!(round.active().is_some());
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::Cpu);
    assert_eq!(free_cpu(&index), 4000, "the 4-CPU reserve is hidden");
    // Hiding twice for CPU tasks in a row hides once.
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::Cpu);
    assert_eq!(free_cpu(&index), 4000);
    // A GPU task sees the whole node again.
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::GpuSingle);
    assert_eq!(free_cpu(&index), 8000);
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::Cpu);
    assert_eq!(free_cpu(&index), 4000);
    // The end of the plan shows what is hidden and gives the loads back.
    assert!(round.finish(&mut index).is_some());
    assert_eq!(free_cpu(&index), 8000);
}

#[test]
fn with_no_gpu_task_waiting_cpu_tasks_see_everything() {
    let (l, order) = cluster();
    let cpu_only: Vec<TaskId> = order[1..].to_vec();
    let mut index = index_of(&l.s);
    let mut round = PoolRound::new(
        &l.s,
        Some(Loads::of(&l.s)),
        Some(ReserveHistory::new(2000)),
        &cpu_only,
    );
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::Cpu);
    assert_eq!(free_cpu(&index), 8000);
}

#[test]
fn pools_are_off_without_a_history_or_without_loads() {
    let (l, order) = cluster();
    let mut index = index_of(&l.s);
    let mut round = PoolRound::new(&l.s, Some(Loads::of(&l.s)), None, &order);
    assert!(round.active().is_none());
    PoolBorrowStage::before(&mut index, &mut round, QueueKind::Cpu);
    assert_eq!(free_cpu(&index), 8000);
    assert!(round.finish(&mut index).is_some(), "the loads go back");
    let mut round = PoolRound::new(&l.s, None, Some(ReserveHistory::new(2000)), &order);
    assert!(round.active().is_none());
    assert!(round.finish(&mut index).is_none());
}
