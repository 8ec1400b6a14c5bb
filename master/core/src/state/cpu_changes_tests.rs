//! The S3 live CPU changes through `apply`: search steps, records and compressions move
//! CPUs between a task and its node and back.

use crate::state::*;
use hetsched_common::{
    CpuSearchSpec, GpuDevice, GpuRequest, JobSpec, NodeId, NodeResources, ResourceRequest,
    TaskClass, TaskId,
};

struct Log {
    state: ClusterState,
    index: u64,
}

impl Log {
    fn apply(&mut self, command: Command) -> Outcome {
        self.index += 1;
        self.state.apply(
            self.index,
            CommandEnvelope {
                at_ms: 1000 + self.index,
                request: None,
                command,
            },
        )
    }

    /// One node of 12 CPUs and one GPU; a GPU task (2 CPUs, class image) and a CPU task
    /// (8 CPUs) running on it.
    fn with_two_tasks() -> (Self, NodeId, TaskId, TaskId) {
        let mut l = Log {
            state: ClusterState::new(),
            index: 0,
        };
        let node = match l.apply(Command::RegisterNode {
            key: 1,
            node: None,
            name: "n".into(),
            addr: "127.0.0.1:1".into(),
            capacity: NodeResources {
                cpu_milli: 12_000,
                mem_mib: 4096,
                gpus: vec![GpuDevice {
                    model: "T4".into(),
                    free_milli: 1000,
                    emulated: true,
                }],
                engines: Default::default(),
            },
            labels: Default::default(),
            partitions: Vec::new(),
        }) {
            Outcome::Registered { node } => node,
            o => panic!("{o:?}"),
        };
        let mut submit = |cpu_milli, gpu: bool| {
            let spec = JobSpec {
                resources: ResourceRequest {
                    cpu_milli,
                    mem_mib: 10,
                    gpu: if gpu {
                        GpuRequest::whole(1)
                    } else {
                        GpuRequest::none()
                    },
                    engines: Default::default(),
                },
                count: 1,
                command: vec!["true".into()],
                cpu_search: gpu.then_some(CpuSearchSpec {
                    class: TaskClass::Image,
                    pipelined: false,
                    heavy_weights: false,
                    cpu_heavy: false,
                }),
                ..Default::default()
            };
            let task = match l.apply(Command::SubmitJob { spec }) {
                Outcome::Submitted { tasks, .. } => tasks[0],
                o => panic!("{o:?}"),
            };
            let o = l.apply(Command::ApplyPlan(Plan {
                assignments: vec![Assign::to(task, node)],
                ..Default::default()
            }));
            assert!(
                matches!(o, Outcome::PlanApplied { ref accepted, .. } if accepted.len() == 1),
                "{o:?}"
            );
            l.apply(Command::TaskStarted {
                node,
                task,
                attempt: 1,
            });
            task
        };
        let gpu = submit(2000, true);
        let cpu = submit(8000, false);
        (l, node, gpu, cpu)
    }

    /// `task`'s first attempt on `node` ends well.
    fn finish(&mut self, node: NodeId, task: TaskId) {
        self.apply(Command::TaskFinished {
            node,
            task,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
    }

    fn free(&self, node: NodeId) -> u64 {
        self.state.nodes()[&node].free.cpu_milli
    }
}

#[test]
fn search_steps_move_cpus_between_the_task_and_the_node() {
    let (mut l, n, gpu, _) = Log::with_two_tasks();
    assert_eq!(l.free(n), 2000);
    assert_eq!(
        l.state.tasks()[&gpu].cpu_search,
        Some(CpuSearchPhase::Probing)
    );
    let set = |cpu_milli| Command::SetTaskCpus {
        node: n,
        task: gpu,
        attempt: 1,
        cpu_milli,
    };
    assert!(matches!(
        l.apply(set(1000)),
        Outcome::CpusSet {
            cpu_milli: 1000,
            ..
        }
    ));
    assert_eq!(l.free(n), 3000);
    assert_eq!(l.state.task_cpu_milli(gpu), Some(1000));
    assert!(matches!(l.apply(set(4000)), Outcome::CpusSet { .. }));
    assert_eq!(l.free(n), 0);
    // More than is free: refused, nothing changes.
    assert!(matches!(l.apply(set(5000)), Outcome::Ignored(_)));
    assert_eq!((l.free(n), l.state.task_cpu_milli(gpu)), (0, Some(4000)));
    // A stale attempt is fenced off; zero is invalid.
    let stale = Command::SetTaskCpus {
        node: n,
        task: gpu,
        attempt: 2,
        cpu_milli: 1000,
    };
    assert!(matches!(l.apply(stale), Outcome::Ignored(_)));
    assert!(matches!(l.apply(set(0)), Outcome::Rejected(_)));
    // The record ends the search and keeps the class's count.
    l.apply(Command::RecordCpuConfig {
        task: gpu,
        class: TaskClass::Image,
        cpu_milli: 4000,
    });
    assert_eq!(l.state.tasks()[&gpu].cpu_search, Some(CpuSearchPhase::Done));
    assert_eq!(l.state.cpu_history()[&TaskClass::Image], 4000);
    let info = l.state.task_info(&l.state.tasks()[&gpu]);
    assert_eq!((info.cpus, info.cpu_search.as_deref()), (4.0, Some("done")));
    // The task ends: its current allocation returns to the node.
    l.finish(n, gpu);
    assert_eq!(l.free(n), 4000);
}

#[test]
fn compressed_cores_are_held_for_the_gpu_task_until_it_ends() {
    let (mut l, n, gpu, cpu) = Log::with_two_tasks();
    let compress = |cpu_milli| Command::CompressTask {
        node: n,
        task: cpu,
        attempt: 1,
        cpu_milli,
        gpu_task: gpu,
    };
    // Growing is no compression.
    assert!(matches!(l.apply(compress(9000)), Outcome::Rejected(_)));
    assert_eq!(l.apply(compress(4000)), Outcome::TaskUpdated);
    let info = l.state.task_info(&l.state.tasks()[&cpu]);
    assert!(info.compressed);
    assert_eq!(info.cpus, 4.0);
    // 4 freed cores are held, not free.
    assert_eq!(l.free(n), 2000);
    assert_eq!(l.state.nodes()[&n].compress_reserves.len(), 1);
    // The CPU task ending gives back its 4; the held 4 stay held.
    l.finish(n, cpu);
    assert_eq!(l.free(n), 6000);
    // The GPU task ending returns its 2 and the held 4.
    l.finish(n, gpu);
    assert_eq!(l.free(n), 12_000);
    assert!(l.state.nodes()[&n].compress_reserves.is_empty());
}

#[test]
fn a_compression_for_a_gpu_task_that_is_gone_frees_the_cores() {
    let (mut l, n, gpu, cpu) = Log::with_two_tasks();
    l.finish(n, gpu);
    assert_eq!(l.free(n), 4000);
    let o = l.apply(Command::CompressTask {
        node: n,
        task: cpu,
        attempt: 1,
        cpu_milli: 4000,
        gpu_task: gpu,
    });
    assert_eq!(o, Outcome::TaskUpdated);
    assert_eq!(l.free(n), 8000);
    assert!(l.state.nodes()[&n].compress_reserves.is_empty());
    // A node lost re-queues both; everything returns and the next attempt starts over.
    l.apply(Command::NodeDown { node: n });
    assert_eq!(l.free(n), 12_000);
    assert_eq!(l.state.tasks()[&cpu].cpu_milli, Some(4000));
    l.apply(Command::NodeUp { node: n });
    l.apply(Command::ApplyPlan(Plan {
        assignments: vec![Assign::to(cpu, n)],
        ..Default::default()
    }));
    assert_eq!(l.state.tasks()[&cpu].cpu_milli, None);
    assert!(!l.state.tasks()[&cpu].compressed);
    assert_eq!(l.free(n), 4000);
}
