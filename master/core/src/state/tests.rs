use super::*;
use hetsched_common::{
    ClientRequestId, GpuDevice, GpuRequest, JobSpec, NodeResources, ResourceRequest, TaskState,
};

fn env(at_ms: u64, command: Command) -> CommandEnvelope {
    CommandEnvelope {
        at_ms,
        request: None,
        command,
    }
}

fn node_res(cpus: u64, gpus: u32) -> NodeResources {
    NodeResources {
        cpu_milli: cpus * 1000,
        mem_mib: 4096,
        gpus: (0..gpus)
            .map(|_| GpuDevice {
                model: "T4".into(),
                free_milli: 1000,
                emulated: true,
            })
            .collect(),
        engines: Default::default(),
    }
}

fn spec(count: u32, cpu_milli: u64) -> JobSpec {
    JobSpec {
        name: "j".into(),
        user: "u".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli,
            mem_mib: 100,
            gpu: GpuRequest::none(),
            engines: Default::default(),
        },
        count,
        command: vec!["true".into()],
        ..Default::default()
    }
}

struct Log {
    state: ClusterState,
    index: u64,
}

impl Log {
    fn new() -> Self {
        Self {
            state: ClusterState::new(),
            index: 0,
        }
    }
    fn apply(&mut self, c: Command) -> Outcome {
        self.index += 1;
        self.state.apply(self.index, env(1000 + self.index, c))
    }
    fn register(&mut self, key: u64, cpus: u64) -> NodeId {
        match self.apply(Command::RegisterNode {
            key,
            node: None,
            name: format!("n{key}"),
            addr: format!("127.0.0.1:{key}"),
            capacity: node_res(cpus, 0),
            labels: Default::default(),
            partitions: Vec::new(),
        }) {
            Outcome::Registered { node } => node,
            o => panic!("unexpected {o:?}"),
        }
    }
    fn submit(&mut self, count: u32, cpu: u64) -> Vec<TaskId> {
        match self.apply(Command::SubmitJob {
            spec: spec(count, cpu),
        }) {
            Outcome::Submitted { tasks, .. } => tasks,
            o => panic!("unexpected {o:?}"),
        }
    }
    fn assign(&mut self, task: TaskId, node: NodeId) -> Outcome {
        self.apply(Command::ApplyPlan(Plan {
            assignments: vec![Assign::to(task, node)],
            ..Default::default()
        }))
    }
}

#[test]
fn task_runs_to_success_and_releases_resources() {
    let mut l = Log::new();
    let n = l.register(7, 2);
    let t = l.submit(1, 1500)[0];
    assert!(
        matches!(l.assign(t, n), Outcome::PlanApplied { ref accepted, rejected: 0, .. } if accepted.len() == 1)
    );
    assert_eq!(l.state.nodes()[&n].free.cpu_milli, 500);
    assert_eq!(
        l.apply(Command::TaskStarted {
            node: n,
            task: t,
            attempt: 1
        }),
        Outcome::TaskUpdated
    );
    assert_eq!(
        l.apply(Command::TaskFinished {
            node: n,
            task: t,
            attempt: 1,
            exit_code: 0,
            reason: None,
        }),
        Outcome::TaskUpdated
    );
    assert_eq!(l.state.tasks()[&t].status.state, TaskState::Succeeded);
    assert_eq!(l.state.nodes()[&n].free.cpu_milli, 2000);
    assert!(l.state.pending().is_empty());
}

#[test]
fn an_entry_names_the_tasks_it_touched_and_the_next_starts_over() {
    let mut l = Log::new();
    let n = l.register(7, 2);
    assert!(l.state.touched_tasks().is_empty());
    let t = l.submit(2, 500);
    assert_eq!(
        l.state.touched_tasks().iter().copied().collect::<Vec<_>>(),
        t
    );
    l.assign(t[1], n);
    assert_eq!(
        l.state.touched_tasks().iter().collect::<Vec<_>>(),
        vec![&t[1]]
    );
    let before = l.state.clone();
    l.register(8, 2);
    assert!(l.state.touched_tasks().is_empty());
    assert_ne!(before.touched_tasks(), l.state.touched_tasks());
    assert_eq!(before.tasks(), l.state.tasks(), "not state");
}

#[test]
fn registration_is_idempotent_on_key() {
    let mut l = Log::new();
    let a = l.register(11, 2);
    let b = l.register(11, 2);
    let c = l.register(12, 2);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(l.state.nodes().len(), 2);
}

#[test]
fn retried_submit_makes_one_job() {
    let mut l = Log::new();
    let req = Some(ClientRequestId(99));
    let c = Command::SubmitJob { spec: spec(3, 100) };
    let o1 = l.state.apply(
        1,
        CommandEnvelope {
            at_ms: 1,
            request: req,
            command: c.clone(),
        },
    );
    let o2 = l.state.apply(
        2,
        CommandEnvelope {
            at_ms: 2,
            request: req,
            command: c,
        },
    );
    assert_eq!(o1, o2);
    assert_eq!(l.state.jobs().len(), 1);
    assert_eq!(l.state.tasks().len(), 3);
}

#[test]
fn invalid_spec_is_rejected_without_change() {
    let mut l = Log::new();
    let mut s = spec(1, 100);
    s.command.clear();
    assert!(matches!(
        l.apply(Command::SubmitJob { spec: s }),
        Outcome::Rejected(_)
    ));
    assert!(l.state.jobs().is_empty());
}

#[test]
fn stale_plan_entries_are_rejected() {
    let mut l = Log::new();
    let n = l.register(1, 1);
    let t = l.submit(2, 1000);
    // The first fits; the second no longer fits once the first holds the only core.
    match l.apply(Command::ApplyPlan(Plan {
        assignments: vec![Assign::to(t[0], n), Assign::to(t[1], n)],
        ..Default::default()
    })) {
        Outcome::PlanApplied {
            accepted, rejected, ..
        } => {
            assert_eq!(accepted.len(), 1);
            assert_eq!(rejected, 1);
        }
        o => panic!("unexpected {o:?}"),
    }
    // Assigning an already-assigned task is stale too, as is an unknown node.
    assert!(matches!(
        l.assign(t[0], n),
        Outcome::PlanApplied { rejected: 1, .. }
    ));
    assert!(matches!(
        l.assign(t[1], NodeId(42)),
        Outcome::PlanApplied { rejected: 1, .. }
    ));
    assert!(l.state.pending().contains(&t[1]));
}

#[test]
fn node_down_requeues_with_next_attempt_and_fences_old_reports() {
    let mut l = Log::new();
    let a = l.register(1, 1);
    let b = l.register(2, 1);
    let t = l.submit(1, 1000)[0];
    l.assign(t, a);
    l.apply(Command::TaskStarted {
        node: a,
        task: t,
        attempt: 1,
    });
    match l.apply(Command::NodeDown { node: a }) {
        Outcome::NodeDown { requeued, .. } => assert_eq!(
            requeued,
            vec![TaskRef {
                task: t,
                node: a,
                attempt: 1
            }]
        ),
        o => panic!("unexpected {o:?}"),
    }
    assert_eq!(l.state.tasks()[&t].status.state, TaskState::Pending);
    assert_eq!(l.state.nodes()[&a].free.cpu_milli, 1000);
    // A down node takes no work.
    assert!(matches!(
        l.assign(t, a),
        Outcome::PlanApplied { rejected: 1, .. }
    ));
    match l.assign(t, b) {
        Outcome::PlanApplied { accepted, .. } => assert_eq!(accepted[0].attempt, 2),
        o => panic!("unexpected {o:?}"),
    }
    // The lost attempt's late report is ignored.
    assert!(matches!(
        l.apply(Command::TaskFinished {
            node: a,
            task: t,
            attempt: 1,
            exit_code: 0,
            reason: None,
        }),
        Outcome::Ignored(_)
    ));
    assert_eq!(l.state.tasks()[&t].status.state, TaskState::Assigned);
    assert_eq!(
        l.apply(Command::NodeUp { node: a }),
        Outcome::NodeUp { node: a }
    );
}

#[test]
fn cancel_stops_running_tasks_and_frees_them() {
    let mut l = Log::new();
    let n = l.register(1, 4);
    let t = l.submit(3, 1000);
    l.assign(t[0], n);
    match l.apply(Command::CancelJob { job: JobId(1) }) {
        Outcome::Cancelled { tasks, stop, .. } => {
            assert_eq!(tasks, 3);
            assert_eq!(stop.len(), 1);
        }
        o => panic!("unexpected {o:?}"),
    }
    assert_eq!(l.state.nodes()[&n].free.cpu_milli, 4000);
    assert!(l.state.pending().is_empty());
    assert_eq!(
        l.state.job_info(&l.state.jobs()[&JobId(1)]).state,
        "cancelled"
    );
}

#[test]
fn gpu_grants_are_per_device_and_returned() {
    let mut l = Log::new();
    let n = match l.apply(Command::RegisterNode {
        key: 5,
        node: None,
        name: "g".into(),
        addr: "x:1".into(),
        capacity: node_res(8, 2),
        labels: Default::default(),
        partitions: Vec::new(),
    }) {
        Outcome::Registered { node } => node,
        o => panic!("{o:?}"),
    };
    let mut s = spec(2, 100);
    s.resources.gpu = GpuRequest::fraction(600);
    let t = match l.apply(Command::SubmitJob { spec: s }) {
        Outcome::Submitted { tasks, .. } => tasks,
        o => panic!("{o:?}"),
    };
    l.assign(t[0], n);
    l.assign(t[1], n);
    // 600 + 600 cannot share one device: each went to its own.
    assert_eq!(l.state.tasks()[&t[0]].gpus, vec![(0, 600)]);
    assert_eq!(l.state.tasks()[&t[1]].gpus, vec![(1, 600)]);
    l.apply(Command::TaskFinished {
        node: n,
        task: t[0],
        attempt: 1,
        exit_code: 3,
        reason: None,
    });
    assert_eq!(l.state.nodes()[&n].free.gpus[0].free_milli, 1000);
    assert_eq!(l.state.tasks()[&t[0]].status.state, TaskState::Failed);
}

#[test]
fn replicas_applying_the_same_log_agree_byte_for_byte() {
    let cmds = |l: &mut Log| {
        let n = l.register(3, 2);
        let t = l.submit(5, 500);
        for x in &t {
            l.assign(*x, n);
        }
        l.apply(Command::NodeDown { node: n });
    };
    let (mut a, mut b) = (Log::new(), Log::new());
    cmds(&mut a);
    cmds(&mut b);
    assert_eq!(a.state.to_bytes(), b.state.to_bytes());
    assert_eq!(a.state.state_hash(), b.state.state_hash());
    let restored = ClusterState::from_bytes(&a.state.to_bytes()).expect("restore");
    assert_eq!(restored, a.state);
    b.submit(1, 100);
    assert_ne!(a.state.state_hash(), b.state.state_hash());
}

#[test]
fn retried_requests_get_the_compact_outcome_back_until_collected() {
    let mut l = Log::new();
    let req = ClientRequestId(42);
    let submit = |l: &mut Log| {
        l.index += 1;
        l.state.apply(
            l.index,
            CommandEnvelope {
                at_ms: 1000 + l.index,
                request: Some(req),
                command: Command::SubmitJob { spec: spec(3, 100) },
            },
        )
    };
    let first = submit(&mut l);
    let again = submit(&mut l);
    assert_eq!(first, again);
    assert!(matches!(&first, Outcome::Submitted { tasks, .. } if tasks.len() == 3));
    assert_eq!(l.state.jobs().len(), 1);
    // Forgotten once older than the cut-off: a retry after that is a new job.
    let o = l.apply(Command::GcJobs {
        jobs_finished_before_ms: None,
        requests_before_ms: Some(1000 + l.index + 1),
        keyed_requests_before_ms: None,
    });
    assert!(matches!(o, Outcome::Collected { requests: 1, .. }), "{o:?}");
    assert_ne!(submit(&mut l), first);
    assert_eq!(l.state.jobs().len(), 2);
}

#[test]
fn finished_jobs_are_collected_and_restore_keeps_retention() {
    let mut l = Log::new();
    let n = l.register(1, 4);
    let done = l.submit(1, 1000)[0];
    let live = l.submit(1, 1000)[0];
    l.assign(done, n);
    l.apply(Command::TaskFinished {
        node: n,
        task: done,
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    let finished_at = l.state.jobs()[&JobId(1)].finished_ms.expect("finished");
    assert!(l.state.jobs()[&JobId(2)].finished_ms.is_none());
    // The snapshot round trip rebuilds what is derived.
    let restored = ClusterState::from_bytes(&l.state.to_bytes()).expect("restore");
    assert_eq!(restored, l.state);
    assert!(l.state.gc_due(Some(finished_at + 1), None, None));
    assert!(!l.state.gc_due(Some(finished_at), None, None));
    let before = l.state.state_bytes();
    let o = l.apply(Command::GcJobs {
        jobs_finished_before_ms: Some(finished_at + 1),
        requests_before_ms: None,
        keyed_requests_before_ms: None,
    });
    assert_eq!(
        o,
        Outcome::Collected {
            jobs: 1,
            tasks: 1,
            requests: 0
        }
    );
    assert!(l.state.state_bytes() < before);
    assert!(l.state.job_was_collected(JobId(1)));
    assert!(!l.state.job_was_collected(JobId(2)));
    assert!(!l.state.job_was_collected(JobId(3)));
    assert!(l.state.task_was_collected(done));
    assert!(l.state.tasks().contains_key(&live));
    // Cancelled jobs finish too.
    l.apply(Command::CancelJob { job: JobId(2) });
    assert!(l.state.jobs()[&JobId(2)].finished_ms.is_some());
}

#[test]
fn reasons_are_recorded_and_shown_with_cpus() {
    use hetsched_common::TaskReason;
    let mut l = Log::new();
    let n = l.register(9, 6);
    let t = l.submit(3, 1500);
    for &task in &t {
        l.assign(task, n);
    }
    let finish = |task, exit_code, reason| Command::TaskFinished {
        node: n,
        task,
        attempt: 1,
        exit_code,
        reason,
    };
    l.apply(finish(t[0], -9, Some(TaskReason::Oom)));
    l.apply(finish(t[1], 0, None));
    // An older slave sends no reason: the exit code decides.
    l.apply(finish(t[2], 4, None));
    let info = |l: &Log, task: TaskId| l.state.task_info(&l.state.tasks()[&task]);
    let oom = info(&l, t[0]);
    assert_eq!(oom.state, TaskState::Failed);
    assert_eq!(oom.reason, Some(TaskReason::Oom));
    assert_eq!(oom.cpus, 1.5);
    assert_eq!(info(&l, t[1]).reason, None);
    assert_eq!(info(&l, t[2]).reason, Some(TaskReason::Exit));
    let json = serde_json::to_value(info(&l, t[0])).expect("json");
    assert_eq!(json["reason"], "oom");
    assert_eq!(json["cpus"], 1.5);

    // A lost attempt goes back to pending with reason "lost"; the next attempt clears it.
    let lost = l.submit(1, 100)[0];
    l.assign(lost, n);
    assert_eq!(
        l.apply(Command::TaskLost {
            node: n,
            task: lost,
            attempt: 1
        }),
        Outcome::TaskUpdated
    );
    assert_eq!(info(&l, lost).state, TaskState::Pending);
    assert_eq!(info(&l, lost).reason, Some(TaskReason::Lost));
    l.assign(lost, n);
    assert_eq!(info(&l, lost).attempt, 2);
    assert_eq!(info(&l, lost).reason, None);
}

#[test]
fn a_finish_reports_detail_goes_with_its_reason_and_the_next_attempt_clears_it() {
    use hetsched_common::protocol::{TaskReport, UsageRecord};
    use hetsched_common::TaskReason;
    let mut l = Log::new();
    let n = l.register(9, 6);
    let t = l.submit(2, 1000);
    for &task in &t {
        l.assign(task, n);
    }
    let finished = |task, exit_code, reason, detail: &str| TaskReport::Finished {
        task,
        attempt: 1,
        exit_code,
        reason,
        reason_detail: Some(detail.to_string()),
        usage: Some(UsageRecord {
            cpu_s: Some(0.5),
            ..UsageRecord::default()
        }),
    };
    let o = l.apply(Command::TaskReports {
        node: n,
        reports: vec![
            finished(t[0], 125, Some(TaskReason::Image), "oci:/img: no manifest"),
            finished(t[1], 0, None, "done early"),
        ],
    });
    assert_eq!(o, Outcome::TaskUpdated);
    let info = |l: &Log, task: TaskId| l.state.task_info(&l.state.tasks()[&task]);
    let failed = info(&l, t[0]);
    assert_eq!(failed.state, TaskState::Failed);
    assert_eq!(failed.reason, Some(TaskReason::Image));
    assert_eq!(
        failed.reason_detail.as_deref(),
        Some("oci:/img: no manifest")
    );
    assert_eq!(info(&l, t[1]).reason_detail.as_deref(), Some("done early"));
    let json = serde_json::to_value(info(&l, t[0])).expect("json");
    assert_eq!(json["reason"], "image");
    assert_eq!(json["reason_detail"], "oci:/img: no manifest");

    // A retried task keeps the detail with its reason while it waits, and loses both when
    // its next attempt is assigned.
    let mut retrying = spec(1, 100);
    retrying.retries = 1;
    let retried = match l.apply(Command::SubmitJob { spec: retrying }) {
        Outcome::Submitted { tasks, .. } => tasks[0],
        o => panic!("unexpected {o:?}"),
    };
    l.assign(retried, n);
    l.apply(Command::TaskReports {
        node: n,
        reports: vec![finished(retried, 3, None, "exit 3 on n9")],
    });
    assert_eq!(info(&l, retried).state, TaskState::Pending);
    assert_eq!(info(&l, retried).reason, Some(TaskReason::Exit));
    assert_eq!(
        info(&l, retried).reason_detail.as_deref(),
        Some("exit 3 on n9")
    );
    l.assign(retried, n);
    assert_eq!(info(&l, retried).reason, None);
    assert_eq!(info(&l, retried).reason_detail, None);
    assert_eq!(
        serde_json::to_value(info(&l, retried)).expect("json")["reason_detail"],
        serde_json::Value::Null
    );
}

#[test]
fn node_info_shows_the_cgroup_label() {
    let mut l = Log::new();
    let n = l.register(11, 1);
    assert_eq!(l.state.node_info(&l.state.nodes()[&n]).cgroup, "none");
    let labels = [(
        hetsched_common::protocol::CGROUP_LABEL.to_string(),
        "v1".to_string(),
    )]
    .into();
    l.apply(Command::RegisterNode {
        key: 11,
        node: Some(n),
        name: "n11".into(),
        addr: "127.0.0.1:11".into(),
        capacity: node_res(1, 0),
        labels,
        partitions: Vec::new(),
    });
    assert_eq!(l.state.node_info(&l.state.nodes()[&n]).cgroup, "v1");
}

#[test]
fn program_jobs_build_the_task_engine_relation_from_every_profile() {
    use hetsched_common::program::{
        Api, ApiCall, CallSummary, EngineDecl, EngineTime, Program, SelectionTable,
        PROGRAM_COMMAND, PROGRAM_ENV,
    };
    use hetsched_common::EngineKind;
    let mut l = Log::new();
    let a = l.register(1, 2);
    let b = l.register(2, 2);
    let program = Program {
        calls: vec![
            ApiCall::new(Api::Gemm, 64, 1),
            ApiCall::new(Api::Sort, 1000, 1),
            ApiCall::new(Api::Sort, 1000, 2),
        ],
    };
    let kind = program.kind();
    let mut s = spec(1, 100);
    s.command.clear();
    s.program = Some(program.clone());
    let t = match l.apply(Command::SubmitJob { spec: s }) {
        Outcome::Submitted { tasks, .. } => tasks[0],
        o => panic!("unexpected {o:?}"),
    };
    // The program travels with the assignment as the marker command plus env.
    let job = &l.state.jobs()[&l.state.tasks()[&t].job];
    assert_eq!(job.spec.command, vec![PROGRAM_COMMAND.to_string()]);
    assert!(job.spec.env.contains_key(PROGRAM_ENV));
    assert_eq!(l.state.relations()[&kind], vec![], "no profile yet");

    let time = |engine, time_us| EngineTime {
        engine,
        time_us,
        emulated: engine != EngineKind::Cpu,
    };
    let gemm_b = ApiCall::new(Api::Gemm, 64, 1).bucket();
    let sort_b = ApiCall::new(Api::Sort, 1000, 1).bucket();
    let mut ta = SelectionTable::default();
    ta.record(Api::Gemm, gemm_b, time(EngineKind::Cpu, 800));
    ta.record(Api::Sort, sort_b, time(EngineKind::Cpu, 100));
    let mut tb = SelectionTable::default();
    tb.record(Api::Gemm, gemm_b, time(EngineKind::Gpu, 100));
    tb.record(Api::Gemm, gemm_b, time(EngineKind::Cpu, 900));
    tb.record(Api::Sort, sort_b, time(EngineKind::Gpu, 300));
    tb.record(Api::Sort, sort_b, time(EngineKind::Cpu, 120));
    let decl = |kind, emulated| EngineDecl {
        kind,
        count: 1,
        emulated,
    };
    l.apply(Command::RecordProfile {
        node: a,
        engines: vec![decl(EngineKind::Cpu, false)],
        table: ta,
    });
    let cpu_only = l.state.relations()[&kind].clone();
    assert_eq!(cpu_only.len(), 1);
    assert_eq!(cpu_only[0].total_us, 800 + 2 * 100);
    l.apply(Command::RecordProfile {
        node: b,
        engines: vec![decl(EngineKind::Cpu, false), decl(EngineKind::Gpu, true)],
        table: tb,
    });
    let r = &l.state.relations()[&kind];
    assert_eq!(
        r.iter().map(|e| (e.engine, e.total_us)).collect::<Vec<_>>(),
        vec![(EngineKind::Gpu, 100 + 600), (EngineKind::Cpu, 800 + 200)],
        "fastest per call across slaves, sorted ascending"
    );
    assert!(matches!(
        l.apply(Command::RecordProfile {
            node: NodeId(99),
            engines: vec![],
            table: SelectionTable::default(),
        }),
        Outcome::Rejected(_)
    ));

    // Call summaries are fenced by attempt like every other report.
    l.assign(t, a);
    let mut summary = CallSummary {
        total: 3,
        ..Default::default()
    };
    summary.by_engine.add(EngineKind::Cpu);
    let stale = Command::RecordCalls {
        node: a,
        task: t,
        attempt: 9,
        summary,
    };
    assert!(matches!(l.apply(stale), Outcome::Ignored(_)));
    let ok = Command::RecordCalls {
        node: a,
        task: t,
        attempt: 1,
        summary,
    };
    assert_eq!(l.apply(ok), Outcome::TaskUpdated);
    assert_eq!(l.state.task_info(&l.state.tasks()[&t]).calls, Some(summary));
    // A snapshot round-trips the new state.
    let back = ClusterState::from_bytes(&l.state.to_bytes()).expect("restores");
    assert_eq!(back, l.state);
}

/// Attempt timeouts: only running attempts of jobs with a timeout, once it has passed since
/// they started, each with the node it runs on.
#[test]
fn timeouts_due_lists_running_attempts_past_their_jobs_timeout() {
    let mut l = Log::new();
    let a = l.register(1, 8);
    let b = l.register(2, 8);
    let timed = match l.apply(Command::SubmitJob {
        spec: JobSpec {
            timeout_ms: Some(500),
            ..spec(3, 1000)
        },
    }) {
        Outcome::Submitted { tasks, .. } => tasks,
        o => panic!("unexpected {o:?}"),
    };
    let untimed = l.submit(2, 1000);
    let start = |l: &mut Log, t: TaskId, n: NodeId| {
        assert!(matches!(l.assign(t, n), Outcome::PlanApplied { .. }));
        let started = l.apply(Command::TaskStarted {
            node: n,
            task: t,
            attempt: 1,
        });
        assert_eq!(started, Outcome::TaskUpdated);
    };
    start(&mut l, timed[0], a);
    start(&mut l, timed[1], b);
    // timed[2] is assigned but not started: no timeout runs yet.
    assert!(matches!(l.assign(timed[2], a), Outcome::PlanApplied { .. }));
    start(&mut l, untimed[0], a);
    start(&mut l, untimed[1], b);
    let started = |t: TaskId| l.state.tasks()[&t].started_ms.expect("started");
    let (s0, s1) = (started(timed[0]), started(timed[1]));
    assert!(l.state.timeouts_due(s0 + 499).is_empty());
    fn due(state: &ClusterState, now: u64) -> Vec<(TaskId, NodeId, hetsched_common::Attempt)> {
        let mut d: Vec<_> = state
            .timeouts_due(now)
            .into_iter()
            .map(|r| (r.task, r.node, r.attempt))
            .collect();
        d.sort();
        d
    }
    assert_eq!(due(&l.state, s0 + 500), vec![(timed[0], a, 1)]);
    assert_eq!(
        due(&l.state, s1 + 500),
        vec![(timed[0], a, 1), (timed[1], b, 1)]
    );
    // An ended attempt is no longer due.
    l.apply(Command::TaskFinished {
        node: a,
        task: timed[0],
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    assert_eq!(due(&l.state, s1 + 10_000), vec![(timed[1], b, 1)]);
}
