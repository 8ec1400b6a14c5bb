//! The duties engine driven by events, with no runtime: each test feeds events and compares
//! the effects it returns. The state is a real `ClusterState`, changed only through `apply`,
//! and the scheduler the real indexed one.

use super::dispatch::backoff;
use super::*;
use crate::sched::index::PolicyKind;
use crate::sched::IndexedScheduler;
use crate::state::{command_nodes, touched_nodes, CommandEnvelope};
use crate::state::{Command, Outcome};
use hetsched_common::protocol::TaskReport;
use hetsched_common::protocol::{HeldPhase, HeldTask};
use hetsched_common::{Attempt, TaskId, TaskState};
use hetsched_common::{GpuRequest, JobSpec, NodeResources, ResourceRequest};

const WALL0: u64 = 1_700_000_000_000;

struct Harness {
    state: ClusterState,
    core: DutiesCore,
    index: u64,
    mono: u64,
}

impl Harness {
    fn new() -> Self {
        Self::with(DutiesConfig::default())
    }

    fn with(cfg: DutiesConfig) -> Self {
        Self {
            state: ClusterState::new(),
            core: DutiesCore::new(
                1,
                cfg,
                Box::new(IndexedScheduler::new(PolicyKind::FirstFit, 1)),
            ),
            index: 0,
            mono: 1_000,
        }
    }

    fn now(&self) -> Now {
        Now {
            mono_ms: self.mono,
            wall_ms: WALL0 + self.mono,
        }
    }

    fn advance(&mut self, ms: u64) {
        self.mono += ms;
    }

    fn on(&mut self, ev: DutyEvent) -> Vec<Effect> {
        let now = self.now();
        self.core.on(ev, now, &self.state)
    }

    /// Applies a command as a committed entry and tells the core, as the executor does.
    fn apply(&mut self, command: Command) -> (Outcome, Vec<Effect>) {
        self.index += 1;
        let nodes = command_nodes(&command);
        let outcome = self.state.apply(
            self.index,
            CommandEnvelope {
                at_ms: WALL0 + self.mono,
                request: None,
                command,
            },
        );
        let touched = touched_nodes(nodes, &outcome);
        let fx = self.on(DutyEvent::Applied {
            index: self.index,
            outcome: outcome.clone(),
            touched,
        });
        (outcome, fx)
    }

    /// Carries out a proposal effect: applies it, then reports it finished.
    fn commit(&mut self, fx: &[Effect]) -> Vec<Effect> {
        let mut out = Vec::new();
        for e in fx {
            if let Effect::Propose { tag, command } = e {
                let (o, mut more) = self.apply(command.clone());
                out.append(&mut more);
                let ok = !matches!(o, Outcome::Rejected(_));
                out.extend(self.on(DutyEvent::Proposed { tag: *tag, ok }));
            }
        }
        out
    }

    fn register(&mut self, key: u64, cpus: u32) -> NodeId {
        match self
            .apply(Command::RegisterNode {
                key,
                node: None,
                name: format!("n{key}"),
                addr: format!("127.0.0.1:{}", 9000 + key),
                capacity: NodeResources {
                    cpu_milli: u64::from(cpus) * 1000,
                    mem_mib: 4096,
                    gpus: Vec::new(),
                    engines: Default::default(),
                },
                labels: Default::default(),
                partitions: Vec::new(),
            })
            .0
        {
            Outcome::Registered { node } => node,
            o => panic!("registration failed: {o:?}"),
        }
    }

    fn lead(&mut self) {
        let fx = self.on(DutyEvent::Leadership(true));
        assert_eq!(
            fx,
            vec![Effect::Propose {
                tag: ProposalTag::Barrier { epoch: 1 },
                command: Command::LeaderBarrier {
                    master: 1,
                    accounting: None,
                }
            }]
        );
        let fx = self.commit(&fx);
        assert!(self.core.is_leading());
        assert!(fx.iter().all(|e| !matches!(e, Effect::Stop { .. })));
    }

    fn submit(&mut self, count: u32, cpus: u32) -> (Outcome, Vec<Effect>) {
        self.apply(Command::SubmitJob {
            spec: JobSpec {
                name: "j".into(),
                user: "u".into(),
                partition: "default".into(),
                resources: ResourceRequest {
                    cpu_milli: u64::from(cpus) * 1000,
                    mem_mib: 64,
                    gpu: GpuRequest::none(),
                    engines: Default::default(),
                },
                count,
                command: vec!["true".into()],
                ..Default::default()
            },
        })
    }

    fn heartbeat(&mut self, node: NodeId, held: Vec<HeldTask>) -> Vec<Effect> {
        assert_eq!(
            self.core.heartbeat_verdict(node, &self.state),
            HeartbeatVerdict::Accept
        );
        self.on(DutyEvent::Heartbeat { node, held })
    }
}

fn proposals(fx: &[Effect]) -> Vec<&Command> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Propose { command, .. } => Some(command),
            _ => None,
        })
        .collect()
}

fn dispatched(fx: &[Effect]) -> Vec<(NodeId, TaskId, Attempt)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::DispatchBatch {
                node, assignments, ..
            } => Some(
                assignments
                    .iter()
                    .map(|a| (*node, a.task, a.attempt))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect()
}

fn plan_of(fx: &[Effect]) -> Option<Vec<(TaskId, NodeId)>> {
    proposals(fx).into_iter().find_map(|c| match c {
        Command::ApplyPlan(p) => Some(p.assignments.iter().map(|a| (a.task, a.node)).collect()),
        _ => None,
    })
}

#[test]
fn a_follower_does_nothing_and_turns_heartbeats_away() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    assert_eq!(
        h.core.heartbeat_verdict(n, &h.state),
        HeartbeatVerdict::NotLeader
    );
    let (_, fx) = h.submit(2, 1);
    assert!(fx.is_empty());
    assert!(h.on(DutyEvent::Tick).is_empty());
}

#[test]
fn new_leader_catches_up_before_acting() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    h.submit(1, 1);
    let fx = h.on(DutyEvent::Leadership(true));
    assert_eq!(proposals(&fx).len(), 1);
    assert_eq!(
        h.core.heartbeat_verdict(n, &h.state),
        HeartbeatVerdict::CatchingUp
    );
    // Nothing is scheduled until the barrier applies.
    assert!(h.on(DutyEvent::Tick).is_empty());
    let fx = h.commit(&fx);
    assert_eq!(plan_of(&fx), Some(vec![(TaskId(1), n)]));
    // A barrier of an older leadership that arrives late changes nothing.
    assert!(h
        .on(DutyEvent::Proposed {
            tag: ProposalTag::Barrier { epoch: 0 },
            ok: true
        })
        .is_empty());
}

#[test]
fn a_dropped_barrier_is_proposed_again() {
    let mut h = Harness::new();
    let fx = h.on(DutyEvent::Leadership(true));
    assert_eq!(proposals(&fx).len(), 1);
    let fx = h.on(DutyEvent::Proposed {
        tag: ProposalTag::Barrier { epoch: 1 },
        ok: false,
    });
    // Not at once (a deposed leader that was not told yet would spin), but shortly.
    assert!(fx.is_empty());
    assert!(h.on(DutyEvent::Tick).is_empty());
    h.advance(250);
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(
        fx,
        vec![Effect::Propose {
            tag: ProposalTag::Barrier { epoch: 1 },
            command: Command::LeaderBarrier {
                master: 1,
                accounting: None,
            }
        }]
    );
    // Leadership lost meanwhile: nothing more.
    h.on(DutyEvent::Leadership(false));
    h.advance(1_000);
    assert!(h.on(DutyEvent::Tick).is_empty());
}

#[test]
fn submitted_work_is_planned_then_dispatched_once_committed() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(2, 1);
    assert_eq!(plan_of(&fx), Some(vec![(TaskId(1), n), (TaskId(2), n)]));
    // One plan in flight: another submit does not plan again until it finishes.
    let (_, fx2) = h.submit(1, 1);
    assert_eq!(plan_of(&fx2), None);
    let fx = h.commit(&fx);
    let d = dispatched(&fx);
    assert_eq!(d, vec![(n, TaskId(1), 1), (n, TaskId(2), 1)]);
    // Plan finished: the third task is planned next.
    assert_eq!(plan_of(&fx), Some(vec![(TaskId(3), n)]));
}

#[test]
fn a_rejected_plan_frees_the_slot_and_the_scheduler_plans_again() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    let Some(Effect::Propose { tag, .. }) = fx.first() else {
        panic!("no plan: {fx:?}");
    };
    // The plan was dropped (leadership wobble) without applying.
    let fx = h.on(DutyEvent::Proposed {
        tag: *tag,
        ok: false,
    });
    assert_eq!(plan_of(&fx), Some(vec![(TaskId(1), n)]));
}

#[test]
fn a_silent_node_is_declared_down_and_its_tasks_are_requeued_elsewhere() {
    let mut h = Harness::new();
    let a = h.register(1, 2);
    let b = h.register(2, 2);
    h.lead();
    let (_, fx) = h.submit(4, 1);
    let fx = h.commit(&fx);
    let on_a: Vec<TaskId> = dispatched(&fx)
        .iter()
        .filter(|d| d.0 == a)
        .map(|d| d.1)
        .collect();
    assert_eq!(on_a.len(), 2);
    // b keeps beating; a falls silent past the timeout.
    for _ in 0..6 {
        h.advance(1_000);
        h.heartbeat(b, vec![]);
    }
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(proposals(&fx), vec![&Command::NodeDown { node: a }]);
    // Proposed once, not on every tick.
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    // Once applied, the lost attempts are pending again; b has room after its own finish.
    let fx = h.commit(&fx);
    for t in &on_a {
        assert_eq!(h.state.tasks()[t].status.state, TaskState::Pending);
        assert_eq!(h.state.tasks()[t].status.attempt, 1);
    }
    assert_eq!(plan_of(&fx), None, "b is full: nothing fits yet");
    let b_task = *h.state.nodes()[&b].tasks.iter().next().expect("b has work");
    let (_, fx) = h.apply(Command::TaskFinished {
        node: b,
        task: b_task,
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    let plan = plan_of(&fx).expect("freed room is used at once");
    assert_eq!(plan.len(), 1);
    assert!(on_a.contains(&plan[0].0) && plan[0].1 == b);
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(b, plan[0].0, 2)]);
}

#[test]
fn failover_does_not_declare_healthy_nodes_down() {
    let mut h = Harness::new();
    h.register(1, 2);
    h.advance(60_000);
    h.lead();
    h.advance(1_000);
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
}

#[test]
fn a_new_leader_resends_every_unstarted_assignment_and_reconciles() {
    let mut h = Harness::new();
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(3, 1);
    h.commit(&fx);
    h.apply(Command::TaskStarted {
        node: a,
        task: TaskId(1),
        attempt: 1,
    });
    // Leadership lost and regained (another term): the new leadership resends tasks 2
    // and 3, which the log says are assigned but not started.
    h.on(DutyEvent::Leadership(false));
    assert!(!h.core.is_leading());
    let fx = h.on(DutyEvent::Leadership(true));
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(a, TaskId(2), 1), (a, TaskId(3), 1)]);
    // The slave reports task 2 queued and an attempt the log never gave it.
    let fx = h.heartbeat(
        a,
        vec![
            HeldTask {
                task: TaskId(1),
                attempt: 1,
                phase: HeldPhase::Running,
            },
            HeldTask {
                task: TaskId(2),
                attempt: 1,
                phase: HeldPhase::Queued,
            },
            HeldTask {
                task: TaskId(9),
                attempt: 4,
                phase: HeldPhase::Running,
            },
        ],
    );
    assert_eq!(
        fx,
        vec![Effect::Stop {
            node: a,
            addr: "127.0.0.1:9001".into(),
            task: TaskId(9),
            attempt: 4,
            grace_ms: None
        }]
    );
    // Task 2 is held, so it is delivered; task 3 still waits for its answer.
    assert_eq!(h.core.undelivered(), 1);
}

#[test]
fn a_started_task_missing_from_reports_is_declared_lost_once() {
    let mut h = Harness::new();
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    h.apply(Command::TaskStarted {
        node: a,
        task: TaskId(1),
        attempt: 1,
    });
    assert!(proposals(&h.heartbeat(a, vec![])).is_empty());
    h.advance(2_000);
    assert!(proposals(&h.heartbeat(a, vec![])).is_empty());
    h.advance(2_000);
    let fx = h.heartbeat(a, vec![]);
    assert_eq!(
        proposals(&fx),
        vec![&Command::TaskLost {
            node: a,
            task: TaskId(1),
            attempt: 1
        }]
    );
    h.advance(500);
    assert!(proposals(&h.heartbeat(a, vec![])).is_empty());
    let fx = h.commit(&fx);
    // Re-queued and placed again under attempt 2.
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(a, TaskId(1), 2)]);
}

#[test]
fn failed_dispatches_back_off_and_retry() {
    let mut h = Harness::new();
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(a, TaskId(1), 1)]);
    let fail = DutyEvent::Delivered {
        node: a,
        task: TaskId(1),
        attempt: 1,
        ok: false,
    };
    // First failure: retried after 200 ms, not before.
    assert!(dispatched(&h.on(fail.clone())).is_empty());
    h.advance(150);
    assert!(dispatched(&h.on(DutyEvent::Tick)).is_empty());
    h.advance(100);
    assert_eq!(dispatched(&h.on(DutyEvent::Tick)), vec![(a, TaskId(1), 1)]);
    // Second failure: 400 ms.
    h.on(fail.clone());
    h.advance(300);
    assert!(dispatched(&h.on(DutyEvent::Tick)).is_empty());
    h.advance(150);
    assert_eq!(dispatched(&h.on(DutyEvent::Tick)), vec![(a, TaskId(1), 1)]);
    // While in flight nothing is sent twice.
    assert!(dispatched(&h.on(DutyEvent::Tick)).is_empty());
    // Accepted: never sent again.
    h.on(DutyEvent::Delivered {
        node: a,
        task: TaskId(1),
        attempt: 1,
        ok: true,
    });
    h.advance(10_000);
    assert!(dispatched(&h.on(DutyEvent::Tick)).is_empty());
    assert_eq!(h.core.undelivered(), 0);
}

#[test]
fn the_back_off_is_capped() {
    let cfg = DutiesConfig::default();
    assert_eq!(backoff(&cfg, 1), 200);
    assert_eq!(backoff(&cfg, 2), 400);
    assert_eq!(backoff(&cfg, 5), 3_200);
    assert_eq!(backoff(&cfg, 6), 5_000);
    assert_eq!(backoff(&cfg, 400), 5_000);
}

#[test]
fn a_dead_slaves_messages_are_parked_while_others_flow() {
    let mut h = Harness::new();
    let a = h.register(1, 1);
    let b = h.register(2, 8);
    h.lead();
    // One task lands on a (first fit), the next on b.
    let (_, fx) = h.submit(1, 1);
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(a, TaskId(1), 1)]);
    // a does not answer: its dispatch backs off, again and again.
    for _ in 0..4 {
        h.on(DutyEvent::Delivered {
            node: a,
            task: TaskId(1),
            attempt: 1,
            ok: false,
        });
        h.advance(10);
    }
    // Meanwhile work for b goes out at once, on every plan.
    for round in 0..3u64 {
        let (_, fx) = h.submit(1, 1);
        let fx = h.commit(&fx);
        let d = dispatched(&fx);
        assert_eq!(d, vec![(b, TaskId(2 + round), 1)], "round {round}");
        h.on(DutyEvent::Delivered {
            node: b,
            task: TaskId(2 + round),
            attempt: 1,
            ok: true,
        });
    }
    assert_eq!(h.core.undelivered(), 1, "only a's task waits");
}

#[test]
fn cancelled_running_tasks_are_stopped_on_their_slaves() {
    let mut h = Harness::new();
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(2, 1);
    h.commit(&fx);
    let (_, fx) = h.apply(Command::CancelJob {
        job: hetsched_common::JobId(1),
    });
    let stops: Vec<(NodeId, TaskId)> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Stop { node, task, .. } => Some((*node, *task)),
            _ => None,
        })
        .collect();
    assert_eq!(stops, vec![(a, TaskId(1)), (a, TaskId(2))]);
    // Cancelled before delivery: the assignments are not sent again.
    h.advance(10_000);
    assert!(dispatched(&h.on(DutyEvent::Tick)).is_empty());
}

#[test]
fn finished_jobs_are_collected_after_the_retention() {
    let mut h = Harness::with(DutiesConfig {
        job_gc_after_ms: Some(5_000),
        ..DutiesConfig::default()
    });
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    h.apply(Command::TaskFinished {
        node: a,
        task: TaskId(1),
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    h.advance(2_000);
    h.heartbeat(a, vec![]);
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    h.advance(4_000);
    h.heartbeat(a, vec![]);
    let fx = h.on(DutyEvent::Tick);
    let cmds = proposals(&fx);
    assert!(
        matches!(
            cmds.as_slice(),
            [Command::GcJobs {
                jobs_finished_before_ms: Some(_),
                ..
            }]
        ),
        "{cmds:?}"
    );
    // One collection in flight at a time.
    h.advance(1_000);
    h.heartbeat(a, vec![]);
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    h.commit(&fx);
    assert!(h.state.jobs().is_empty());
    assert!(h.state.tasks().is_empty());
    assert!(h.state.job_was_collected(hetsched_common::JobId(1)));
}

#[test]
fn job_gc_can_be_switched_off() {
    let mut h = Harness::with(DutiesConfig {
        job_gc_after_ms: None,
        request_retention_ms: u64::MAX / 4,
        ..DutiesConfig::default()
    });
    let a = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    h.apply(Command::TaskFinished {
        node: a,
        task: TaskId(1),
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    for _ in 0..10 {
        h.advance(1_000);
        h.heartbeat(a, vec![]);
        assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    }
    assert_eq!(h.state.jobs().len(), 1);
}

#[test]
fn preempted_attempts_are_stopped_with_the_preemption_grace() {
    let mut h = Harness::new();
    let a = h.register(1, 1);
    h.lead();
    h.apply(Command::SetPriorityConfig {
        config: hetsched_common::priority::parse_priority_toml(
            "[[users]]\nname = \"hi\"\npriority = 10\n",
        )
        .expect("config"),
    });
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "user": "hi", "resources": {"cpu_milli": 1000, "mem_mib": 1},
        "count": 1, "command": ["true"]
    }))
    .expect("spec");
    let (_, fx) = h.apply(Command::SubmitJob { spec });
    let fx = h.commit(&fx);
    let stops: Vec<&Effect> = fx
        .iter()
        .filter(|e| matches!(e, Effect::Stop { .. }))
        .collect();
    assert_eq!(
        stops,
        vec![&Effect::Stop {
            node: a,
            addr: "127.0.0.1:9001".into(),
            task: TaskId(1),
            attempt: 1,
            grace_ms: Some(10_000)
        }]
    );
    // The slave still reports the old attempt: it is stopped again, with the same grace.
    let fx = h.heartbeat(
        a,
        vec![HeldTask {
            task: TaskId(1),
            attempt: 1,
            phase: HeldPhase::Running,
        }],
    );
    assert!(matches!(
        fx.as_slice(),
        [Effect::Stop {
            grace_ms: Some(10_000),
            ..
        }]
    ));
    // It ended without a report: once missing long enough, it is released as lost.
    h.advance(4_000);
    h.heartbeat(a, vec![]);
    h.advance(4_000);
    let fx = h.heartbeat(a, vec![]);
    assert_eq!(
        proposals(&fx),
        vec![&Command::TaskLost {
            node: a,
            task: TaskId(1),
            attempt: 1
        }]
    );
}

#[test]
fn a_drain_deadline_requeues_and_stops_what_still_runs() {
    let mut h = Harness::new();
    let a = h.register(1, 2);
    let b = h.register(2, 2);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    let task = TaskId(1);
    assert_eq!(h.state.tasks()[&task].status.node, Some(a));
    let deadline = WALL0 + h.mono + 2_000;
    h.apply(Command::DrainNode {
        node: a,
        deadline_ms: Some(deadline),
    });
    h.heartbeat(a, vec![]);
    h.heartbeat(b, vec![]);
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    h.advance(2_500);
    h.heartbeat(a, vec![]);
    h.heartbeat(b, vec![]);
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(proposals(&fx), vec![&Command::RequeueDrained { node: a }]);
    // Once in flight, not again.
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    let fx = h.commit(&fx);
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::Stop { node, task: t, .. } if *node == a && *t == task
    )));
    // Re-queued and placed on the node that is not draining.
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(b, task, 2)]);
}

/// A job of 10,000 tasks is placed, dispatched and reported with far fewer log
/// entries than tasks — plans carry many assignments, each slave gets its new assignments
/// in one message per plan, and its started/finished reports travel in batches.
#[test]
fn ten_thousand_tasks_cost_at_most_half_a_log_entry_each() {
    const TASKS: u32 = 10_000;
    let mut h = Harness::new();
    let nodes: Vec<NodeId> = (1..=4u64)
        .map(|key| {
            match h
                .apply(Command::RegisterNode {
                    key,
                    node: None,
                    name: format!("big{key}"),
                    addr: format!("127.0.0.1:{}", 9000 + key),
                    capacity: NodeResources {
                        cpu_milli: 4_000_000,
                        mem_mib: 1 << 30,
                        gpus: Vec::new(),
                        engines: Default::default(),
                    },
                    labels: Default::default(),
                    partitions: Vec::new(),
                })
                .0
            {
                Outcome::Registered { node } => node,
                o => panic!("registration failed: {o:?}"),
            }
        })
        .collect();
    h.lead();
    let first_entry = h.index;
    let (_, mut fx) = h.apply(Command::SubmitJob {
        spec: JobSpec {
            name: "big".into(),
            user: "u".into(),
            partition: "default".into(),
            resources: ResourceRequest {
                cpu_milli: 1000,
                mem_mib: 1,
                gpu: GpuRequest::none(),
                engines: Default::default(),
            },
            count: TASKS,
            command: vec!["true".into()],
            ..Default::default()
        },
    });
    let mut batches = 0usize;
    let mut dispatched_tasks = 0usize;
    let mut rounds = 0;
    loop {
        for e in &fx {
            if let Effect::DispatchBatch { assignments, .. } = e {
                batches += 1;
                dispatched_tasks += assignments.len();
            }
        }
        if proposals(&fx).is_empty() {
            break;
        }
        fx = h.commit(&fx);
        rounds += 1;
        assert!(rounds < 1_000, "placement does not converge");
    }
    let placed_entries = h.index - first_entry;
    assert!(h.state.pending().is_empty(), "every task placed");
    assert_eq!(
        dispatched_tasks, TASKS as usize,
        "every assignment dispatched once"
    );
    let plans = placed_entries - 1;
    let most = plans * nodes.len() as u64 + u64::from(TASKS) / MAX_ASSIGNMENTS_PER_MESSAGE as u64;
    assert!(
        batches as u64 <= most,
        "one dispatch message per slave per plan (split at {MAX_ASSIGNMENTS_PER_MESSAGE}): \
         {batches} for {plans} plans"
    );
    assert!(
        placed_entries as f64 / f64::from(TASKS) <= 0.5,
        "placement took {placed_entries} entries for {TASKS} tasks"
    );
    // Each slave reports its tasks started and finished together, 2,048 tasks a message.
    // A stale report (an attempt the log never gave) rides along and changes nothing.
    for n in &nodes {
        let tasks: Vec<(TaskId, Attempt)> = h.state.nodes()[n]
            .tasks
            .iter()
            .map(|t| (*t, h.state.tasks()[t].status.attempt))
            .collect();
        for chunk in tasks.chunks(2048) {
            let mut reports = vec![TaskReport::Finished {
                task: chunk[0].0,
                attempt: 99,
                exit_code: 1,
                reason: None,
                reason_detail: None,
                usage: None,
            }];
            for &(task, attempt) in chunk {
                reports.push(TaskReport::Started { task, attempt });
                reports.push(TaskReport::Finished {
                    task,
                    attempt,
                    exit_code: 0,
                    reason: None,
                    reason_detail: None,
                    usage: None,
                });
            }
            let (o, _) = h.apply(Command::TaskReports { node: *n, reports });
            assert_eq!(o, Outcome::TaskUpdated);
        }
    }
    let entries = h.index - first_entry;
    let counts = h.state.task_counts();
    assert_eq!(counts["succeeded"], u64::from(TASKS), "{counts:?}");
    assert!(
        entries as f64 / f64::from(TASKS) <= 0.5,
        "submit to completion took {entries} entries for {TASKS} tasks"
    );
    // Nothing left to place and nothing changed: a tick does not scan the queue again.
    assert!(h.on(DutyEvent::Tick).is_empty());
}

/// S3.2 through the core: a GPU task with a class is searched from its slave's samples; the
/// slave is simulated (it applies each `SetCpus` and samples a curve peaking at 2 CPUs).
#[test]
fn the_cpu_search_steps_from_samples_and_records_the_best_count() {
    let mut h = Harness::with(DutiesConfig {
        probe_period_ms: 2_000,
        util_epsilon: 1.0,
        ..DutiesConfig::default()
    });
    h.lead();
    let node = match h
        .apply(Command::RegisterNode {
            key: 1,
            node: None,
            name: "g".into(),
            addr: "127.0.0.1:9001".into(),
            capacity: NodeResources {
                cpu_milli: 8000,
                mem_mib: 4096,
                gpus: vec![hetsched_common::GpuDevice {
                    model: "T4".into(),
                    free_milli: 1000,
                    emulated: true,
                }],
                engines: Default::default(),
            },
            labels: Default::default(),
            partitions: Vec::new(),
        })
        .0
    {
        Outcome::Registered { node } => node,
        o => panic!("{o:?}"),
    };
    let spec = JobSpec {
        resources: ResourceRequest {
            cpu_milli: 4000,
            mem_mib: 64,
            gpu: GpuRequest::whole(1),
            engines: Default::default(),
        },
        count: 1,
        command: vec!["true".into()],
        cpu_search: Some(hetsched_common::CpuSearchSpec {
            class: hetsched_common::TaskClass::Speech,
            pipelined: false,
            heavy_weights: false,
            cpu_heavy: false,
        }),
        ..Default::default()
    };
    let (o, fx) = h.apply(Command::SubmitJob { spec });
    let Outcome::Submitted { tasks, .. } = o else {
        panic!("{o:?}");
    };
    let task = tasks[0];
    h.commit(&fx);
    assert_eq!(h.state.tasks()[&task].status.node, Some(node));
    h.apply(Command::TaskStarted {
        node,
        task,
        attempt: 1,
    });
    let curve = |cpus: u64| 90.0 - 10.0 * ((cpus as f64 / 1000.0) - 2.0).abs();
    let mut slave_cpus = 4000u64;
    let mut applied = vec![slave_cpus];
    for _ in 0..200 {
        if h.state.tasks()[&task].cpu_search == Some(crate::state::CpuSearchPhase::Done)
            && slave_cpus == h.state.task_cpu_milli(task).unwrap_or(0)
        {
            break;
        }
        h.advance(500);
        let fx = h.on(DutyEvent::Samples {
            node,
            samples: vec![hetsched_common::protocol::ProbeSample {
                task,
                attempt: 1,
                cpu_milli: slave_cpus,
                gpu_util: Some(curve(slave_cpus)),
                gpu_emulated: true,
                membw_mbps: None,
                membw_emulated: false,
            }],
        });
        let mut all = fx.clone();
        all.extend(h.commit(&fx));
        for e in all {
            if let Effect::SetCpus { cpu_milli, .. } = e {
                slave_cpus = cpu_milli;
                if applied.last() != Some(&cpu_milli) {
                    applied.push(cpu_milli);
                }
            }
        }
    }
    assert_eq!(applied, vec![4000, 3000, 2000, 1000, 2000]);
    assert_eq!(h.state.task_cpu_milli(task), Some(2000));
    assert_eq!(
        h.state.cpu_history()[&hetsched_common::TaskClass::Speech],
        2000
    );
    // 8 − 2 CPUs free on the node.
    assert_eq!(h.state.nodes()[&node].free.cpu_milli, 6000);
}

#[test]
fn a_steal_is_released_by_the_victim_then_committed_with_the_next_attempt() {
    let mut h = Harness::new();
    h.core = DutiesCore::new(
        1,
        DutiesConfig::default(),
        Box::new(IndexedScheduler::new(PolicyKind::FirstFit, 1).with_queue_depth(4)),
    );
    h.lead();
    let a = h.register(1, 1);
    let (_, fx) = h.submit(3, 1);
    let Some(Command::ApplyPlan(plan)) = proposals(&fx).first().map(|c| (*c).clone()) else {
        panic!("a plan: {fx:?}")
    };
    assert_eq!(plan.queue_depth, 4);
    assert_eq!(
        plan.assignments.iter().filter(|x| x.queued).count(),
        2,
        "one runs on the only core, two queue: {plan:?}"
    );
    h.commit(&fx);
    let ids: Vec<TaskId> = h.state.nodes()[&a].queued.clone();
    assert_eq!(ids.len(), 2);
    let b = h.register(2, 1);
    let held = |tasks: &[TaskId]| -> Vec<HeldTask> {
        tasks
            .iter()
            .map(|t| HeldTask {
                task: *t,
                attempt: 1,
                phase: HeldPhase::Queued,
            })
            .collect()
    };

    // The idle slave asks: the victim is asked to release the tail of its queue.
    let fx = h.on(DutyEvent::StealRequest { thief: b });
    let want = ids[1];
    assert_eq!(
        fx,
        vec![Effect::Release {
            node: a,
            addr: "127.0.0.1:9001".into(),
            task: want,
            attempt: 1,
            to: b,
        }]
    );
    // One steal per thief at a time.
    assert!(h.on(DutyEvent::StealRequest { thief: b }).is_empty());
    // The victim dropped it: reconciliation must not send it back there meanwhile.
    let fx = h.heartbeat(a, held(&ids[..1]));
    assert!(
        dispatched(&fx).iter().all(|d| d.1 != want),
        "re-sent the released attempt: {fx:?}"
    );
    // Released: the move is proposed, committed with attempt 2 and dispatched to the thief.
    let fx = h.on(DutyEvent::Released {
        task: want,
        attempt: 1,
        from: a,
        to: b,
        released: true,
    });
    assert_eq!(
        proposals(&fx),
        vec![&Command::StealTask {
            task: want,
            attempt: 1,
            from: a,
            to: b
        }]
    );
    let fx = h.commit(&fx);
    assert_eq!(dispatched(&fx), vec![(b, want, 2)]);
    assert_eq!(h.state.tasks()[&want].status.node, Some(b));

    // A refused release (it had started) changes nothing.
    let c = h.register(3, 1);
    let fx = h.on(DutyEvent::StealRequest { thief: c });
    assert!(matches!(fx.as_slice(), [Effect::Release { task, .. }] if *task == ids[0]));
    let fx = h.on(DutyEvent::Released {
        task: ids[0],
        attempt: 1,
        from: a,
        to: c,
        released: false,
    });
    assert!(proposals(&fx).is_empty());
    assert_eq!(h.state.tasks()[&ids[0]].status.node, Some(a));
}

fn job(count: u32, cpus: u32) -> JobSpec {
    JobSpec {
        name: "j".into(),
        user: "u".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: u64::from(cpus) * 1000,
            mem_mib: 64,
            gpu: GpuRequest::none(),
            engines: Default::default(),
        },
        count,
        command: vec!["true".into()],
        ..Default::default()
    }
}

/// A placed submission's tasks, accepted placements and rejected count.
fn placed_parts(o: Outcome) -> (Vec<TaskId>, Vec<crate::state::TaskRef>, u32) {
    match o {
        Outcome::SubmittedPlaced {
            tasks,
            accepted,
            rejected,
            ..
        } => (tasks, accepted, rejected),
        o => panic!("not a placed submission: {o:?}"),
    }
}

#[test]
fn an_idle_submit_is_placed_and_dispatched_in_one_round() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    h.lead();
    let now = h.now();
    let spec = job(2, 1);
    let placed = h
        .core
        .place_new(&spec, now, &h.state)
        .expect("an idle queue is planned before the proposal");
    assert_eq!(placed.place.len(), 2);
    // The slot is held: nothing else is planned until the submission's proposal finished.
    assert!(h.core.place_new(&job(1, 1), now, &h.state).is_none());
    let (o, fx) = h.apply(placed.command(spec));
    let (tasks, accepted, rejected) = placed_parts(o);
    assert_eq!((accepted.len(), rejected), (2, 0));
    assert_eq!(
        dispatched(&fx),
        vec![(n, tasks[0], 1), (n, tasks[1], 1)],
        "dispatched as soon as the submission applied"
    );
    assert_eq!(plan_of(&fx), None);
    assert!(h.state.pending().is_empty());
    let fx = h.on(DutyEvent::Proposed {
        tag: placed.tag,
        ok: true,
    });
    assert_eq!(plan_of(&fx), None, "nothing left to plan");
    // Slot free again: the next idle submit is planned ahead too.
    assert!(h.core.place_new(&job(1, 1), h.now(), &h.state).is_some());
}

#[test]
fn a_submit_behind_waiting_work_goes_the_ordinary_way() {
    let mut h = Harness::new();
    h.register(1, 1);
    // Not leading: never planned ahead.
    assert!(h.core.place_new(&job(1, 1), h.now(), &h.state).is_none());
    h.lead();
    let (_, fx) = h.submit(2, 1);
    // A plan in flight.
    assert!(h.core.place_new(&job(1, 1), h.now(), &h.state).is_none());
    h.commit(&fx);
    // One task still pending (the node holds one): the new job must queue behind it.
    assert_eq!(h.state.pending().len(), 1);
    assert!(h.core.place_new(&job(1, 1), h.now(), &h.state).is_none());
}

#[test]
fn a_stale_placement_leaves_its_task_to_the_ordinary_loop() {
    let mut h = Harness::new();
    let a = h.register(1, 2);
    let b = h.register(2, 2);
    h.lead();
    let spec = job(1, 2);
    let placed = h
        .core
        .place_new(&spec, h.now(), &h.state)
        .expect("planned ahead");
    let chosen = placed.place[0].node;
    let other = if chosen == a { b } else { a };
    // The chosen node goes down between the planning and the apply.
    h.apply(Command::NodeDown { node: chosen });
    let (o, fx) = h.apply(placed.command(spec));
    let (tasks, accepted, rejected) = placed_parts(o);
    assert!(accepted.is_empty() && rejected == 1);
    assert!(dispatched(&fx).is_empty());
    assert_eq!(h.state.tasks()[&tasks[0]].status.state, TaskState::Pending);
    // Once the proposal finished, the loop plans it on the node still up.
    let fx = h.on(DutyEvent::Proposed {
        tag: placed.tag,
        ok: true,
    });
    assert_eq!(plan_of(&fx), Some(vec![(tasks[0], other)]));
}

#[test]
fn the_planning_copy_leaves_history_out_and_hands_out_the_same_ids() {
    let mut h = Harness::new();
    let n = h.register(1, 4);
    h.lead();
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    let done = TaskId(1);
    h.apply(Command::TaskFinished {
        node: n,
        task: done,
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    let (_, fx) = h.submit(1, 1);
    h.commit(&fx);
    let copy = h.state.planning_copy();
    assert!(
        !copy.tasks().contains_key(&done),
        "a finished job is left out"
    );
    assert!(
        copy.tasks().contains_key(&TaskId(2)),
        "a running one is kept"
    );
    assert_eq!(copy.nodes(), h.state.nodes());
    // The same submission gets the same ids in the copy as in the state itself.
    let submit = |s: &mut ClusterState| {
        s.apply(
            s.last_index() + 1,
            CommandEnvelope {
                at_ms: WALL0,
                request: None,
                command: Command::SubmitJob { spec: job(2, 1) },
            },
        )
    };
    let (mut full, mut live) = (h.state.clone(), copy);
    assert_eq!(submit(&mut live), submit(&mut full));
    assert_eq!(live.pending(), full.pending());
    // And the idle submit is still planned ahead with history in the state.
    assert!(h.core.place_new(&job(1, 1), h.now(), &h.state).is_some());
}

#[test]
fn every_submission_is_a_submit_placed_and_a_busy_ones_tasks_go_by_the_plan() {
    let mut h = Harness::new();
    let n = h.register(1, 1);
    // Not leading: proposed with no placement and no slot to report.
    let s = h.core.submission(job(1, 1), h.now(), &h.state);
    assert_eq!(s.slot, None);
    assert!(matches!(&s.command, Command::SubmitPlaced { place, .. } if place.is_empty()));
    h.lead();
    // Idle: planned, the slot held until the proposal is reported finished.
    let idle = h.core.submission(job(1, 1), h.now(), &h.state);
    let Some(slot) = idle.slot else {
        panic!("an idle submit is planned: {idle:?}");
    };
    let (o, fx) = h.apply(idle.command);
    assert!(matches!(o, Outcome::SubmittedPlaced { ref accepted, .. } if accepted.len() == 1));
    assert_eq!(dispatched(&fx).len(), 1);
    // Busy (the slot held): the next one carries no placement.
    let busy = h.core.submission(job(1, 1), h.now(), &h.state);
    assert_eq!(busy.slot, None);
    let (o, fx) = h.apply(busy.command);
    let (tasks, accepted, rejected) = placed_parts(o);
    assert!(accepted.is_empty() && rejected == 0);
    assert_eq!(
        h.state.pending().iter().collect::<Vec<_>>(),
        vec![&tasks[0]]
    );
    assert_eq!(plan_of(&fx), None, "the slot is still held");
    // Once the idle submit's proposal finished, its task is planned like any pending one
    // (it waits for the node's one core).
    let fx = h.on(DutyEvent::Proposed {
        tag: slot,
        ok: true,
    });
    assert_eq!(plan_of(&fx), None, "the node is full");
    h.apply(Command::TaskStarted {
        node: n,
        task: TaskId(1),
        attempt: 1,
    });
    let (_, fx) = h.apply(Command::TaskFinished {
        node: n,
        task: TaskId(1),
        attempt: 1,
        exit_code: 0,
        reason: None,
    });
    assert_eq!(plan_of(&fx), Some(vec![(tasks[0], n)]));
}

#[test]
fn a_submission_with_no_placement_applies_as_a_plain_submit() {
    let mut h = Harness::new();
    h.register(1, 4);
    let mut plain = h.state.clone();
    let spec = job(2, 1);
    let (o, _) = h.apply(Command::SubmitPlaced {
        spec: spec.clone(),
        place: Vec::new(),
        queue_depth: 0,
    });
    let o2 = plain.apply(
        h.state.last_index(),
        CommandEnvelope {
            at_ms: h.state.last_ms(),
            request: None,
            command: Command::SubmitJob { spec },
        },
    );
    let (Outcome::SubmittedPlaced { job, tasks, .. }, Outcome::Submitted { job: j2, tasks: t2 }) =
        (o, o2)
    else {
        panic!("not submitted");
    };
    assert_eq!((job, &tasks), (j2, &t2));
    assert_eq!(plain, h.state, "the same state as the old road's SubmitJob");
}

/// A leader of 8 registered nodes under a limit of 4 heartbeats a second (issue 54).
fn leading_eight_nodes_at_four_beats_a_second() -> (Harness, Vec<NodeId>) {
    let mut h = Harness::with(DutiesConfig {
        max_heartbeats_per_sec: 4,
        ..DutiesConfig::default()
    });
    let nodes: Vec<NodeId> = (1..=8).map(|k| h.register(k, 2)).collect();
    h.lead();
    (h, nodes)
}

/// Issue 54: past the heartbeat limit the leader asks for a longer period, and a node is
/// declared down only after as many of those periods of silence as of its own: with a
/// limit of 4 heartbeats a second, 8 nodes are asked to beat every 2 s and tolerated 25 s.
#[test]
fn past_the_heartbeat_limit_the_period_and_the_node_timeout_grow_together() {
    let (mut h, nodes) = leading_eight_nodes_at_four_beats_a_second();
    assert_eq!(h.core.heartbeat_floor_ms(&h.state), 2_000);
    // Silent for 20 s: longer than the configured 5 s, within 12.5 asked periods.
    h.advance(20_000);
    for n in &nodes[1..] {
        h.heartbeat(*n, vec![]);
    }
    assert!(
        proposals(&h.on(DutyEvent::Tick)).is_empty(),
        "20 s is within 25 s"
    );
    h.advance(5_001);
    for n in &nodes[1..] {
        h.heartbeat(*n, vec![]);
    }
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(proposals(&fx), vec![&Command::NodeDown { node: nodes[0] }]);
    // Under the default limit one node beats at its own period: 5 s tolerated.
    let mut h = Harness::new();
    let first = h.register(1, 2);
    h.lead();
    assert_eq!(h.core.heartbeat_floor_ms(&h.state), 0);
    h.advance(5_001);
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(proposals(&fx), vec![&Command::NodeDown { node: first }]);
}

/// Issue 54: past the heartbeat limit a slave whose link closed (its process ended) is
/// declared down once it stays silent past the closed-link timeout — not after the long
/// node timeout; one that beats again (it merely reconnected) is not.
#[test]
fn a_closed_link_not_followed_by_a_heartbeat_declares_the_node_down_sooner() {
    let (mut h, nodes) = leading_eight_nodes_at_four_beats_a_second();
    // 8 nodes at 4 a second: asked every 2 s, node timeout 25 s, closed-link timeout 5 s.
    assert_eq!(
        DutiesConfig {
            max_heartbeats_per_sec: 4,
            ..DutiesConfig::default()
        }
        .closed_link_timeout_for(8),
        5_000
    );
    let (gone, back) = (nodes[0], nodes[1]);
    h.on(DutyEvent::LinksClosed {
        nodes: vec![gone, back],
    });
    // One heartbeat after the close clears it: `back` beats once, then stays quiet
    // (well within the 25 s node timeout) while the others beat.
    h.advance(2_000);
    h.heartbeat(back, vec![]);
    h.advance(3_001);
    for n in &nodes[2..] {
        h.heartbeat(*n, vec![]);
    }
    let fx = h.on(DutyEvent::Tick);
    assert_eq!(proposals(&fx), vec![&Command::NodeDown { node: gone }]);
    h.advance(10_000);
    for n in &nodes[2..] {
        h.heartbeat(*n, vec![]);
    }
    assert!(
        proposals(&h.on(DutyEvent::Tick)).is_empty(),
        "`back` is not taken for gone"
    );
    // Under the limit a closed link changes nothing: the node timeout alone counts.
    let mut h = Harness::new();
    let a = h.register(1, 2);
    h.lead();
    h.on(DutyEvent::LinksClosed { nodes: vec![a] });
    h.advance(4_000);
    assert!(proposals(&h.on(DutyEvent::Tick)).is_empty());
    h.advance(1_001);
    assert_eq!(
        proposals(&h.on(DutyEvent::Tick)),
        vec![&Command::NodeDown { node: a }]
    );
}
