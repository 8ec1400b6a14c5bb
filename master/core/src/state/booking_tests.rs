use super::*;
use crate::sched::test_log::{node, spec, submit, submitted_tasks, Log};
use crate::state::*;
use hetsched_common::{Attempt, TaskId};

fn plan(assignments: Vec<Assign>) -> Command {
    Command::ApplyPlan(Plan {
        assignments,
        ..Default::default()
    })
}

fn with_engine(task: TaskId, node: NodeId, kind: EngineKind) -> Assign {
    Assign {
        engine: Some(kind),
        ..Assign::to(task, node)
    }
}

fn accepted(o: &Outcome) -> usize {
    match o {
        Outcome::PlanApplied { accepted, .. } => accepted.len(),
        o => panic!("{o:?}"),
    }
}

fn finish(node: NodeId, task: TaskId, attempt: Attempt) -> Command {
    Command::TaskFinished {
        node,
        task,
        attempt,
        exit_code: 0,
        reason: None,
    }
}

#[test]
fn a_program_task_books_a_gpu_that_a_command_task_then_cannot_take() {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 1, &[]));
    let n = NodeId(1);
    let program = submitted_tasks(l.apply_bare(submit(spec(1, 1, 0))));
    let command = submitted_tasks(l.apply_bare(submit(spec(1, 1, 1))));
    assert_eq!(
        accepted(&l.apply_bare(plan(vec![with_engine(program[0], n, EngineKind::Gpu)]))),
        1
    );
    let t = &l.s.tasks()[&program[0]];
    assert_eq!(
        t.booked,
        Some(Booking {
            kind: EngineKind::Gpu,
            device: Some(0),
            extra: true
        })
    );
    assert_eq!(
        t.gpus,
        vec![(0, 1000)],
        "the device travels in the allocation"
    );
    assert_eq!(l.s.nodes()[&n].booked.get(&EngineKind::Gpu), Some(&1));
    assert_eq!(free_units(&l.s.nodes()[&n], EngineKind::Gpu), 0);
    // The command task asking the only GPU does not fit while the program holds it.
    assert_eq!(
        accepted(&l.apply_bare(plan(vec![Assign::to(command[0], n)]))),
        0
    );
    l.apply_bare(finish(n, program[0], 1));
    assert!(l.s.nodes()[&n].booked.is_empty());
    assert_eq!(l.s.nodes()[&n].free, l.s.nodes()[&n].capacity);
    assert_eq!(
        accepted(&l.apply_bare(plan(vec![Assign::to(command[0], n)]))),
        1
    );
    // And the other way round: the GPU held by the command task cannot be booked.
    let second = submitted_tasks(l.apply_bare(submit(spec(1, 1, 0))));
    assert_eq!(
        accepted(&l.apply_bare(plan(vec![with_engine(second[0], n, EngineKind::Gpu)]))),
        0
    );
}

#[test]
fn cpu_bookings_stop_at_the_cores_and_other_kinds_take_their_units() {
    let mut l = Log::new();
    l.apply_bare(node(1, 2, 0, &[]));
    let n = NodeId(1);
    // Half-core program tasks: the CPU request would fit four, the cores book two.
    let mut s = spec(3, 0, 0);
    s.resources.cpu_milli = 500;
    let tasks = submitted_tasks(l.apply_bare(submit(s)));
    let o = l.apply_bare(plan(
        tasks
            .iter()
            .map(|t| with_engine(*t, n, EngineKind::Cpu))
            .collect(),
    ));
    assert_eq!(accepted(&o), 2);
    assert_eq!(l.s.nodes()[&n].booked.get(&EngineKind::Cpu), Some(&2));
    assert_eq!(free_units(&l.s.nodes()[&n], EngineKind::Cpu), 0);
    assert!(l.s.tasks()[&tasks[2]].booked.is_none());
}

#[test]
fn an_npu_unit_comes_back_when_its_task_is_lost() {
    let mut l = Log::new();
    let mut reg = node(1, 4, 0, &[]);
    if let Command::RegisterNode { capacity, .. } = &mut reg {
        capacity.engines.insert(EngineKind::Npu, 1);
    }
    l.apply_bare(reg);
    let n = NodeId(1);
    let t = submitted_tasks(l.apply_bare(submit(spec(1, 1, 0))))[0];
    assert_eq!(
        accepted(&l.apply_bare(plan(vec![with_engine(t, n, EngineKind::Npu)]))),
        1
    );
    assert_eq!(l.s.nodes()[&n].free.engines.get(&EngineKind::Npu), Some(&0));
    // Lost: the unit comes back with the task's resources.
    l.apply_bare(Command::TaskLost {
        node: n,
        task: t,
        attempt: 1,
    });
    assert_eq!(l.s.nodes()[&n].free.engines.get(&EngineKind::Npu), Some(&1));
    assert!(l.s.nodes()[&n].booked.is_empty());
    assert!(l.s.tasks()[&t].booked.is_none());
}
