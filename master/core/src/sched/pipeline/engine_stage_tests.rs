use super::*;
use crate::sched::pipeline::feasibility_stage::Feasibility;
use crate::sched::pipeline::queue_stage::QueueStage;
use crate::sched::test_log::{index_of, node, spec, submit, Log};
use hetsched_common::TaskId;
use std::collections::BTreeSet;

/// Two slaves with one GPU each (8 CPUs); a job of three one-CPU tasks.
fn cluster() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 1, &[]));
    l.apply_bare(node(2, 8, 1, &[]));
    l.apply_bare(submit(spec(3, 1, 0)));
    l
}

/// The GPU eight times faster than a CPU core: the GPU is the only target, and the CPU
/// (the second-best kind) never pays off against waiting.
fn relation() -> Vec<EngineTotal> {
    vec![
        EngineTotal {
            engine: EngineKind::Gpu,
            total_us: 100_000,
        },
        EngineTotal {
            engine: EngineKind::Cpu,
            total_us: 800_000,
        },
    ]
}

fn stage() -> EngineChoiceStage {
    EngineChoiceStage {
        cfg: EngineChoiceConfig::default(),
    }
}

/// Runs the stage on each pending task in turn; returns the decisions and how many tasks
/// were left waiting for a GPU engine.
fn decide_all(l: &Log, queue_depth: u32, hold: Option<NodeId>) -> (Vec<Option<Decision>>, u32) {
    let rel = relation();
    let mut index = index_of(&l.s);
    let job = l.s.jobs().values().next().expect("job");
    if let Some(n) = hold {
        index
            .reserve(n, TaskId(99), &job.spec.resources)
            .expect("reserve");
    }
    let mut round = EngineRound::default();
    round.relations.insert(job.id, Some(rel.clone()));
    let mut feasibility = Feasibility::new(&l.s);
    let mut queued_now = BTreeMap::new();
    let mut out = Vec::new();
    for task in l.s.pending().clone() {
        let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), task).expect("admitted");
        let scope = feasibility.scope(head.job);
        let d = stage().decide(
            &mut index,
            &mut round,
            queue_depth,
            &queued_now,
            &l.s,
            &head,
            &scope,
        );
        if let Some(Decision::Assign(a)) = &d {
            if a.queued {
                *queued_now.entry(a.node).or_insert(0) += 1;
            }
        }
        out.push(d);
    }
    let load = round.load.expect("built at the first program task");
    (out, load.waiting(EngineKind::Gpu))
}

fn assigned(d: &Option<Decision>) -> (u64, Option<EngineKind>, bool) {
    match d {
        Some(Decision::Assign(a)) => (a.node.0, a.engine, a.queued),
        d => panic!("{d:?}"),
    }
}

#[test]
fn program_tasks_take_free_target_engines_then_wait_rather_than_overflow() {
    let l = cluster();
    let (d, waiting) = decide_all(&l, 0, None);
    assert_eq!(waiting, 1, "the third task waits");
    assert_eq!(assigned(&d[0]), (1, Some(EngineKind::Gpu), false));
    assert_eq!(assigned(&d[1]), (2, Some(EngineKind::Gpu), false));
    // Both GPUs busy, the CPU too slow to pay off, no slave queues: stuck.
    assert_eq!(d[2], Some(Decision::Stuck));
}

#[test]
fn a_task_waiting_for_a_gpu_engine_waits_in_the_masters_queue_not_a_slaves() {
    // Engine units are granted at assignment (a queued task books nothing): even with
    // slave queues on, the third task waits for a GPU in the master's queue.
    let l = cluster();
    let (d, waiting) = decide_all(&l, 2, None);
    assert_eq!(waiting, 1);
    assert_eq!(d[2], Some(Decision::Stuck));
}

#[test]
fn a_gpu_held_by_a_command_task_is_a_busy_gpu_engine() {
    // One node, one GPU, held by a command task: the program task neither takes that GPU
    // nor overflows to the CPU (eight times slower): it waits.
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 1, &[]));
    let cmd = crate::sched::test_log::submitted_tasks(l.apply_bare(submit(spec(1, 1, 1))));
    crate::sched::test_log::assign(&mut l, &cmd, NodeId(1));
    l.apply_bare(submit(spec(1, 1, 0)));
    let rel = relation();
    let mut index = index_of(&l.s);
    let program_job = l.s.jobs().values().last().expect("job");
    let mut round = EngineRound::default();
    round.relations.insert(program_job.id, Some(rel.clone()));
    let task = *l.s.pending().first().expect("pending");
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), task).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let d = stage().decide(
        &mut index,
        &mut round,
        4,
        &BTreeMap::new(),
        &l.s,
        &head,
        &scope,
    );
    assert_eq!(d, Some(Decision::Stuck));
    let load = round.load.expect("built");
    assert_eq!(load.free(NodeId(1), EngineKind::Gpu), 0, "{load:?}");
}

#[test]
fn a_node_held_for_another_preemptor_is_passed_over() {
    let l = cluster();
    let (d, waiting) = decide_all(&l, 0, Some(NodeId(1)));
    assert_eq!(assigned(&d[0]), (2, Some(EngineKind::Gpu), false));
    assert_eq!(
        d[1],
        Some(Decision::Stuck),
        "node 1 is held, node 2's GPU busy"
    );
    assert_eq!(d[2], Some(Decision::Stuck));
    assert_eq!(waiting, 2);
}

#[test]
fn a_task_without_a_relation_is_left_to_selection() {
    let l = cluster();
    let mut index = index_of(&l.s);
    let mut round = EngineRound::default();
    let task = *l.s.pending().first().expect("pending");
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), task).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let d = stage().decide(
        &mut index,
        &mut round,
        4,
        &BTreeMap::new(),
        &l.s,
        &head,
        &scope,
    );
    assert_eq!(d, None);
    assert!(round.load.is_none(), "no engine use built for it");
    assert_eq!(round.relation(&l.s, head.job), None);
}
