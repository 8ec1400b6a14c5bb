use super::*;
use crate::sched::multiqueue::Ordering;
use crate::sched::test_log::{index_of, node, spec, submit, Log};
use crate::state::TaskRef;

fn cluster() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 2, &[]));
    l.apply_bare(submit(spec(2, 1, 0)));
    l.apply_bare(submit(spec(1, 1, 1)));
    l
}

fn head(l: &Log, task: u64) -> PendingTask<'_> {
    QueueStage::admit(&l.s, 0, &BTreeSet::new(), TaskId(task)).expect("admitted")
}

#[test]
fn recording_a_decision_updates_what_later_stages_read() {
    let l = cluster();
    let mut d = Decided::default();
    let mut queued = Assign::to(TaskId(1), NodeId(1));
    queued.queued = true;
    d.record(&head(&l, 1), Decision::Assign(queued));
    d.record(
        &head(&l, 2),
        Decision::Assign(Assign::to(TaskId(2), NodeId(1))),
    );
    assert_eq!(d.plan.assignments.len(), 2);
    assert_eq!(
        d.queued_now,
        BTreeMap::from([(NodeId(1), 1)]),
        "queued ones only"
    );
    assert!(d.preempt_room(1));
    let victim = TaskRef {
        task: TaskId(2),
        node: NodeId(1),
        attempt: 1,
    };
    d.record(
        &head(&l, 3),
        Decision::Preempt(Preemption {
            preemptor: TaskId(3),
            node: NodeId(1),
            victims: vec![victim],
            take_back: false,
        }),
    );
    assert_eq!(d.victims, BTreeSet::from([TaskId(2)]));
    assert_eq!(d.plan.preempt.len(), 1);
    assert!(!d.preempt_room(1) && d.preempt_room(2));
    let h = head(&l, 1);
    d.record(&h, Decision::Stuck);
    assert_eq!(d.stuck, BTreeSet::from([(h.t.job, h.t.priority)]));
    let before = format!("{d:?}");
    d.record(&head(&l, 2), Decision::Skip);
    assert_eq!(format!("{d:?}"), before, "a skip records nothing");
}

#[test]
fn a_plan_context_starts_from_the_queue_order_and_gives_the_loads_back() {
    let l = cluster();
    let pipeline = QueueStage {
        ordering: Ordering::Pipeline,
    };
    let ctx = PlanContext::new(
        &l.s,
        7,
        &pipeline,
        Some(Loads::of(&l.s)),
        Some(ReserveHistory::new(2000)),
    );
    // The pipeline serves the GPU queue first.
    let ids: Vec<TaskId> = ctx.order.iter().map(|q| q.task).collect();
    assert_eq!(ids, vec![TaskId(3), TaskId(1), TaskId(2)]);
    assert_eq!(ctx.now_ms, 7);
    assert!(ctx.decided.plan.is_empty());
    let mut index = index_of(&l.s);
    let (plan, loads) = ctx.finish(&mut index);
    assert!(plan.is_empty());
    assert!(loads.is_some());
    let fifo = QueueStage {
        ordering: Ordering::Submission,
    };
    let ctx = PlanContext::new(&l.s, 0, &fifo, None, None);
    let ids: Vec<TaskId> = ctx.order.iter().map(|q| q.task).collect();
    assert_eq!(ids, vec![TaskId(1), TaskId(2), TaskId(3)]);
    assert!(ctx.finish(&mut index).1.is_none());
}
