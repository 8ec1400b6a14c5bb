use super::*;
use hetsched_common::{JobSpec, TaskId};

fn job(book: &mut JobBook, tasks: u32) -> JobId {
    let id = book.allocate_id();
    book.insert(Job {
        id,
        spec: JobSpec::default(),
        tasks: (0..tasks as u64).map(|i| TaskId(id.0 * 100 + i)).collect(),
        submitted_ms: 0,
        submitted_index: 0,
        finished_ms: None,
        open: tasks,
        candidates: Vec::new(),
    });
    id
}

#[test]
fn ids_are_handed_out_in_order_and_never_reused() {
    let mut book = JobBook::default();
    let a = job(&mut book, 1);
    let b = job(&mut book, 1);
    assert_eq!((a, b), (JobId(1), JobId(2)));
    assert!(book.remove(&a).is_some());
    assert!(book.was_collected(a));
    assert!(!book.was_collected(b));
    assert!(!book.was_collected(JobId(3)), "never handed out");
    assert_eq!(job(&mut book, 1), JobId(3));
}

#[test]
fn a_job_finishes_when_its_last_task_is_final() {
    let mut book = JobBook::default();
    let a = job(&mut book, 3);
    let tasks = [TaskId(1), TaskId(2), TaskId(3)];
    book.tasks_final(a, &tasks[..2], 50);
    assert!(book.get(&a).is_some_and(|j| j.finished_ms.is_none()));
    assert!(!book.any_finished_before(1000));
    book.tasks_final(a, &tasks[2..], 70);
    assert_eq!(book.get(&a).and_then(|j| j.finished_ms), Some(70));
    // Noted for the dependency rules, in the order they ended, once.
    assert_eq!(
        book.take_ended(),
        vec![(a, tasks[..2].to_vec()), (a, tasks[2..].to_vec())]
    );
    assert!(book.take_ended().is_empty());
    assert_eq!(book.finished_before(71), vec![(70, a)]);
    assert!(book.finished_before(70).is_empty());
    book.unmark_finished((70, a));
    assert!(!book.any_finished_before(1000));
}

#[test]
fn rebuild_recounts_open_tasks_and_dates_old_finished_jobs_at_the_snapshot() {
    let mut book = JobBook::default();
    let a = job(&mut book, 2);
    let b = job(&mut book, 2);
    let mut restored = JobBook::from_snapshot(book.all().clone(), book.next_id());
    restored.rebuild(|j| if j.id == a { 0 } else { 1 }, 900);
    assert_eq!(restored.get(&a).and_then(|j| j.finished_ms), Some(900));
    assert_eq!(restored.get(&b).map(|j| j.open), Some(1));
    assert_eq!(restored.finished_before(901), vec![(900, a)]);
}

#[test]
fn a_planning_copy_keeps_the_selected_jobs_and_the_next_id() {
    let mut book = JobBook::default();
    let a = job(&mut book, 1);
    job(&mut book, 1);
    let copy = book.planning_copy(|j| j.id == a);
    assert_eq!(copy.all().len(), 1);
    assert_eq!(copy.next_id(), 2);
}
