use super::*;
use crate::sched::index::PolicyKind;
use crate::sched::test_log::{self, Log};
use crate::sched::{IndexedScheduler, Scheduler};
use crate::state::{Command, Outcome, Plan};
use hetsched_common::{GpuDevice, GpuRequest, JobId, NodeId, NodeResources, TaskState};

fn entry(task: u64, user: &str, cpu: u64, gpu: u64) -> DrfEntry<'_> {
    DrfEntry {
        task: TaskId(task),
        user,
        demand: DrfUsage {
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
    let cap = DrfUsage {
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
        DrfUsage {
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

impl Log {
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
    test_log::submit(test_log::spec(count, cpus, gpus))
}

fn pipeline() -> IndexedScheduler {
    IndexedScheduler::new(PolicyKind::BestFit, 0)
        .with_ordering(Ordering::Pipeline)
        .with_reserved_pools(ReserveHistory::new(2000))
}

fn state_of(l: &Log, task: u64) -> TaskState {
    l.s.tasks()[&TaskId(task)].status.state
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
    // A GPU task waiting keeps CPU tasks off the reserve of a node whose GPUs it could
    // use: a GPU task that fits nowhere (1 GPU and 2 CPUs, as the history's start, but
    // more memory than the node has) is in the GPU queue, so of 8 one-CPU tasks only 4
    // start.
    let mut waiting = test_log::spec(1, 2, 1);
    waiting.resources.mem_mib = 1_000_000;
    l.apply(&mut sched, test_log::submit(waiting)); // task 1
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
        let t = &l.s.tasks()[&TaskId(*v)];
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
    assert_eq!(l.s.nodes()[&NodeId(1)].free.cpu_milli, 0);
}

fn gpu_node_keyed(key: u64, cpus: u64, gpus: usize, pool: Option<&str>) -> Command {
    let mut c = gpu_node(cpus, gpus);
    if let Command::RegisterNode {
        key: k,
        name,
        labels,
        ..
    } = &mut c
    {
        *k = key;
        *name = format!("g{key}");
        if let Some(p) = pool {
            labels.insert(
                hetsched_common::protocol::GPU_POOL_LABEL.to_string(),
                p.to_string(),
            );
        }
    }
    c
}

#[test]
fn gpu_pools_lend_idle_gpus_when_the_owning_queue_has_nothing_that_fits() {
    use hetsched_common::protocol::GpuPool;
    let mut sched = pipeline();
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    // Node 1: 4 GPUs its slave put in the single pool; nodes 2 (8 GPUs) and 3 (4 GPUs) in
    // the multi pool.
    l.apply(&mut sched, gpu_node_keyed(1, 16, 4, Some("single")));
    l.apply(&mut sched, gpu_node_keyed(2, 32, 8, Some("multi")));
    l.apply(&mut sched, gpu_node_keyed(3, 16, 4, Some("multi")));
    let pool = |l: &Log, n: u64| l.s.nodes()[&NodeId(n)].gpu_pool();
    assert_eq!(pool(&l, 1), Some(GpuPool::Single));
    assert_eq!(pool(&l, 3), Some(GpuPool::Multi));
    assert_eq!(
        l.s.node_info(&l.s.nodes()[&NodeId(3)]).gpu_pool.as_deref(),
        Some("multi")
    );
    // Four one-GPU tasks fill the single pool's node, not the multi pool's.
    l.apply(&mut sched, submit(4, 2, 1)); // tasks 1..=4
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 4, "{plan:?}");
    assert!(plan
        .assignments
        .iter()
        .all(|a| a.node == NodeId(1) && !a.borrowed));
    // A multi-GPU task that fits nowhere waits in gpu-multi (task 5), and a fifth one-GPU
    // task arrives (task 6): its pool is exhausted, and nothing waiting in gpu-multi fits
    // the multi pool's idle GPUs, so they are lent to it in this very plan.
    l.apply(&mut sched, submit(1, 2, 16));
    l.apply(&mut sched, submit(1, 2, 1));
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 1, "{plan:?}");
    let a = &plan.assignments[0];
    assert_eq!(a.task, TaskId(6));
    assert_eq!(pool(&l, a.node.0), Some(GpuPool::Multi));
    assert!(a.borrowed);
    assert!(l.s.tasks()[&TaskId(6)].borrowed);
    assert!(l.s.task_info(&l.s.tasks()[&TaskId(6)]).borrowed);
    assert!(!l.s.task_info(&l.s.tasks()[&TaskId(1)]).borrowed);
    assert_eq!(state_of(&l, 5), TaskState::Pending);
    l.apply(
        &mut sched,
        Command::CancelJob {
            job: hetsched_common::JobId(2),
        },
    );
    // The other way round. Two four-GPU tasks (7, 8) take the multi pool's room, and node
    // 1's one-GPU tasks end.
    l.apply(&mut sched, submit(2, 4, 4)); // tasks 7, 8
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 2, "{plan:?}");
    assert!(plan
        .assignments
        .iter()
        .all(|a| pool(&l, a.node.0) == Some(GpuPool::Multi) && !a.borrowed));
    for t in 1..=4 {
        l.apply(
            &mut sched,
            Command::TaskFinished {
                node: NodeId(1),
                task: TaskId(t),
                attempt: 1,
                exit_code: 0,
                reason: None,
            },
        );
    }
    // A third four-GPU task (9) fits only node 1 (single pool), and a one-GPU task that
    // fits node 1 waits in gpu-single (10): node 1 is not lent; task 10 gets it.
    l.apply(&mut sched, submit(1, 4, 4)); // task 9
    l.apply(&mut sched, submit(1, 2, 1)); // task 10
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 1, "{plan:?}");
    assert_eq!(plan.assignments[0].task, TaskId(10));
    assert_eq!(state_of(&l, 9), TaskState::Pending);
    // A one-GPU task that fits nowhere (11, 64 CPUs) is all gpu-single holds besides: node
    // 1's three idle GPUs are nothing to it, so they are lent to task 9... once it has room:
    // task 10 ends.
    l.apply(&mut sched, submit(1, 64, 1)); // task 11
    l.apply(
        &mut sched,
        Command::TaskFinished {
            node: NodeId(1),
            task: TaskId(10),
            attempt: 1,
            exit_code: 0,
            reason: None,
        },
    );
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 1, "{plan:?}");
    assert_eq!(plan.assignments[0].task, TaskId(9));
    assert_eq!(plan.assignments[0].node, NodeId(1));
    assert!(plan.assignments[0].borrowed);
}

#[test]
fn a_gpu_task_borrows_cpu_pool_cpus_only_when_the_cpu_queue_is_empty() {
    use crate::sched::index::{IndexConfig, PlacementIndex};
    use crate::sched::loads::Loads;
    use crate::sched::pools::PoolPlan;
    // The stage alone, with a reserve that stays at 1 CPU per GPU (no history learned): a
    // node of 8 CPUs and 2 GPUs keeps 2 CPUs for GPU tasks; a GPU task asking 4 CPUs
    // would take 2 of the CPU pool's.
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
    l.apply(&mut sched, gpu_node(8, 2));
    l.apply(&mut sched, submit(1, 4, 1)); // task 1: GPU
    l.apply(&mut sched, submit(1, 1, 0)); // task 2: CPU
    let history = ReserveHistory::new(1000);
    let loads = Loads::of(&l.s);
    let mut index = PlacementIndex::new(IndexConfig::default());
    index.upsert_node(NodeId(1), &l.s.nodes()[&NodeId(1)].free);
    let mut policy = PolicyKind::BestFit.build(0);
    let req =
        l.s.job_resources(hetsched_common::JobId(1))
            .cloned()
            .unwrap();
    let try_place = |order: &[TaskId], index: &mut PlacementIndex, policy: &mut _| {
        let pp = PoolPlan::new(&l.s, order);
        let mut select = |ix: &mut PlacementIndex, q: &crate::sched::index::PlacementQuery<'_>| {
            ix.place(q, policy)
        };
        let placed = pp.place_gpu(
            &loads,
            &history,
            TaskId(1),
            &req,
            QueueKind::GpuSingle,
            None,
            index,
            &mut select,
        );
        (pp, placed)
    };
    // A CPU task waits: the GPU task waits too.
    let (_, placed) = try_place(&[TaskId(1), TaskId(2)], &mut index, &mut policy);
    assert_eq!(placed, None);
    // The CPU queue is empty: it borrows, and is marked so.
    let (mut pp, placed) = try_place(&[TaskId(1)], &mut index, &mut policy);
    assert_eq!(placed, Some((NodeId(1), false)));
    index.take(NodeId(1), &req).unwrap();
    assert!(pp.placed(
        &index,
        &loads,
        &history,
        NodeId(1),
        &req,
        QueueKind::GpuSingle,
        false
    ));
}

#[test]
fn cpu_borrowers_are_marked_borrowed_and_the_loads_stay_exact() {
    let mut sched = pipeline();
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(&mut sched, gpu_node(8, 2)); // reserve 4 of 8 CPUs
    l.apply(&mut sched, submit(6, 1, 0)); // tasks 1..=6: the last 2 borrow
    let plan = l.round(&mut sched);
    let borrowed: Vec<(u64, bool)> = plan
        .assignments
        .iter()
        .map(|a| (a.task.0, a.borrowed))
        .collect();
    assert_eq!(
        borrowed,
        vec![
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, true),
            (6, true)
        ]
    );
    assert!(l.s.tasks()[&TaskId(5)].borrowed);
    // A GPU task takes the reserve back: victims stop, the GPU task runs, not borrowed.
    l.apply(&mut sched, submit(1, 3, 2)); // task 7
    l.round(&mut sched);
    let plan = l.round(&mut sched);
    assert!(
        plan.assignments
            .iter()
            .any(|a| a.task == TaskId(7) && !a.borrowed),
        "{plan:?}"
    );
    // The incrementally kept loads equal loads built from scratch.
    let mut fresh = crate::sched::loads::Loads::of(&l.s);
    if let Some(d) = sched.pool_demand() {
        fresh.resplit(&d);
    }
    assert_eq!(sched.loads(), Some(&fresh));
    let mut fresh_users = user_usage(&l.s);
    fresh_users.retain(|_, u| *u != DrfUsage::default());
    assert_eq!(sched.loads().map(|x| x.users()), Some(&fresh_users));
    assert_eq!(
        sched.loads().map(|x| x.capacity()),
        Some(cluster_capacity(&l.s))
    );
}

#[test]
fn with_one_gpu_pool_in_the_cluster_every_gpu_task_uses_it() {
    let mut sched = pipeline();
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    // Only single-pool nodes: a four-GPU task (gpu-multi) is not held back waiting for a
    // multi pool that does not exist, even with one-GPU tasks queued.
    l.apply(&mut sched, gpu_node_keyed(1, 16, 4, None));
    l.apply(&mut sched, submit(1, 64, 1)); // task 1: gpu-single, fits nowhere
    l.apply(&mut sched, submit(1, 4, 4)); // task 2: gpu-multi
    let plan = l.round(&mut sched);
    assert_eq!(plan.assignments.len(), 1, "{plan:?}");
    assert_eq!(plan.assignments[0].task, TaskId(2));
    assert!(!plan.assignments[0].borrowed);
}

#[test]
fn single_gpu_tasks_waiting_get_the_multi_pools_idle_gpus_in_the_next_plan() {
    use hetsched_common::protocol::GpuPool;
    let mut sched = pipeline();
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    // Node 1: 2 GPUs in the single pool; node 2: 8 GPUs in the multi pool.
    l.apply(&mut sched, gpu_node_keyed(1, 16, 2, Some("single")));
    l.apply(&mut sched, gpu_node_keyed(2, 32, 8, Some("multi")));
    let pool = |l: &Log, n: NodeId| l.s.nodes()[&n].gpu_pool();
    // An eight-GPU task takes the multi pool's node; two one-GPU tasks the single pool's.
    l.apply(&mut sched, submit(1, 4, 8)); // task 1
    l.apply(&mut sched, submit(2, 2, 1)); // tasks 2, 3
    assert_eq!(l.round(&mut sched).assignments.len(), 3);
    // Three more one-GPU tasks find no GPU: they wait, blocked (one key, one probe).
    l.apply(&mut sched, submit(3, 2, 1)); // tasks 4..=6
    let (_, probes) = sched.blocked();
    assert!(l.round(&mut sched).assignments.is_empty());
    assert_eq!(sched.blocked(), (1, probes + 1));
    assert!(l.round(&mut sched).is_empty());
    assert_eq!(sched.blocked().1, probes + 1, "nothing changed: no probe");
    // The eight-GPU task ends: its node idles with nothing in gpu-multi, so the very next
    // plan lends it to the waiting one-GPU tasks, in their queue order.
    l.apply(
        &mut sched,
        Command::TaskFinished {
            node: NodeId(2),
            task: TaskId(1),
            attempt: 1,
            exit_code: 0,
            reason: None,
        },
    );
    let plan = l.round(&mut sched);
    let tasks: Vec<TaskId> = plan.assignments.iter().map(|a| a.task).collect();
    assert_eq!(tasks, vec![TaskId(4), TaskId(5), TaskId(6)], "{plan:?}");
    assert!(plan
        .assignments
        .iter()
        .all(|a| pool(&l, a.node) == Some(GpuPool::Multi) && a.borrowed));
}

/// The queue order as the plan used to build it: every pending task looked up afresh, its
/// group found in a map. `ordered_refs` walks a cursor and keeps the last job and group; it
/// must give exactly this order, with the same tasks and jobs.
fn reference_order(view: &ClusterState, ordering: Ordering) -> Vec<(TaskId, JobId)> {
    let usage = BTreeMap::new();
    let cap = DrfUsage::default();
    let pending: Vec<(TaskId, &Task, &Job)> = view
        .pending()
        .iter()
        .filter_map(|id| {
            let t = view.tasks().get(id)?;
            Some((*id, t, view.jobs().get(&t.job)?))
        })
        .collect();
    if ordering == Ordering::Submission {
        let mut all = pending;
        all.sort_by_key(|q| Reverse(q.1.priority));
        return all.iter().map(|q| (q.0, q.2.id)).collect();
    }
    type Found<'v> = (TaskId, &'v Task, &'v Job);
    let mut groups: BTreeMap<(Reverse<i64>, u8, bool), Vec<Found<'_>>> = BTreeMap::new();
    for q in pending {
        let req = &q.2.spec.resources;
        let (rank, head) = match ordering {
            Ordering::Pipeline => {
                let kind = QueueKind::of(req);
                let back =
                    kind == QueueKind::Cpu && q.1.status.reason == Some(TaskReason::Preempted);
                (kind as u8, !back)
            }
            _ => (0, true),
        };
        groups
            .entry((Reverse(q.1.priority), rank, head))
            .or_default()
            .push(q);
    }
    let mut out = Vec::new();
    for g in groups.values() {
        let entries: Vec<DrfEntry<'_>> = g
            .iter()
            .map(|q| DrfEntry {
                task: q.0,
                user: &q.2.spec.user,
                demand: DrfUsage::of(&q.2.spec.resources),
            })
            .collect();
        out.extend(drf_order(&entries, &usage, &cap).into_iter().map(|id| {
            let q = g.iter().find(|q| q.0 == id).expect("in its group");
            (q.0, q.2.id)
        }));
    }
    out
}

#[test]
fn the_pending_cursor_gives_the_order_of_fresh_lookups() {
    // Jobs of three users, CPU and GPU (two queues), with holes in the pending ids of
    // every size: tasks placed (running), a job cancelled whole, single tasks cancelled.
    let mut l = Log::new();
    let mut sched = pipeline();
    l.apply(&mut sched, gpu_node(24, 2));
    let mut jobs = Vec::new();
    for (i, (count, gpus, user)) in [
        (30, 0, "a"),
        (12, 1, "b"),
        (40, 0, "b"),
        (25, 0, "a"),
        (9, 1, "c"),
        (80, 0, "a"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = test_log::spec(count, 1, gpus);
        spec.user = user.into();
        let Outcome::Submitted { job, .. } = l.apply(&mut sched, test_log::submit(spec)) else {
            panic!("job {i} not submitted");
        };
        jobs.push(job);
    }
    l.round(&mut sched);
    l.apply(&mut sched, Command::CancelJob { job: jobs[3] });
    let ids: Vec<TaskId> = l.s.pending().iter().copied().collect();
    for id in ids.iter().step_by(7) {
        l.apply(&mut sched, Command::CancelTask { task: *id });
    }
    assert!(l.s.pending().len() > 100, "a backlog with holes");
    for ordering in [Ordering::Submission, Ordering::Drf, Ordering::Pipeline] {
        let got: Vec<(TaskId, JobId)> = ordered_refs(
            &l.s,
            ordering,
            &BTreeMap::new(),
            &DrfUsage::default(),
            &BTreeMap::new(),
        )
        .iter()
        .map(|q| {
            assert!(std::ptr::eq(q.t, &l.s.tasks()[&q.task]), "its own task");
            assert_eq!(q.t.job, q.job.id, "its own job");
            (q.task, q.job.id)
        })
        .collect();
        assert_eq!(got, reference_order(&l.s, ordering), "{ordering:?}");
    }
}

#[test]
fn a_higher_fair_share_factor_goes_first_then_drf() {
    let cap = DrfUsage {
        cpu_milli: 4000,
        mem_mib: 0,
        gpu_milli: 0,
    };
    // a submitted first; equal demands, nothing held: DRF alone alternates from a.
    let entries = vec![
        entry(1, "a", 1000, 0),
        entry(2, "a", 1000, 0),
        entry(3, "b", 1000, 0),
        entry(4, "b", 1000, 0),
    ];
    let ids = |f: &BTreeMap<String, u64>| -> Vec<usize> {
        drf_positions(&entries, &BTreeMap::new(), &cap, f)
    };
    assert_eq!(ids(&BTreeMap::new()), vec![0, 2, 1, 3]);
    // a used much of late (factor 0.2), b little (0.9): b's tasks first, whatever DRF says.
    let factors = BTreeMap::from([
        ("a".to_string(), 200_000_000),
        ("b".to_string(), 900_000_000),
    ]);
    assert_eq!(ids(&factors), vec![2, 3, 0, 1]);
    // A user with no usage (absent: factor 1) goes before both.
    let only_b = BTreeMap::from([("b".to_string(), 900_000_000)]);
    assert_eq!(ids(&only_b), vec![0, 1, 2, 3]);
}
