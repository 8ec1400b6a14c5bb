use crate::sched::index::PolicyKind;
use crate::sched::test_log::{node, spec, Log};
use crate::sched::{IndexedScheduler, Scheduler};
use crate::state::{Command, Outcome};
use hetsched_common::{JobId, JobSpec, NodeId, TaskId};

/// A scheduler over one node of `cpus` cores.
fn setup(cpus: u64) -> (Log, IndexedScheduler) {
    let mut l = Log::new();
    let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 1);
    l.apply(&mut s, node(1, cpus, 0, &[]));
    (l, s)
}

fn job(
    l: &mut Log,
    s: &mut IndexedScheduler,
    count: u32,
    f: impl FnOnce(&mut JobSpec),
) -> (JobId, Vec<TaskId>) {
    let mut spec = spec(count, 1, 0);
    f(&mut spec);
    match l.apply(s, Command::SubmitJob { spec }) {
        Outcome::Submitted { job, tasks } => (job, tasks),
        o => panic!("{o:?}"),
    }
}

/// Plans, applies the plan and reports every placed task started; the tasks placed.
fn round(l: &mut Log, s: &mut IndexedScheduler) -> Vec<TaskId> {
    let plan = s.plan(&l.s);
    let placed: Vec<TaskId> = plan.assignments.iter().map(|a| a.task).collect();
    if placed.is_empty() {
        return placed;
    }
    l.apply(s, Command::ApplyPlan(plan));
    for t in &placed {
        l.apply(
            s,
            Command::TaskStarted {
                node: NodeId(1),
                task: *t,
                attempt: 1,
            },
        );
    }
    placed
}

fn end(l: &mut Log, s: &mut IndexedScheduler, task: TaskId, code: i32) {
    l.apply(
        s,
        Command::TaskFinished {
            node: NodeId(1),
            task,
            attempt: 1,
            exit_code: code,
            reason: None,
        },
    );
}

/// The latest plan's waiting reason and detail for `task`.
fn waiting(l: &Log, s: &IndexedScheduler, task: TaskId) -> Option<(String, String)> {
    let (board, _) = s.waiting()?;
    let t = l.s.task(task)?;
    let j = l.s.job(t.job)?;
    let w = board.get(t, j, l.s.last_ms())?;
    let info = crate::sched::waiting::Reader::new(&l.s).read(t, j, &w);
    Some((info.reason, info.detail))
}

#[test]
fn a_dependent_waits_for_its_job_to_succeed_while_others_run() {
    let (mut l, mut s) = setup(8);
    let (a, at) = job(&mut l, &mut s, 1, |_| {});
    let (_, bt) = job(&mut l, &mut s, 2, |j| j.after = vec![a]);
    let (_, ct) = job(&mut l, &mut s, 1, |_| {});
    // b is held; c, asking the same, is not blocked behind it.
    assert_eq!(round(&mut l, &mut s), vec![at[0], ct[0]]);
    assert_eq!(
        waiting(&l, &s, bt[1]),
        Some(("dependency".into(), "job-1 running (after)".into()))
    );
    end(&mut l, &mut s, at[0], 0);
    assert_eq!(round(&mut l, &mut s), bt);
}

#[test]
fn after_each_lets_each_task_through_as_its_partner_succeeds() {
    let (mut l, mut s) = setup(8);
    let (a, at) = job(&mut l, &mut s, 3, |_| {});
    let (_, bt) = job(&mut l, &mut s, 3, |j| j.after_each = Some(a));
    assert_eq!(round(&mut l, &mut s), at);
    end(&mut l, &mut s, at[1], 0);
    assert_eq!(round(&mut l, &mut s), vec![bt[1]]);
    assert_eq!(
        waiting(&l, &s, bt[2]).map(|w| w.0),
        Some("dependency".to_string())
    );
}

#[test]
fn max_running_bounds_the_tasks_under_way() {
    let (mut l, mut s) = setup(8);
    let (_, t) = job(&mut l, &mut s, 5, |j| j.max_running = Some(2));
    assert_eq!(round(&mut l, &mut s), t[..2].to_vec());
    assert_eq!(
        waiting(&l, &s, t[3]),
        Some((
            "throttle".into(),
            "max_running 2: 2 of its tasks assigned or running".into()
        ))
    );
    assert!(round(&mut l, &mut s).is_empty());
    end(&mut l, &mut s, t[0], 0);
    assert_eq!(round(&mut l, &mut s), vec![t[2]]);
}

#[test]
fn one_singleton_job_per_user_and_name_at_a_time() {
    let (mut l, mut s) = setup(8);
    let single = |j: &mut JobSpec| {
        j.name = "nightly".into();
        j.singleton = true;
    };
    let (a, at) = job(&mut l, &mut s, 2, single);
    let (_, bt) = job(&mut l, &mut s, 1, single);
    let (_, other) = job(&mut l, &mut s, 1, |j| {
        j.name = "other".into();
        j.singleton = true;
    });
    assert_eq!(round(&mut l, &mut s), vec![at[0], at[1], other[0]]);
    assert_eq!(
        waiting(&l, &s, bt[0]),
        Some(("dependency".into(), format!("singleton: {a} running")))
    );
    end(&mut l, &mut s, at[0], 0);
    assert!(round(&mut l, &mut s).is_empty(), "job a is still under way");
    end(&mut l, &mut s, at[1], 0);
    assert_eq!(round(&mut l, &mut s), bt);
}

#[test]
fn a_plan_that_only_holds_tasks_is_quiet_until_a_job_ends() {
    let (mut l, mut s) = setup(8);
    let (a, at) = job(&mut l, &mut s, 1, |_| {});
    let (_, bt) = job(&mut l, &mut s, 1, |j| j.after = vec![a]);
    assert_eq!(round(&mut l, &mut s), at);
    assert!(round(&mut l, &mut s).is_empty());
    let skipped = s.plans_skipped();
    assert!(round(&mut l, &mut s).is_empty());
    assert_eq!(s.plans_skipped(), skipped + 1, "nothing changed: skipped");
    end(&mut l, &mut s, at[0], 0);
    assert_eq!(round(&mut l, &mut s), bt);
}
