//! Broken variants: every invariant check fires on a hand-corrupted state. The state is the
//! fixture cluster (clean under every check), corrupted through the core's `forge` test
//! hooks, so a check that could never fail would show up here.

use super::fixture::{cluster, JOB_B, JOB_DONE, JOB_U1, NODE_A, NODE_B};
use super::invariants::*;
use hetsched_common::{JobId, TaskId, TaskState};
use hetsched_master_core::state::{Assign, ClusterState, Command, Outcome, Plan, TaskRef};

/// The fixture cluster, checked clean, and the checker's memory of it.
fn clean() -> (ClusterState, Model) {
    let state = super::driver::replay(&cluster()).expect("the fixture is clean");
    let mut model = Model::default();
    for (job, j) in state.jobs() {
        model.acknowledge(*job, j.tasks.clone());
    }
    assert_eq!(check_all(&state, &mut model), vec![]);
    let a = &state.nodes()[&NODE_A];
    assert!(!a.stopping.is_empty() && !a.compress_reserves.is_empty());
    assert!(!state.nodes()[&NODE_B].queued.is_empty());
    (state, model)
}

fn fired(violations: &[Violation], check: Check) -> bool {
    violations.iter().any(|v| v.check == check)
}

fn assert_fires(violations: Vec<Violation>, check: Check) {
    assert!(
        fired(&violations, check),
        "expected {check:?} among {violations:#?}"
    );
}

#[test]
fn capacity_check_catches_a_task_holding_more_than_the_node() {
    let (mut s, _) = clean();
    if let Some(t) = s.forge_tasks_mut().get_mut(&TaskId(2)) {
        t.cpu_milli = Some(100_000);
    }
    assert_fires(check_resources(&s), Check::Capacity);
}

#[test]
fn capacity_check_catches_free_above_capacity() {
    let (mut s, _) = clean();
    if let Some(n) = s.forge_nodes_mut().get_mut(&NODE_B) {
        n.free.mem_mib = n.capacity.mem_mib + 1;
    }
    assert_fires(check_resources(&s), Check::Capacity);
}

#[test]
fn free_check_catches_a_drifted_free_vector() {
    let (mut s, _) = clean();
    if let Some(n) = s.forge_nodes_mut().get_mut(&NODE_A) {
        n.free.cpu_milli -= 500;
    }
    let v = check_resources(&s);
    assert_fires(v.clone(), Check::Free);
    assert!(!fired(&v, Check::Capacity), "{v:#?}");
}

#[test]
fn free_check_counts_stopping_attempts_compression_holds_and_gpu_devices() {
    let (s, _) = clean();
    let mut forged = s.clone();
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.stopping.clear();
    }
    assert_fires(check_resources(&forged), Check::Free);
    let mut forged = s.clone();
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.compress_reserves.clear();
    }
    assert_fires(check_resources(&forged), Check::Free);
    let mut forged = s;
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.free.gpus[0].free_milli = 1000;
    }
    assert_fires(check_resources(&forged), Check::Free);
}

#[test]
fn booking_check_catches_more_units_booked_than_the_node_has() {
    let (s, _) = clean();
    let mut forged = s.clone();
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.booked.insert(hetsched_common::EngineKind::Gpu, 9);
    }
    let v = check_resources(&forged);
    assert_fires(v.clone(), Check::Capacity);
    assert_fires(v, Check::Free);
    // A task's booking the node does not count.
    let mut forged = s;
    let on_b = *forged.nodes()[&NODE_B]
        .tasks
        .iter()
        .next()
        .expect("a task on B");
    if let Some(t) = forged.forge_tasks_mut().get_mut(&on_b) {
        t.booked = Some(hetsched_master_core::state::Booking {
            kind: hetsched_common::EngineKind::Cpu,
            device: None,
            extra: false,
        });
    }
    assert_fires(check_resources(&forged), Check::Free);
}

#[test]
fn membership_check_catches_lost_and_misplaced_tasks() {
    let (s, _) = clean();
    // A running task missing from its node.
    let mut forged = s.clone();
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_B) {
        n.tasks.remove(&TaskId(3));
    }
    assert_fires(check_membership(&forged), Check::Membership);
    // A pending task missing from the pending set.
    let mut forged = s.clone();
    forged.forge_pending_mut().remove(&TaskId(5));
    assert_fires(check_membership(&forged), Check::Membership);
    // A finished task still on a node.
    let mut forged = s.clone();
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.tasks.insert(TaskId(6));
    }
    assert_fires(check_membership(&forged), Check::Membership);
    // The same task queued on one node and held on another.
    let mut forged = s;
    if let Some(n) = forged.forge_nodes_mut().get_mut(&NODE_A) {
        n.queued.push(TaskId(4));
    }
    assert_fires(check_membership(&forged), Check::Membership);
}

#[test]
fn history_check_catches_an_attempt_going_down() {
    let (mut s, mut m) = clean();
    if let Some(t) = s.forge_tasks_mut().get_mut(&TaskId(2)) {
        t.status.attempt = 0;
    }
    assert_fires(check_history(&s, &mut m), Check::Attempts);
}

#[test]
fn history_check_catches_a_final_task_running_again() {
    let (mut s, mut m) = clean();
    if let Some(t) = s.forge_tasks_mut().get_mut(&TaskId(6)) {
        t.status.state = TaskState::Running;
    }
    assert_fires(check_history(&s, &mut m), Check::FinalRan);
}

#[test]
fn history_check_catches_a_task_vanishing_before_it_ended() {
    let (mut s, mut m) = clean();
    s.forge_tasks_mut().remove(&TaskId(5));
    assert_fires(check_history(&s, &mut m), Check::FinalRan);
}

#[test]
fn submission_check_catches_a_lost_or_early_collected_job() {
    let (s, mut m) = clean();
    // A job removed with its tasks while they were pending: not "collected after it ended".
    let mut forged = s.clone();
    forged.forge_jobs_mut().remove(&JOB_U1);
    forged.forge_tasks_mut().remove(&TaskId(5));
    forged.forge_pending_mut().remove(&TaskId(5));
    let mut v = check_history(&forged, &mut m.clone());
    v.extend(check_submissions(&forged, &mut m.clone()));
    assert_fires(v, Check::Submissions);
    // A job acknowledged that the state never heard of.
    m.acknowledge(JobId(999), vec![TaskId(999)]);
    assert_fires(check_submissions(&s, &mut m), Check::Submissions);
}

#[test]
fn derived_check_catches_wrong_open_counts_and_finish_times() {
    let (s, _) = clean();
    let mut forged = s.clone();
    if let Some(j) = forged.forge_jobs_mut().get_mut(&JOB_B) {
        j.open = 5;
    }
    assert_fires(check_derived(&forged), Check::Derived);
    let mut forged = s;
    if let Some(j) = forged.forge_jobs_mut().get_mut(&JOB_DONE) {
        j.finished_ms = None;
    }
    assert_fires(check_derived(&forged), Check::Derived);
}

#[test]
fn round_trip_check_catches_a_state_that_restores_differently() {
    let (s, _) = clean();
    // A task made final behind its job's back: the restore recounts the job as finished
    // (so its serialised finish time, and the hash, change).
    let mut forged = s.clone();
    if let Some(t) = forged.forge_tasks_mut().get_mut(&TaskId(5)) {
        t.status.state = TaskState::Cancelled;
    }
    forged.forge_pending_mut().remove(&TaskId(5));
    let v = check_round_trip(&forged);
    assert!(
        v.iter()
            .any(|v| v.check == Check::RoundTrip && v.what.contains("hash")),
        "{v:#?}"
    );
    // A derived count only (not serialised): the hash agrees, the restored state does not.
    let mut forged = s;
    if let Some(j) = forged.forge_jobs_mut().get_mut(&JOB_B) {
        j.open = 5;
    }
    assert_fires(check_round_trip(&forged), Check::RoundTrip);
}

#[test]
fn admission_check_catches_wrong_priorities_and_quota_overruns() {
    let (s, _) = clean();
    let submitted = Outcome::Submitted {
        job: JOB_U1,
        tasks: vec![TaskId(5)],
    };
    // As if u1's job were the entry just applied.
    let mut now = s.clone();
    let last = now.last_index();
    if let Some(j) = now.forge_jobs_mut().get_mut(&JOB_U1) {
        j.submitted_index = last;
    }
    assert_eq!(check_admission(&now, &submitted), vec![]);
    let mut forged = now.clone();
    if let Some(t) = forged.forge_tasks_mut().get_mut(&TaskId(5)) {
        t.priority = 9;
    }
    assert_fires(check_admission(&forged, &submitted), Check::Quota);
    let mut forged = now;
    if let Some(j) = forged.forge_jobs_mut().get_mut(&JOB_U1) {
        j.spec.resources.cpu_milli = 17_000;
    }
    assert_fires(check_admission(&forged, &submitted), Check::Quota);
}

#[test]
fn step_check_catches_a_refused_command_that_changed_the_state() {
    let (s, _) = clean();
    let mut after = s.clone();
    if let Some(t) = after.forge_tasks_mut().get_mut(&TaskId(3)) {
        t.failures += 1;
    }
    let cancel = Command::CancelTask { task: TaskId(3) };
    assert_fires(
        check_step(&s, &after, &cancel, &Outcome::Rejected("no".into())),
        Check::Unchanged,
    );
    assert_fires(
        check_step(&s, &after, &cancel, &Outcome::Ignored("stale".into())),
        Check::Unchanged,
    );
    // Ignored benchmark traffic may change its counters, not the rest.
    let bench = Command::Bench {
        client: 1,
        seq: 1,
        record: false,
        payload: Default::default(),
    };
    assert_eq!(
        check_step(&s, &s, &bench, &Outcome::Ignored(String::new())),
        vec![]
    );
}

#[test]
fn step_check_catches_an_outcome_the_state_does_not_bear_out() {
    let (s, _) = clean();
    let plan = Command::ApplyPlan(Plan {
        assignments: vec![Assign::to(TaskId(5), NODE_B)],
        ..Default::default()
    });
    let claimed = Outcome::PlanApplied {
        accepted: vec![TaskRef {
            task: TaskId(5),
            node: NODE_B,
            attempt: 1,
        }],
        rejected: 0,
        preempted: vec![TaskRef {
            task: TaskId(3),
            node: NODE_B,
            attempt: 1,
        }],
    };
    assert_fires(check_step(&s, &s, &plan, &claimed), Check::Outcome);
}
