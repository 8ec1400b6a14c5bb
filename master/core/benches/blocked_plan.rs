//! `cargo bench -p hetsched-master-core --bench blocked_plan`: what a plan costs the leader
//! with a deep backlog of tasks that fit nowhere (docs/DESIGN.md, S3; BENCHMARKS.md#blocked-plan).
//!
//! A full cluster (100 nodes, each held whole by one running task) and `--tasks` pending
//! tasks (default 10,000; 8 users, a few hundred distinct requests, CPU and GPU) that all
//! fit nowhere. After the first plan has blocked every key, it times per queueing:
//! - `unchanged`: plans with nothing changed since (the leader plans again on events that
//!   change nothing the scheduler reads, e.g. a task's start report);
//! - `changed`: a plan after one more submission of a blocked request (the pending set
//!   changed: the whole backlog is ordered and passed over again);
//! - `freed`: a plan after resources freed on a node (every key probed again).
//!
//! Then the shape of `docs/bench-user.sh`: one user's job of `--tasks` one-CPU tasks on one
//! 16-CPU node, one task ending before each plan (the plan places one).
//!
//! Each figure is the mean of its rounds, in microseconds of wall time (run it on a quiet
//! machine). A bench, not a test: it measures and prints, it asserts only what each case
//! sets up (the backlog stays blocked; a freed CPU is taken again).

use hetsched_common::{
    GpuDevice, GpuRequest, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId,
};
use hetsched_master_core::sched::index::PolicyKind;
use hetsched_master_core::sched::multiqueue::{Ordering, ReserveHistory};
use hetsched_master_core::state::{command_nodes, touched_nodes, Plan};
use hetsched_master_core::Scheduler;
use hetsched_master_core::{ClusterState, Command, CommandEnvelope, IndexedScheduler, Outcome};
use std::time::Instant;

struct Log {
    s: ClusterState,
    i: u64,
}

impl Log {
    fn apply(&mut self, sched: &mut dyn Scheduler, command: Command) -> Outcome {
        self.i += 1;
        let pre = command_nodes(&command);
        let o = self.s.apply(
            self.i,
            CommandEnvelope {
                at_ms: 0,
                request: None,
                command,
            },
        );
        let touched = touched_nodes(pre, &o);
        sched.nodes_changed(&self.s, &touched);
        o
    }

    /// Plans once, applies the plan and starts what it placed; returns the placements.
    fn round(&mut self, sched: &mut dyn Scheduler) -> usize {
        let plan = sched.plan(&self.s);
        self.apply_and_start(sched, plan)
    }

    /// Applies `plan` and starts what it placed; returns the placements.
    fn apply_and_start(&mut self, sched: &mut dyn Scheduler, plan: Plan) -> usize {
        if plan.is_empty() {
            return 0;
        }
        let Outcome::PlanApplied { accepted, .. } = self.apply(sched, Command::ApplyPlan(plan))
        else {
            return 0;
        };
        for r in &accepted {
            self.apply(
                sched,
                Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                },
            );
        }
        accepted.len()
    }

    /// Ends `task`'s current attempt with exit code 0, where it runs.
    fn finish(&mut self, sched: &mut dyn Scheduler, task: TaskId) {
        let (node, attempt) = self
            .s
            .tasks()
            .get(&task)
            .map(|t| (t.status.node.unwrap_or(NodeId(0)), t.status.attempt))
            .unwrap_or((NodeId(0), 1));
        self.apply(
            sched,
            Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code: 0,
                reason: None,
            },
        );
    }
}

fn gpu_node(cpus: u64) -> NodeResources {
    NodeResources {
        cpu_milli: cpus * 1000,
        mem_mib: 256 * 1024,
        gpus: (0..8)
            .map(|_| GpuDevice {
                model: "V100M16".into(),
                free_milli: 1000,
                emulated: false,
            })
            .collect(),
        engines: Default::default(),
    }
}

fn job(user: usize, cpu_milli: u64, mem_mib: u64, gpus: u32, milli: u32) -> Command {
    Command::SubmitJob {
        spec: JobSpec {
            name: "bench".into(),
            user: format!("user{user}"),
            resources: ResourceRequest {
                cpu_milli,
                mem_mib,
                gpu: GpuRequest {
                    count: gpus,
                    milli,
                    models: vec![],
                },
                engines: Default::default(),
            },
            count: 1,
            command: vec!["bench".into()],
            ..Default::default()
        },
    }
}

/// The i-th blocked request: user, CPU thousandths, MiB, GPUs, thousandths per GPU.
fn blocked_request(i: usize) -> (usize, u64, u64, u32, u32) {
    let user = i % 8;
    let cpu = 500 * (1 + (i * 7) % 16) as u64;
    let mem = 1024 * (1 + (i * 3) % 8) as u64;
    match i % 4 {
        0 => (user, cpu, mem, 0, 0),
        1 => (user, cpu, mem, 1, 250 * (1 + (i / 4 % 4) as u32)),
        2 => (user, cpu, mem, 1, 1000),
        _ => (user, cpu, mem, 1 + (i / 4 % 8) as u32, 1000),
    }
}

fn scheduler(ordering: Ordering) -> IndexedScheduler {
    let s = IndexedScheduler::new(PolicyKind::BestFit, 1).with_ordering(ordering);
    if ordering == Ordering::Pipeline {
        s.with_reserved_pools(ReserveHistory::default())
    } else {
        s
    }
}

fn mean_us(rounds: u32, mut f: impl FnMut() -> std::time::Duration) -> f64 {
    let total: std::time::Duration = (0..rounds).map(|_| f()).sum();
    total.as_secs_f64() * 1e6 / f64::from(rounds)
}

fn main() {
    let tasks: usize = std::env::args()
        .skip_while(|a| a != "--tasks")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    println!("blocked tasks: {tasks}; 100 nodes (60 with 8 GPUs), each held whole");
    for (name, ordering) in [
        ("fifo", Ordering::Submission),
        ("drf", Ordering::Drf),
        ("pipeline", Ordering::Pipeline),
    ] {
        let mut sched = scheduler(ordering);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        for n in 0..100u64 {
            let capacity = if n < 60 {
                gpu_node(32)
            } else {
                NodeResources {
                    cpu_milli: 64_000,
                    mem_mib: 256 * 1024,
                    ..Default::default()
                }
            };
            l.apply(
                &mut sched,
                Command::RegisterNode {
                    key: n + 1,
                    node: None,
                    name: format!("n{n}"),
                    addr: String::new(),
                    capacity,
                    labels: Default::default(),
                    partitions: vec![],
                },
            );
        }
        // One task holds each node whole.
        for n in 0..100 {
            let c = if n < 60 {
                job(n % 8, 32_000, 256 * 1024, 8, 1000)
            } else {
                job(n % 8, 64_000, 256 * 1024, 0, 0)
            };
            l.apply(&mut sched, c);
        }
        while l.round(&mut sched) > 0 {}
        let holders: Vec<_> = l.s.tasks().keys().copied().collect();
        for i in 0..tasks {
            let (u, c, m, g, gm) = blocked_request(i);
            l.apply(&mut sched, job(u, c, m, g, gm));
        }
        assert_eq!(l.round(&mut sched), 0, "the backlog fits nowhere");
        let unchanged = mean_us(200, || {
            let t = Instant::now();
            let p = sched.plan(&l.s);
            let d = t.elapsed();
            assert!(p.is_empty());
            d
        });
        let mut k = tasks;
        let changed = mean_us(20, || {
            let (u, c, m, g, gm) = blocked_request(k);
            k += 1;
            l.apply(&mut sched, job(u, c, m, g, gm));
            let t = Instant::now();
            let p = sched.plan(&l.s);
            let d = t.elapsed();
            assert!(p.is_empty());
            d
        });
        // Resources freed: a node's holder ends, the plan places what fits there, and the
        // holder's twin takes the node back (so that every round starts alike).
        let mut freed_total = std::time::Duration::ZERO;
        let rounds = 5u32;
        for r in 0..rounds as usize {
            let holder = holders[60 + r];
            l.finish(&mut sched, holder);
            let t = Instant::now();
            let p = sched.plan(&l.s);
            freed_total += t.elapsed();
            if !p.is_empty() {
                l.apply(&mut sched, Command::ApplyPlan(p));
            }
        }
        let freed = freed_total.as_secs_f64() * 1e6 / f64::from(rounds);
        let (keys, probes) = sched.blocked();
        println!(
            "{name:>9}: unchanged {unchanged:>9.1} us/plan   changed {changed:>9.1} us/plan   \
             freed {freed:>9.1} us/plan   ({keys} keys blocked, {probes} probes)"
        );
    }
    println!(
        "one user's job of {tasks} one-CPU tasks on one 16-CPU node, one task ending per plan"
    );
    for (name, ordering) in [
        ("fifo", Ordering::Submission),
        ("drf", Ordering::Drf),
        ("pipeline", Ordering::Pipeline),
    ] {
        let us = one_job(ordering, tasks);
        println!("{name:>9}: {us:>9.1} us/plan");
    }
}

/// The shape of `docs/bench-user.sh`: one user's job of `tasks` one-CPU tasks on one
/// 16-CPU node, the node full; each round one task ends and a plan places the next. Every
/// plan orders the whole backlog (the queue stage), so its cost follows the backlog's
/// length. Returns the mean plan, in microseconds.
fn one_job(ordering: Ordering, tasks: usize) -> f64 {
    let mut sched = scheduler(ordering);
    let mut l = Log {
        s: ClusterState::new(),
        i: 0,
    };
    l.apply(
        &mut sched,
        Command::RegisterNode {
            key: 1,
            node: None,
            name: "n1".into(),
            addr: String::new(),
            capacity: NodeResources {
                cpu_milli: 16_000,
                mem_mib: 65_536,
                ..Default::default()
            },
            labels: Default::default(),
            partitions: vec![],
        },
    );
    let Command::SubmitJob { mut spec } = job(0, 1000, 16, 0, 0) else {
        unreachable!("job() builds a submission");
    };
    spec.count = u32::try_from(tasks).unwrap_or(u32::MAX);
    l.apply(&mut sched, Command::SubmitJob { spec });
    while l.round(&mut sched) > 0 {}
    let rounds = 200u32;
    let mut total = std::time::Duration::ZERO;
    for _ in 0..rounds {
        let running = l.s.tasks().iter().find_map(|(id, t)| {
            (t.status.state == hetsched_common::TaskState::Running).then_some(*id)
        });
        let Some(task) = running else {
            break;
        };
        l.finish(&mut sched, task);
        let t = Instant::now();
        let p = sched.plan(&l.s);
        total += t.elapsed();
        assert_eq!(p.assignments.len(), 1, "the freed CPU is taken again");
        assert_eq!(
            l.apply_and_start(&mut sched, p),
            1,
            "the placement is accepted"
        );
    }
    total.as_secs_f64() * 1e6 / f64::from(rounds)
}
