use super::*;
use crate::sched::test_log::{assign, node, spec, submit, Log};
use crate::state::{Command, Outcome};
use hetsched_common::{JobSpec, NodeId};

fn submitted(o: Outcome) -> Vec<TaskId> {
    match o {
        Outcome::Submitted { tasks, .. } => tasks,
        o => panic!("{o:?}"),
    }
}

#[test]
fn drf_order_reads_what_users_hold_from_the_loads_and_none_means_nobody_holds_anything() {
    let mut l = Log::new();
    l.apply_bare(node(1, 8, 0, &[]));
    let held = submitted(l.apply_bare(submit(JobSpec {
        user: "a".into(),
        ..spec(2, 1, 0)
    })));
    assign(&mut l, &held, NodeId(1));
    let a = submitted(l.apply_bare(submit(JobSpec {
        user: "a".into(),
        ..spec(1, 1, 0)
    })))[0];
    let b = submitted(l.apply_bare(submit(JobSpec {
        user: "b".into(),
        ..spec(1, 1, 0)
    })))[0];
    let drf = QueueStage {
        ordering: Ordering::Drf,
    };
    let loads = Loads::of(&l.s);
    assert_eq!(drf.order(&l.s, Some(&loads)), vec![b, a], "a holds 2 CPUs");
    assert_eq!(drf.order(&l.s, None), vec![a, b], "a tie: submission order");
    let fifo = QueueStage {
        ordering: Ordering::Submission,
    };
    assert_eq!(fifo.order(&l.s, Some(&loads)), vec![a, b]);
}

#[test]
fn admit_passes_over_a_task_backing_off_until_its_time() {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &[]));
    let t = submitted(l.apply_bare(submit(JobSpec {
        retries: 1,
        backoff_ms: 1_000,
        ..spec(1, 1, 0)
    })))[0];
    assign(&mut l, &[t], NodeId(1));
    // It fails at leader time 0: it may run again from 1 000 on.
    l.apply_bare(Command::TaskFinished {
        node: NodeId(1),
        task: t,
        attempt: 1,
        exit_code: 3,
        reason: None,
    });
    assert_eq!(l.s.tasks()[&t].not_before_ms, Some(1_000));
    let none = BTreeSet::new();
    assert!(QueueStage::admit(&l.s, 999, &none, t).is_none());
    let head = QueueStage::admit(&l.s, 1_000, &none, t).expect("backoff over");
    assert_eq!(head.task, t);
    assert_eq!(head.req.cpu_milli, 1000);
    assert!(!head.is_gpu());
}

#[test]
fn admit_passes_over_a_stuck_job_and_unknown_tasks_and_classifies_the_rest() {
    let mut l = Log::new();
    let cpu = submitted(l.apply_bare(submit(spec(2, 1, 0))));
    let gpu = submitted(l.apply_bare(submit(spec(1, 1, 2))))[0];
    let job = l.s.tasks()[&cpu[0]].job;
    let stuck = BTreeSet::from([(job, l.s.tasks()[&cpu[0]].priority)]);
    assert!(cpu
        .iter()
        .all(|t| QueueStage::admit(&l.s, 0, &stuck, *t).is_none()));
    let head = QueueStage::admit(&l.s, 0, &stuck, gpu).expect("another job");
    assert_eq!(head.queue, QueueKind::GpuSingle);
    assert!(head.is_gpu());
    assert_eq!(head.job.id, head.t.job);
    // Same job, another priority: not stuck.
    let other = BTreeSet::from([(job, i64::MAX)]);
    assert!(QueueStage::admit(&l.s, 0, &other, cpu[0]).is_some());
    assert!(QueueStage::admit(&l.s, 0, &stuck, TaskId(999)).is_none());
}
