//! The state machine driven by the real scheduler over an applied log: drain, cancel one task,
//! timeout, retry with back-off, and listings. An integration test of the crate, so it uses the
//! public API only (and `state` never imports the scheduler, not even in tests).

use hetsched_common::protocol::ListFilter;
use hetsched_common::{
    JobId, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId, TaskReason, TaskState,
};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::{IndexedScheduler, Scheduler};
use hetsched_master_core::state::*;

struct Log {
    state: ClusterState,
    index: u64,
    sched: IndexedScheduler,
}

impl Log {
    fn new() -> Self {
        Self {
            state: ClusterState::new(),
            index: 0,
            sched: IndexedScheduler::new(PolicyKind::FirstFit, 1),
        }
    }

    fn apply_at(&mut self, at_ms: u64, c: Command) -> Outcome {
        self.index += 1;
        let pre = command_nodes(&c);
        let o = self.state.apply(
            self.index,
            CommandEnvelope {
                at_ms,
                request: None,
                command: c,
            },
        );
        let touched = touched_nodes(pre, &o);
        self.sched.nodes_changed(&self.state, &touched);
        o
    }

    fn register(&mut self, key: u64, name: &str, cpus: u64) -> NodeId {
        match self.apply_at(
            0,
            Command::RegisterNode {
                key,
                node: None,
                name: name.into(),
                addr: format!("127.0.0.1:{key}"),
                capacity: NodeResources {
                    cpu_milli: cpus * 1000,
                    mem_mib: 4096,
                    ..Default::default()
                },
                labels: Default::default(),
                partitions: Vec::new(),
            },
        ) {
            Outcome::Registered { node } => node,
            o => panic!("unexpected {o:?}"),
        }
    }

    fn submit(&mut self, spec: JobSpec) -> Vec<TaskId> {
        match self.apply_at(0, Command::SubmitJob { spec }) {
            Outcome::Submitted { tasks, .. } => tasks,
            o => panic!("unexpected {o:?}"),
        }
    }

    /// Plans at `now_ms` and applies the plan then; returns (task, node, attempt) placed.
    fn schedule(&mut self, now_ms: u64) -> Vec<TaskRef> {
        let plan = self.sched.plan_at(&self.state, now_ms);
        let nodes: Vec<NodeId> = plan.assignments.iter().map(|a| a.node).collect();
        let o = self.apply_at(now_ms, Command::ApplyPlan(plan));
        self.sched.nodes_changed(&self.state, &nodes);
        match o {
            Outcome::PlanApplied { accepted, .. } => accepted,
            o => panic!("unexpected {o:?}"),
        }
    }

    fn start(&mut self, at_ms: u64, r: TaskRef) {
        assert_eq!(
            self.apply_at(
                at_ms,
                Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt
                }
            ),
            Outcome::TaskUpdated
        );
    }

    fn finish(&mut self, at_ms: u64, r: TaskRef, exit_code: i32) -> Outcome {
        self.apply_at(
            at_ms,
            Command::TaskFinished {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
                exit_code,
                reason: None,
            },
        )
    }

    fn task(&self, t: TaskId) -> &Task {
        &self.state.tasks()[&t]
    }
}

fn spec(count: u32) -> JobSpec {
    JobSpec {
        name: "j".into(),
        user: "alice".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: 1000,
            mem_mib: 10,
            ..Default::default()
        },
        count,
        command: vec!["true".into()],
        ..Default::default()
    }
}

#[test]
fn a_draining_node_gets_no_new_tasks_and_undrain_restores_it() {
    let mut l = Log::new();
    let a = l.register(1, "a", 4);
    let b = l.register(2, "b", 4);
    l.sched.reset(&l.state);
    assert_eq!(
        l.apply_at(
            10,
            Command::DrainNode {
                node: a,
                deadline_ms: None
            }
        ),
        Outcome::DrainChanged { node: a }
    );
    assert_eq!(l.state.node_counts().draining, 1);
    assert!(l.state.node_info(&l.state.nodes()[&a]).draining);
    l.submit(spec(6));
    let placed = l.schedule(20);
    assert_eq!(placed.len(), 4, "only b's 4 cores");
    assert!(placed.iter().all(|r| r.node == b));
    // Even a plan naming the draining node is refused at apply.
    let pending = *l.state.pending().iter().next().expect("a pending task");
    match l.apply_at(
        21,
        Command::ApplyPlan(Plan {
            assignments: vec![Assign::to(pending, a)],
            ..Default::default()
        }),
    ) {
        Outcome::PlanApplied {
            accepted, rejected, ..
        } => {
            assert!(accepted.is_empty());
            assert_eq!(rejected, 1);
        }
        o => panic!("unexpected {o:?}"),
    }
    // Without a deadline, what runs on a draining node is never due for re-queueing.
    assert!(l.state.drains_due(u64::MAX).is_empty());
    l.apply_at(30, Command::UndrainNode { node: a });
    assert_eq!(l.state.node_counts().draining, 0);
    let placed = l.schedule(40);
    assert_eq!(placed.len(), 2);
    assert!(placed.iter().all(|r| r.node == a));
}

#[test]
fn at_the_deadline_a_drained_nodes_tasks_are_requeued_with_reason_drained() {
    let mut l = Log::new();
    let a = l.register(1, "a", 2);
    l.sched.reset(&l.state);
    let tasks = l.submit(spec(2));
    let placed = l.schedule(5);
    assert_eq!(placed.len(), 2);
    l.start(6, placed[0]);
    l.apply_at(
        100,
        Command::DrainNode {
            node: a,
            deadline_ms: Some(1_000),
        },
    );
    assert!(
        l.state.drains_due(999).is_empty(),
        "not before the deadline"
    );
    assert_eq!(
        l.state.tasks()[&placed[0].task].status.state,
        TaskState::Running
    );
    assert_eq!(l.state.drains_due(1_000), vec![a]);
    match l.apply_at(1_000, Command::RequeueDrained { node: a }) {
        Outcome::Drained { node, requeued } => {
            assert_eq!(node, a);
            assert_eq!(requeued.len(), 2);
            assert!(requeued.iter().all(|r| r.attempt == 1));
        }
        o => panic!("unexpected {o:?}"),
    }
    for t in &tasks {
        assert_eq!(l.task(*t).status.state, TaskState::Pending);
        assert_eq!(l.task(*t).status.reason, Some(TaskReason::Drained));
        assert_eq!(l.task(*t).failures, 0, "a drain is not a failure");
    }
    assert_eq!(l.state.nodes()[&a].free.cpu_milli, 2000);
    assert!(
        l.state.drains_due(5_000).is_empty(),
        "nothing left to re-queue"
    );
    assert!(
        l.schedule(1_001).is_empty(),
        "still draining: nowhere to go"
    );
    // A late report of the drained attempt changes nothing.
    assert!(matches!(l.finish(1_002, placed[0], 0), Outcome::Ignored(_)));
    // Undrained, the tasks come back under attempt 2.
    l.apply_at(2_000, Command::UndrainNode { node: a });
    let again = l.schedule(2_001);
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|r| r.attempt == 2));
    // Re-queueing a node that is no longer draining is ignored.
    assert!(matches!(
        l.apply_at(2_002, Command::RequeueDrained { node: a }),
        Outcome::Ignored(_)
    ));
}

#[test]
fn a_failed_task_with_retries_waits_out_a_doubling_backoff_then_fails_for_good() {
    let mut l = Log::new();
    l.register(1, "a", 1);
    l.sched.reset(&l.state);
    let t = l.submit(JobSpec {
        retries: 2,
        backoff_ms: 1_000,
        ..spec(1)
    })[0];
    let r1 = l.schedule(0)[0];
    l.start(1, r1);
    assert_eq!(l.finish(10, r1, 3), Outcome::TaskUpdated);
    let task = l.task(t);
    assert_eq!(task.status.state, TaskState::Pending);
    assert_eq!(task.failures, 1);
    assert_eq!(task.status.reason, Some(TaskReason::Exit));
    assert_eq!(task.not_before_ms, Some(1_010));
    assert!(l.schedule(1_009).is_empty(), "backoff not over");
    // A plan proposed too early is refused at apply too.
    match l.apply_at(
        500,
        Command::ApplyPlan(Plan {
            assignments: vec![Assign::to(t, r1.node)],
            ..Default::default()
        }),
    ) {
        Outcome::PlanApplied { rejected, .. } => assert_eq!(rejected, 1),
        o => panic!("unexpected {o:?}"),
    }
    let r2 = l.schedule(1_010)[0];
    assert_eq!(r2.attempt, 2);
    l.start(1_011, r2);
    l.finish(1_020, r2, -9);
    assert_eq!(l.task(t).not_before_ms, Some(1_020 + 2_000), "doubled");
    assert_eq!(l.task(t).status.reason, Some(TaskReason::Signal));
    let r3 = l.schedule(3_020)[0];
    assert_eq!(r3.attempt, 3);
    l.start(3_021, r3);
    l.finish(3_030, r3, 1);
    let task = l.task(t);
    assert_eq!(task.status.state, TaskState::Failed, "retries used up");
    assert_eq!(task.failures, 3);
    assert_eq!(task.status.exit_code, Some(1));
    assert_eq!(l.state.nodes()[&r3.node].free.cpu_milli, 1000);
    assert_eq!(task.attempt_nodes.len(), 3);
}

#[test]
fn a_success_after_a_retry_clears_the_reason() {
    let mut l = Log::new();
    l.register(1, "a", 1);
    l.sched.reset(&l.state);
    let t = l.submit(JobSpec {
        retries: 1,
        ..spec(1)
    })[0];
    let r1 = l.schedule(0)[0];
    l.finish(1, r1, 2);
    assert_eq!(l.task(t).not_before_ms, None, "no backoff asked");
    let r2 = l.schedule(2)[0];
    l.finish(3, r2, 0);
    assert_eq!(l.task(t).status.state, TaskState::Succeeded);
    assert_eq!(l.task(t).status.reason, None);
}

#[test]
fn an_attempt_past_its_timeout_is_due_and_fails_with_reason_timeout() {
    let mut l = Log::new();
    l.register(1, "a", 2);
    l.sched.reset(&l.state);
    let tasks = l.submit(JobSpec {
        timeout_ms: Some(500),
        ..spec(2)
    });
    let placed = l.schedule(0);
    l.start(100, placed[0]);
    // The second never starts: only started attempts time out.
    assert!(l.state.timeouts_due(599).is_empty());
    assert_eq!(l.state.timeouts_due(600), vec![placed[0]]);
    let r = placed[0];
    match l.apply_at(
        600,
        Command::TimeoutTask {
            node: r.node,
            task: r.task,
            attempt: r.attempt,
        },
    ) {
        Outcome::TimedOut { stop, retried } => {
            assert_eq!(stop, r);
            assert!(!retried);
        }
        o => panic!("unexpected {o:?}"),
    }
    let t = l.task(tasks[0]);
    assert_eq!(t.status.state, TaskState::Failed);
    assert_eq!(t.status.reason, Some(TaskReason::Timeout));
    // A second, late timeout of the same attempt changes nothing.
    assert!(matches!(
        l.apply_at(
            700,
            Command::TimeoutTask {
                node: r.node,
                task: r.task,
                attempt: r.attempt
            }
        ),
        Outcome::Ignored(_)
    ));
}

#[test]
fn cancelling_one_task_stops_only_that_attempt() {
    let mut l = Log::new();
    l.register(1, "a", 2);
    l.sched.reset(&l.state);
    let tasks = l.submit(spec(3));
    let placed = l.schedule(0);
    l.start(1, placed[0]);
    match l.apply_at(
        2,
        Command::CancelTask {
            task: placed[0].task,
        },
    ) {
        Outcome::Cancelled { tasks: n, stop, .. } => {
            assert_eq!(n, 1);
            assert_eq!(stop, vec![placed[0]]);
        }
        o => panic!("unexpected {o:?}"),
    }
    assert_eq!(
        l.task(placed[0].task).status.reason,
        Some(TaskReason::Cancelled)
    );
    // Cancelling a pending task stops nothing; cancelling again is a no-op.
    let pending = tasks[2];
    match l.apply_at(3, Command::CancelTask { task: pending }) {
        Outcome::Cancelled { tasks: 1, stop, .. } => assert!(stop.is_empty()),
        o => panic!("unexpected {o:?}"),
    }
    assert!(matches!(
        l.apply_at(4, Command::CancelTask { task: pending }),
        Outcome::Cancelled { tasks: 0, .. }
    ));
    assert_eq!(l.task(tasks[1]).status.state, TaskState::Assigned);
}

#[test]
fn locality_names_resolve_at_submit_and_bind_placement() {
    let mut l = Log::new();
    let _a = l.register(1, "a", 8);
    let b = l.register(2, "b", 8);
    l.sched.reset(&l.state);
    l.submit(JobSpec {
        nodes: vec!["b".into()],
        ..spec(3)
    });
    let placed = l.schedule(0);
    assert_eq!(placed.len(), 3);
    assert!(placed.iter().all(|r| r.node == b));
    l.submit(JobSpec {
        nodes: vec!["node-1".into(), "2".into()],
        ..spec(1)
    });
    assert!(matches!(
        l.apply_at(
            1,
            Command::SubmitJob {
                spec: JobSpec {
                    nodes: vec!["nowhere".into()],
                    ..spec(1)
                }
            }
        ),
        Outcome::Rejected(_)
    ));
}

#[test]
fn listings_filter_and_put_the_newest_first() {
    let mut l = Log::new();
    l.register(1, "a", 1);
    l.sched.reset(&l.state);
    let j1 = l.submit(spec(1));
    let j2 = l.submit(JobSpec {
        user: "bob".into(),
        ..spec(2)
    });
    let r = l.schedule(0)[0];
    l.finish(1, r, 4);
    let all = l.state.list_jobs(&ListFilter::default()).expect("jobs");
    assert_eq!(all.len(), 2);
    assert!(all[0].id > all[1].id, "newest first");
    let bob = l
        .state
        .list_jobs(&ListFilter {
            user: Some("bob".into()),
            ..Default::default()
        })
        .expect("jobs");
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0].user, "bob");
    let failed = l
        .state
        .list_tasks(&ListFilter {
            state: Some("failed".into()),
            user: Some("alice".into()),
            ..Default::default()
        })
        .expect("tasks");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].id, j1[0]);
    assert_eq!(failed[0].reason, Some(TaskReason::Exit));
    let limited = l
        .state
        .list_tasks(&ListFilter {
            limit: Some(2),
            ..Default::default()
        })
        .expect("tasks");
    assert_eq!(
        limited.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![j2[1], j2[0]]
    );
    assert!(matches!(
        l.state.list_jobs(&ListFilter {
            job: Some(JobId(999_999)),
            ..Default::default()
        }),
        Err(ListError::NotFound(_))
    ));
    assert!(matches!(
        l.state.list_tasks(&ListFilter {
            state: Some("sleeping".into()),
            ..Default::default()
        }),
        Err(ListError::Invalid(_))
    ));
}

#[test]
fn the_leader_finds_due_drains_and_timeouts_as_commands() {
    let mut l = Log::new();
    let a = l.register(1, "a", 2);
    let b = l.register(2, "b", 2);
    l.sched.reset(&l.state);
    l.submit(JobSpec {
        timeout_ms: Some(100),
        nodes: vec!["b".into()],
        ..spec(1)
    });
    l.submit(JobSpec {
        nodes: vec!["a".into()],
        ..spec(1)
    });
    let placed = l.schedule(0);
    assert_eq!(placed.len(), 2);
    for r in &placed {
        l.start(10, *r);
    }
    l.apply_at(
        20,
        Command::DrainNode {
            node: a,
            deadline_ms: Some(50),
        },
    );
    assert!(due_commands(&l.state, 49).is_empty());
    assert_eq!(
        due_commands(&l.state, 50),
        vec![Command::RequeueDrained { node: a }]
    );
    let on_b = placed.iter().find(|r| r.node == b).expect("a task on b");
    assert_eq!(
        due_commands(&l.state, 110),
        vec![
            Command::RequeueDrained { node: a },
            Command::TimeoutTask {
                node: b,
                task: on_b.task,
                attempt: on_b.attempt
            }
        ]
    );
}

/// What the leader's duties propose at `now_ms` for deadlines (as `DutiesCore` does on a
/// tick): drains past their deadline, then attempts past their timeout.
fn due_commands(state: &ClusterState, now_ms: u64) -> Vec<Command> {
    let mut cmds: Vec<Command> = state
        .drains_due(now_ms)
        .into_iter()
        .map(|node| Command::RequeueDrained { node })
        .collect();
    cmds.extend(
        state
            .timeouts_due(now_ms)
            .into_iter()
            .map(|r| Command::TimeoutTask {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            }),
    );
    cmds
}
