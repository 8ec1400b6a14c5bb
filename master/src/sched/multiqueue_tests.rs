use super::*;
use crate::sched::index::PolicyKind;
use crate::sched::{IndexedScheduler, Scheduler};
use crate::state::{command_nodes, touched_nodes, Command, CommandEnvelope, Outcome, Plan};
use hetsched_common::{GpuDevice, GpuRequest, JobSpec, NodeId, NodeResources, TaskState};

fn entry(task: u64, user: &str, cpu: u64, gpu: u64) -> DrfEntry {
    DrfEntry {
        task: TaskId(task),
        user: user.into(),
        demand: Usage {
            cpu_milli: cpu,
            mem_mib: 0,
            gpu_milli: gpu,
        },
    }
}

#[test]
fn queues_split_by_gpu_count() {
    let mut r = ResourceRequest {
        cpu_milli: 1000,
        ..Default::default()
    };
    assert_eq!(QueueKind::of(&r).name(), "cpu");
    r.gpu = GpuRequest::fraction(500);
    assert_eq!(QueueKind::of(&r).name(), "gpu-single");
    r.gpu = GpuRequest::whole(3);
    assert_eq!(QueueKind::of(&r), QueueKind::GpuSingle);
    r.gpu = GpuRequest::whole(4);
    assert_eq!(QueueKind::of(&r).name(), "gpu-multi");
}

#[test]
fn drf_orders_two_users_with_different_dominant_resources() {
    // 9 CPUs, 18 GPU thousandths... the classic DRF example: 9 CPUs and 18 GB, here CPU and
    // GPU. User a's tasks ask <1 CPU, 4 GPU units> (GPU-dominant: 4/18 > 1/9); b's ask
    // <3 CPU, 1 GPU unit> (CPU-dominant: 3/9 > 1/18).
    let cap = Usage {
        cpu_milli: 9000,
        mem_mib: 0,
        gpu_milli: 18000,
    };
    let mut entries = Vec::new();
    for i in 0..4 {
        entries.push(entry(1 + i, "a", 1000, 4000));
    }
    for i in 0..4 {
        entries.push(entry(10 + i, "b", 3000, 1000));
    }
    let order = drf_order(&entries, &BTreeMap::new(), &cap);
    // Shares after each pick: a 0.22, b 0.33, a 0.44, b 0.67, a 0.67; then a tie at 0.67
    // goes to the earlier submission (a's task 4 before b's task 12); a 0.89, b 1.0.
    let ids: Vec<u64> = order.iter().map(|t| t.0).collect();
    assert_eq!(ids, vec![1, 10, 2, 11, 3, 4, 12, 13]);
    // A user already holding much waits behind the other: b holds 6 CPUs (share 0.67).
    let held = BTreeMap::from([(
        "b".to_string(),
        Usage {
            cpu_milli: 6000,
            ..Default::default()
        },
    )]);
    let ids: Vec<u64> = drf_order(&entries, &held, &cap)
        .iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 10, 11, 12, 13], "a catches up first");
    assert_eq!(ids.len(), 8);
}

#[test]
fn the_reserve_follows_the_history() {
    let mut h = ReserveHistory::new(4000);
    assert_eq!(
        h.per_gpu_milli(),
        4000,
        "the start value before any GPU task"
    );
    assert_eq!(h.reserve_on(2, 32_000), 8000);
    h.observe(&ResourceRequest {
        cpu_milli: 16_000,
        ..Default::default()
    });
    assert_eq!(h.per_gpu_milli(), 4000, "CPU tasks teach nothing");
    h.observe(&ResourceRequest {
        cpu_milli: 6000,
        gpu: GpuRequest::whole(2),
        ..Default::default()
    });
    assert_eq!(h.per_gpu_milli(), 3000, "history replaces the start value");
    h.observe(&ResourceRequest {
        cpu_milli: 3000,
        gpu: GpuRequest::fraction(500),
        ..Default::default()
    });
    assert_eq!(h.per_gpu_milli(), 6000, "the highest per whole GPU");
    h.observe(&ResourceRequest {
        cpu_milli: 1000,
        gpu: GpuRequest::whole(1),
        ..Default::default()
    });
    assert_eq!(h.per_gpu_milli(), 6000, "a lower demand does not shrink it");
    assert_eq!(h.reserve_on(2, 8000), 8000, "capped at the node's CPUs");
}

struct Log {
    s: ClusterState,
    i: u64,
}

impl Log {
    fn apply(&mut self, sched: &mut IndexedScheduler, c: Command) -> Outcome {
        self.i += 1;
        let pre = command_nodes(&c);
        let o = self.s.apply(
            self.i,
            CommandEnvelope {
                at_ms: 0,
                request: None,
                command: c,
            },
        );
        let touched = touched_nodes(pre, &o);
        sched.nodes_changed(&self.s, &touched);
        o
    }

    /// Plans, applies, starts what was accepted and stops what was preempted, as slaves do.
    fn round(&mut self, sched: &mut IndexedScheduler) -> Plan {
        let plan = sched.plan(&self.s);
        let out = self.apply(sched, Command::ApplyPlan(plan.clone()));
        let Outcome::PlanApplied {
            accepted,
            preempted,
            ..
        } = out
        else {
            panic!("{out:?}");
        };
        for r in accepted {
            self.apply(
                sched,
                Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                },
            );
        }
        for v in preempted {
            self.apply(
                sched,
                Command::TaskFinished {
                    node: v.node,
                    task: v.task,
                    attempt: v.attempt,
                    exit_code: -1,
                    reason: Some(TaskReason::Preempted),
                },
            );
        }
        plan
    }
}

fn gpu_node(cpus: u64, gpus: usize) -> Command {
    Command::RegisterNode {
        key: 1,
        node: None,
        name: "g".into(),
        addr: String::new(),
        capacity: NodeResources {
            cpu_milli: cpus * 1000,
            mem_mib: 100_000,
            gpus: (0..gpus)
                .map(|_| GpuDevice {
                    model: "T4".into(),
                    free_milli: 1000,
                    emulated: true,
                })
                .collect(),
            ..Default::default()
        },
        labels: Default::default(),
        partitions: Vec::new(),
    }
}

fn submit(count: u32, cpus: u64, gpus: u32) -> Command {
    Command::SubmitJob {
        spec: JobSpec {
            user: "u".into(),
            resources: ResourceRequest {
                cpu_milli: cpus * 1000,
                mem_mib: 10,
                gpu: if gpus == 0 {
                    GpuRequest::none()
                } else {
                    GpuRequest::whole(gpus)
                },
                ..Default::default()
            },
            count,
            command: vec!["true".into()],
            ..Default::default()
        },
    }
}

fn pipeline() -> IndexedScheduler {
    IndexedScheduler::new(PolicyKind::BestFit, 0)
        .with_ordering(Ordering::Pipeline)
        .with_reserved_pools(ReserveHistory::new(2000))
}

fn state_of(l: &Log, task: u64) -> TaskState {
    l.s.tasks[&TaskId(task)].status.state
}

#[test]
fn cpu_tasks_borrow_the_reserve_and_a_gpu_task_takes_it_back_to_the_head_of_the_queue() {
    let mut sched = pipeline();
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    // One node: 8 CPUs, 2 GPUs; the reserve is 2 CPUs per GPU = 4 CPUs.
    l.apply(&mut sched, gpu_node(8, 2));
    // A GPU task waiting keeps CPU tasks off the reserve: a GPU task that fits nowhere
    // (3 GPUs; 2 CPUs per GPU, as the history's start) is in the GPU queue, so of 8
    // one-CPU tasks only 4 start.
    l.apply(&mut sched, submit(1, 6, 3)); // task 1
    assert_eq!(sched.reserve_per_gpu_milli(), Some(2000));
    l.apply(&mut sched, submit(8, 1, 0)); // tasks 2..=9
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 4, "{plan:?}");
    assert!(plan.assignments.iter().all(|a| a.task.0 >= 2));
    // The GPU queue empties (the impossible task is cancelled): CPU tasks borrow the rest.
    l.apply(
        &mut sched,
        Command::CancelJob {
            job: hetsched_common::JobId(1),
        },
    );
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 4, "borrowers: {plan:?}");
    assert!((2..=9).all(|t| state_of(&l, t) == TaskState::Running));
    // Two more CPU tasks queue behind (tasks 10, 11).
    l.apply(&mut sched, submit(2, 1, 0));
    assert!(l.round(&mut sched).assignments.is_empty());
    // A GPU task asking 2 GPUs and 3 CPUs arrives: the newest borrowers are stopped.
    l.apply(&mut sched, submit(1, 3, 2)); // task 12
    let plan = l.round(&mut sched);
    assert_eq!(plan.preempt.len(), 1, "{plan:?}");
    let p = &plan.preempt[0];
    assert!(p.take_back);
    let victims: Vec<u64> = p.victims.iter().map(|v| v.task.0).collect();
    assert_eq!(
        victims,
        vec![9, 8, 7],
        "newest borrowers first, just enough CPUs"
    );
    for v in &victims {
        let t = &l.s.tasks[&TaskId(*v)];
        assert_eq!(t.status.state, TaskState::Pending);
        assert_eq!(t.status.reason, Some(TaskReason::Preempted));
    }
    // The GPU task runs next (its victims stopped), then the taken-back tasks re-enter the
    // head of the CPU queue: before tasks 10 and 11, submitted earlier than they re-queued.
    let plan = l.round(&mut sched);
    let placed: Vec<u64> = plan.assignments.iter().map(|a| a.task.0).collect();
    assert_eq!(placed.first(), Some(&12), "{plan:?}");
    assert_eq!(state_of(&l, 12), TaskState::Running);
    let order = ordered(&l.s, Ordering::Pipeline);
    let ids: Vec<u64> = order.iter().map(|t| t.0).collect();
    assert_eq!(ids, vec![7, 8, 9, 10, 11], "taken-back tasks at the head");
}

#[test]
fn without_pools_cpu_tasks_take_every_core() {
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0).with_ordering(Ordering::Drf);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(&mut sched, gpu_node(8, 2));
    l.apply(&mut sched, submit(1, 1, 3));
    l.apply(&mut sched, submit(8, 1, 0));
    assert_eq!(l.round(&mut sched).assignments.len(), 8);
    assert_eq!(l.s.nodes[&NodeId(1)].free.cpu_milli, 0);
}
