//! S0.2 scheduling test — **simulated**: the real replicated state and the real scheduler
//! (`IndexedScheduler` with its engine-choice stage) driven through the log by a virtual
//! clock; each task "runs" for its engine's time in the task–engine relation. No processes.
//!
//! Ten programs whose fastest engine is the GPU, on a cluster with 2 emulated GPUs and 4
//! emulated NPUs: the overflow runs on the NPUs (the second-best kind) and the whole
//! finishes sooner than on the same GPUs alone.

use super::test_log::apply_tracked;
use super::{IndexedScheduler, Scheduler};
use crate::sched::index::PolicyKind;
use crate::state::{ClusterState, Command, Outcome};
use hetsched_common::program::{Api, ApiCall, EngineDecl, EngineTime, Program, SelectionTable};
use hetsched_common::{
    EngineKind, GpuDevice, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId, TaskState,
};
use std::collections::{BTreeMap, BTreeSet};

/// Modelled time of the one gemm call of each program, per engine kind, ms.
const GPU_MS: u64 = 100;
const NPU_MS: u64 = 150;
const CPU_MS: u64 = 800;

struct Sim {
    s: ClusterState,
    sched: IndexedScheduler,
    i: u64,
    now_ms: u64,
}

impl Sim {
    fn apply(&mut self, command: Command) -> Outcome {
        self.i += 1;
        apply_tracked(&mut self.s, self.i, self.now_ms, &mut self.sched, command)
    }

    /// A slave with `gpus` emulated GPUs and `npus` emulated NPUs (and 8 cores), with the
    /// profile its engines would produce.
    fn slave(&mut self, key: u64, gpus: u32, npus: u32) -> NodeId {
        let mut capacity = NodeResources {
            cpu_milli: 8000,
            mem_mib: 8192,
            gpus: (0..gpus)
                .map(|_| GpuDevice {
                    model: "emulated".into(),
                    free_milli: 1000,
                    emulated: true,
                })
                .collect(),
            ..Default::default()
        };
        if npus > 0 {
            capacity.engines.insert(EngineKind::Npu, npus);
        }
        let node = match self.apply(Command::RegisterNode {
            key,
            node: None,
            name: format!("s{key}"),
            addr: format!("127.0.0.1:{key}"),
            capacity,
            labels: Default::default(),
            partitions: Vec::new(),
        }) {
            Outcome::Registered { node } => node,
            o => panic!("{o:?}"),
        };
        let mut table = SelectionTable::default();
        let bucket = gemm().bucket();
        let mut engines = vec![EngineDecl {
            kind: EngineKind::Cpu,
            count: 8,
            emulated: false,
        }];
        let mut times = vec![(EngineKind::Cpu, CPU_MS)];
        if gpus > 0 {
            engines.push(EngineDecl {
                kind: EngineKind::Gpu,
                count: gpus,
                emulated: true,
            });
            times.push((EngineKind::Gpu, GPU_MS));
        }
        if npus > 0 {
            engines.push(EngineDecl {
                kind: EngineKind::Npu,
                count: npus,
                emulated: true,
            });
            times.push((EngineKind::Npu, NPU_MS));
        }
        for (engine, ms) in times {
            table.record(
                Api::Gemm,
                bucket,
                EngineTime {
                    engine,
                    time_us: ms * 1000,
                    emulated: engine != EngineKind::Cpu,
                },
            );
        }
        self.apply(Command::RecordProfile {
            node,
            engines,
            table,
        });
        node
    }
}

fn gemm() -> ApiCall {
    ApiCall::new(Api::Gemm, 512, 7)
}

fn ms_of(kind: EngineKind) -> u64 {
    match kind {
        EngineKind::Gpu => GPU_MS,
        EngineKind::Npu => NPU_MS,
        _ => CPU_MS,
    }
}

/// Runs 10 one-call gemm programs on a cluster of GPU slaves (one GPU each) and NPU
/// slaves (two NPUs each); returns the makespan (ms) and the engine kind each task ran on.
fn run(gpu_slaves: u64, npu_slaves: u64) -> (u64, Vec<EngineKind>) {
    let mut sim = Sim {
        s: ClusterState::new(),
        sched: IndexedScheduler::new(PolicyKind::LeastFit, 1),
        i: 0,
        now_ms: 1,
    };
    for k in 0..gpu_slaves {
        sim.slave(k + 1, 1, 0);
    }
    for k in 0..npu_slaves {
        sim.slave(100 + k, 0, 2);
    }
    sim.sched.reset(&sim.s);
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let spec = JobSpec {
            name: "gemm".into(),
            resources: ResourceRequest {
                cpu_milli: 500,
                mem_mib: 64,
                ..Default::default()
            },
            count: 1,
            program: Some(Program {
                calls: vec![gemm()],
            }),
            ..Default::default()
        };
        match sim.apply(Command::SubmitJob { spec }) {
            Outcome::Submitted { tasks: t, .. } => tasks.extend(t),
            o => panic!("{o:?}"),
        }
    }
    // The relation the master built: GPU fastest, NPU second.
    let rel = sim
        .s
        .relations()
        .values()
        .next()
        .expect("a relation")
        .clone();
    assert_eq!(
        rel.iter().map(|e| e.engine).collect::<Vec<_>>(),
        if npu_slaves > 0 {
            vec![EngineKind::Gpu, EngineKind::Npu, EngineKind::Cpu]
        } else {
            vec![EngineKind::Gpu, EngineKind::Cpu]
        }
    );
    let mut ran_on: BTreeMap<TaskId, EngineKind> = BTreeMap::new();
    // Finish events: (virtual time, task, node, attempt).
    let mut running: BTreeSet<(u64, TaskId, NodeId, u32)> = BTreeSet::new();
    for _round in 0..1000 {
        let plan = sim.sched.plan_at(&sim.s, sim.now_ms);
        if !plan.is_empty() {
            let nodes: Vec<NodeId> = plan.assignments.iter().map(|a| a.node).collect();
            let o = sim.apply(Command::ApplyPlan(plan));
            sim.sched.nodes_changed(&sim.s, &nodes);
            let Outcome::PlanApplied { accepted, .. } = o else {
                panic!("{o:?}")
            };
            for r in accepted {
                let kind = sim.s.tasks()[&r.task].engine.expect("an engine chosen");
                ran_on.insert(r.task, kind);
                sim.apply(Command::TaskStarted {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                });
                running.insert((sim.now_ms + ms_of(kind), r.task, r.node, r.attempt));
            }
            continue;
        }
        let Some(&first) = running.iter().next() else {
            break;
        };
        // Advance the clock to the next finish; end everything finishing then.
        sim.now_ms = first.0;
        while let Some(&(at, task, node, attempt)) = running.iter().next() {
            if at != sim.now_ms {
                break;
            }
            running.remove(&(at, task, node, attempt));
            sim.apply(Command::TaskFinished {
                node,
                task,
                attempt,
                exit_code: 0,
                reason: None,
            });
        }
    }
    for t in &tasks {
        assert_eq!(sim.s.tasks()[t].status.state, TaskState::Succeeded, "{t}");
    }
    (sim.now_ms - 1, tasks.iter().map(|t| ran_on[t]).collect())
}

#[test]
fn gpu_overflow_runs_on_npus_and_finishes_sooner_than_gpus_alone() {
    let (gpu_only, kinds_gpu_only) = run(2, 0);
    assert!(kinds_gpu_only.iter().all(|k| *k == EngineKind::Gpu));
    let (mixed, kinds_mixed) = run(2, 2);
    let on_npu = kinds_mixed
        .iter()
        .filter(|k| **k == EngineKind::Npu)
        .count();
    let on_gpu = kinds_mixed
        .iter()
        .filter(|k| **k == EngineKind::Gpu)
        .count();
    eprintln!("makespan: GPUs only {gpu_only} ms; 2 GPUs + 4 NPUs {mixed} ms ({on_gpu} on GPU, {on_npu} on NPU)");
    assert_eq!(on_gpu + on_npu, 10, "{kinds_mixed:?}");
    // The first two take the GPUs; the four waiting behind them overflow to the NPUs.
    assert_eq!(&kinds_mixed[..2], &[EngineKind::Gpu, EngineKind::Gpu]);
    assert!(on_npu >= 4, "{kinds_mixed:?}");
    assert!(
        mixed < gpu_only,
        "mixed {mixed} ms vs GPU only {gpu_only} ms"
    );
    // Five rounds of two on the GPUs alone.
    assert_eq!(gpu_only, 5 * GPU_MS);
}
