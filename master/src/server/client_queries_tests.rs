//! The answers to client reads over an applied state: listings and their refusals, a dry
//! run's placements, the status fields.

use super::*;
use crate::server::test_state::{spec, TestState, AT_MS};
use hetsched_master_core::sched::index::PolicyKind;

fn settings() -> SchedulerSettings {
    SchedulerSettings {
        policy: PolicyKind::BestFit,
        cpu_policy: PolicyKind::BestFit,
        preemption: PreemptionConfig::default(),
        queueing: QueueingConfig::default(),
        engine_choice: EngineChoiceConfig::default(),
        queue_depth: 0,
        parallel: Default::default(),
    }
}

#[test]
fn listings_filter_by_user_and_refuse_unknown_reasons() {
    let mut t = TestState::new();
    let (a, _) = t.job("alice", 2);
    t.job("bob", 1);
    let reasons = WaitReasons::default();
    let q = ClientQueries::new(&t.state, &reasons, AT_MS);
    let alice = ListFilter {
        user: Some("alice".into()),
        ..Default::default()
    };
    let Ok(ClientResponse::Jobs(jobs)) = q.jobs(alice.clone()) else {
        panic!("not a listing");
    };
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a]);
    let Ok(ClientResponse::Tasks(tasks)) = q.tasks(Some(a), ListFilter::default()) else {
        panic!("not a listing");
    };
    assert_eq!(tasks.len(), 2);
    let bad = ListFilter {
        reason: Some("boredom".into()),
        ..Default::default()
    };
    for e in [q.jobs(bad.clone()), q.tasks(None, bad)] {
        let e = e.expect_err("unknown reason");
        assert_eq!(e.kind, ErrorKind::Invalid, "exit 2");
        assert!(e.message.contains("one of:"), "{}", e.message);
    }
    let e = q
        .tasks(Some(JobId(99)), ListFilter::default())
        .expect_err("no job");
    assert_eq!(e.kind, ErrorKind::NotFound, "exit 4");
    let e = q.batch(4).expect_err("no batch");
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = q
        .explain(TaskId(99), &PreemptionConfig::default())
        .expect_err("no task");
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[test]
fn a_dry_run_places_on_a_copy_and_proposes_nothing() {
    let mut t = TestState::new();
    let n = t.node(1, "n1", 4);
    let before = t.state.clone();
    let reasons = WaitReasons::default();
    let q = ClientQueries::new(&t.state, &reasons, AT_MS);
    let Ok(ClientResponse::DryRun(tasks)) = q.dry_run(spec("u", 2, 1), &settings(), 1) else {
        panic!("not a dry run");
    };
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t.node == Some(n) && !t.queued));
    assert_eq!(t.state, before, "the state itself is untouched");
    let empty = JobSpec {
        command: Vec::new(),
        ..spec("u", 1, 1)
    };
    assert_eq!(
        ClientQueries::check_dry_run(&empty).map_err(|e| e.kind),
        Err(ErrorKind::Invalid)
    );
}

#[test]
fn the_status_reports_role_counts_and_the_cached_hash() {
    let mut t = TestState::new();
    t.node(1, "n1", 4);
    t.job("u", 3);
    let reasons = WaitReasons::default();
    let q = ClientQueries::new(&t.state, &reasons, AT_MS);
    let cache = Mutex::new(None);
    let raft = RaftFacts {
        master: MasterId(2),
        status: RaftStatus {
            id: 2,
            leader: Some(1),
            term: 5,
            role: Role::Follower,
            commit_index: 9,
            applied_index: 9,
        },
        stats: ConsensusStats::default(),
        leader_addr: Some("127.0.0.1:1".into()),
        snapshot_bytes: 0,
        insecure: true,
        open_files: None,
        heartbeat_ms: 0,
    };
    let st = q.status(raft, &cache, false);
    assert_eq!(st.role, "follower");
    assert!(st.stale, "a follower's answer is stale");
    assert_eq!((st.leader, st.term), (Some(MasterId(1)), 5));
    assert_eq!(st.jobs, 1);
    assert_eq!(st.applied_index, t.state.last_index());
    assert_eq!(st.state_bytes, t.state.to_bytes().len() as u64);
    assert_eq!(
        st.state_hash,
        format!(
            "{:016x}",
            hetsched_master_core::state::fnv1a64(&t.state.to_bytes())
        )
    );
    assert!(cache.lock().map(|c| c.is_some()).unwrap_or(false));
}
