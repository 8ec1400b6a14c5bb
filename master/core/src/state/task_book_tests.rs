use super::*;
use hetsched_common::JobId;

fn task(book: &mut TaskBook) -> TaskId {
    let id = book.allocate_id();
    book.insert(id, Task::new(id, JobId(1), 0));
    book.enqueue(id);
    id
}

#[test]
fn ids_are_consecutive_and_the_queue_is_in_id_order() {
    let mut book = TaskBook::default();
    let ids: Vec<TaskId> = (0..3).map(|_| task(&mut book)).collect();
    assert_eq!(ids, vec![TaskId(1), TaskId(2), TaskId(3)]);
    assert!(book.dequeue(&TaskId(2)));
    assert!(!book.dequeue(&TaskId(2)));
    book.enqueue(TaskId(2));
    let queue: Vec<TaskId> = book.pending().iter().copied().collect();
    assert_eq!(queue, ids);
}

#[test]
fn a_forgotten_task_leaves_the_table_and_the_queue() {
    let mut book = TaskBook::default();
    let a = task(&mut book);
    let b = task(&mut book);
    assert!(book.forget(&a));
    assert!(!book.forget(&a));
    assert!(!book.pending().contains(&a));
    assert!(book.was_collected(a));
    assert!(!book.was_collected(b));
    assert!(!book.was_collected(TaskId(9)));
}

#[test]
fn a_preemptor_waits_until_told_otherwise() {
    let mut book = TaskBook::default();
    let a = task(&mut book);
    let victim = TaskRef {
        task: TaskId(7),
        node: NodeId(2),
        attempt: 1,
    };
    book.await_victims(a, NodeId(2), vec![victim]);
    assert_eq!(book.awaiting()[&a], (NodeId(2), vec![victim]));
    book.stop_awaiting(&a);
    assert!(book.awaiting().is_empty());
}

#[test]
fn a_planning_copy_keeps_the_named_tasks_the_queue_and_the_next_id() {
    let mut book = TaskBook::default();
    let a = task(&mut book);
    task(&mut book);
    let copy = book.planning_copy([a].iter());
    assert_eq!(copy.all().len(), 1);
    assert_eq!(copy.pending().len(), 2);
    assert_eq!(copy.next_id(), 2);
}
