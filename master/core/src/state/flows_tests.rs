use crate::sched::test_log::Log;
use crate::state::fixture_tests::{cluster, tasks_of};
use crate::state::{ClusterState, Command, Outcome};
use hetsched_common::{FlowSpec, FlowStep, JobId, TaskReason, TaskState};

fn step(name: &str, count: u32, needs: &[&str]) -> FlowStep {
    let mut s = FlowStep::new(name, tasks_of(count, 1));
    s.spec.name = name.into();
    s.needs = needs.iter().map(|n| n.to_string()).collect();
    s
}

/// prep → train (4 tasks) → eval (task i after train's task i) → publish.
fn pipeline() -> FlowSpec {
    let mut eval = step("eval", 4, &[]);
    eval.each = Some("train".into());
    FlowSpec {
        steps: vec![
            step("prep", 1, &[]),
            step("train", 4, &["prep"]),
            eval,
            step("publish", 1, &["eval"]),
        ],
    }
}

fn submit(l: &mut Log, flow: FlowSpec) -> Outcome {
    l.apply_bare(Command::SubmitFlow { flow })
}

fn jobs(o: &Outcome) -> Vec<(String, JobId)> {
    match o {
        Outcome::FlowSubmitted { jobs, .. } => jobs.clone(),
        o => panic!("not submitted: {o:?}"),
    }
}

#[test]
fn every_step_becomes_a_job_following_the_jobs_its_names_became() {
    let mut l = cluster(2, 8);
    let o = submit(&mut l, pipeline());
    let named = |n: &str, j: u64| (n.to_string(), JobId(j));
    assert_eq!(
        jobs(&o),
        [
            named("prep", 1),
            named("train", 2),
            named("eval", 3),
            named("publish", 4)
        ]
    );
    let spec = |j: u64| &l.s.jobs()[&JobId(j)].spec;
    assert!(spec(1).after.is_empty());
    assert_eq!(spec(2).after, [JobId(1)]);
    assert_eq!(spec(3).after_each, Some(JobId(2)));
    assert_eq!(spec(4).after, [JobId(3)]);
    assert_eq!(l.s.tasks().len(), 10);
    // The record: in the file's order, each job knows its flow.
    let info = l.s.flow_info(1).expect("kept");
    let states: Vec<(&str, &str)> = info
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("prep", "pending"),
            ("train", "pending"),
            ("eval", "pending"),
            ("publish", "pending")
        ]
    );
    assert_eq!(l.s.flow_book().flow_of(JobId(3)), Some(1));
    // What each step needs, by name, read back from its job's dependencies; the job knows
    // its flow.
    let needs: Vec<(&str, Vec<String>, Option<&str>)> = info
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.needs.clone(), s.each.as_deref()))
        .collect();
    let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        needs,
        [
            ("prep", v(&[]), None),
            ("train", v(&["prep"]), None),
            ("eval", v(&[]), Some("train")),
            ("publish", v(&["eval"]), None)
        ]
    );
    assert_eq!(l.s.job_info(&l.s.jobs()[&JobId(2)]).flow_id, Some(1));
    // The edges were followed in the same entry: prep cancelled takes the chain with it.
    l.apply_bare(Command::CancelJob { job: JobId(1) });
    for t in l.s.tasks().values() {
        assert_eq!(t.status.state, TaskState::Cancelled, "{t:?}");
    }
    let train_task = l.s.jobs()[&JobId(2)].tasks[0];
    assert_eq!(
        l.s.tasks()[&train_task].status.reason,
        Some(TaskReason::Dependency)
    );
}

#[test]
fn steps_are_submitted_after_what_they_follow_and_recorded_in_file_order() {
    let mut l = cluster(1, 8);
    let flow = FlowSpec {
        steps: vec![step("last", 1, &["first"]), step("first", 1, &[])],
    };
    let o = submit(&mut l, flow);
    assert_eq!(
        jobs(&o),
        [
            ("last".to_string(), JobId(2)),
            ("first".to_string(), JobId(1))
        ]
    );
    assert_eq!(l.s.jobs()[&JobId(2)].spec.after, [JobId(1)]);
}

#[test]
fn an_invalid_step_rejects_the_whole_flow_and_hands_out_no_id() {
    let mut l = cluster(1, 8);
    let mut bad_node = pipeline();
    bad_node.steps[3].spec.nodes = vec!["nowhere".into()];
    let mut outside_unknown = pipeline();
    outside_unknown.steps[2].spec.after = vec![JobId(99)];
    let mut cycle = pipeline();
    cycle.steps[0].needs = vec!["publish".into()];
    let mut unknown = pipeline();
    unknown.steps[1].needs = vec!["perp".into()];
    let mut counts = pipeline();
    counts.steps[2].spec.count = 3;
    let mut two_users = pipeline();
    two_users.steps[1].spec.user = "mallory".into();
    let mut invalid = pipeline();
    invalid.steps[3].spec.count = 0;
    for (what, flow, says) in [
        ("locality", bad_node, "step \"publish\""),
        ("outside", outside_unknown, "job-99"),
        (
            "cycle",
            cycle,
            "cycle: prep → train → eval → publish → prep",
        ),
        ("unknown", unknown, "perp"),
        ("counts", counts, "counts must match"),
        ("users", two_users, "same user"),
        ("invalid", invalid, "step \"publish\""),
        ("empty", FlowSpec::default(), "at least one"),
    ] {
        let before = l.s.clone();
        match submit(&mut l, flow) {
            Outcome::Rejected(why) => assert!(why.contains(says), "{what}: {why}"),
            o => panic!("{what}: {o:?}"),
        }
        assert_eq!(l.s.jobs(), before.jobs(), "{what}");
        assert_eq!(l.s.tasks(), before.tasks(), "{what}");
        assert_eq!(l.s.flow_book(), before.flow_book(), "{what}");
    }
    // No id was handed out: the next job and flow are the first.
    assert_eq!(jobs(&submit(&mut l, pipeline()))[0].1, JobId(1));
    assert!(l.s.flow_info(1).is_some());
}

#[test]
fn the_record_survives_a_snapshot_and_goes_when_its_jobs_are_collected() {
    let mut l = cluster(1, 8);
    let plain = l.s.to_bytes();
    submit(&mut l, pipeline());
    let bytes = l.s.to_bytes();
    assert!(bytes.len() > plain.len());
    let back = ClusterState::from_bytes(&bytes).expect("decode");
    assert_eq!(back, l.s);
    assert_eq!(back.state_hash(), l.s.state_hash());
    assert_eq!(back.flow_book().flow_of(JobId(4)), Some(1));
    // A snapshot without the key (an older binary's) loads with no flows.
    let old = ClusterState::from_bytes(&plain).expect("decode");
    assert!(old.flow_book().is_unused());

    l.apply_bare(Command::CancelJob { job: JobId(1) });
    l.apply_bare(Command::GcJobs {
        jobs_finished_before_ms: Some(u64::MAX),
        requests_before_ms: None,
        keyed_requests_before_ms: None,
    });
    assert!(l.s.jobs().is_empty());
    assert_eq!(l.s.flow_info(1), None);
    // The id is not handed out again, and the book is still written (its counter).
    let o = submit(
        &mut l,
        FlowSpec {
            steps: vec![step("again", 1, &[])],
        },
    );
    assert!(matches!(o, Outcome::FlowSubmitted { flow: 2, .. }), "{o:?}");
}
