//! Live CPU changes of running attempts (S3): the CPU-count search of GPU tasks (S3.2) and
//! the compression of CPU tasks that contend with them (S3.6). Pure like the rest of
//! `apply`.
//!
//! A change moves the difference between the node's `free` CPUs and the task's allocation
//! (`Task::cpu_milli`), so `free` stays capacity minus what the tasks hold. Cores freed by a
//! compression do not go back to `free`: they are held in `Node::compress_reserves` for the
//! GPU task that suffered, and return when that task's attempt ends (no new CPU task can be
//! placed on them meanwhile).

use super::{ClusterState, Outcome, TaskRef};
use hetsched_common::{Attempt, NodeId, TaskClass, TaskId, TaskState};
use serde::{Deserialize, Serialize};

/// Where a GPU task's CPU-count search is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuSearchPhase {
    /// The leader steps the count after each probe period.
    Probing,
    /// The best count was found and recorded for the task's class.
    Done,
}

impl CpuSearchPhase {
    /// `probing` or `done` (`tasks --json` `"cpu_search"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CpuSearchPhase::Probing => "probing",
            CpuSearchPhase::Done => "done",
        }
    }
}

/// Cores freed by a compression, held on the node for one GPU task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressReserve {
    /// The GPU task they are held for.
    pub gpu_task: TaskId,
    /// The compressed CPU task they came from.
    pub from_task: TaskId,
    /// How much, millicores.
    pub cpu_milli: u64,
}

impl ClusterState {
    /// The CPU allocation `task`'s current attempt holds, millicores.
    pub fn task_cpu_milli(&self, task: TaskId) -> Option<u64> {
        let t = self.tasks.get(&task)?;
        t.cpu_milli
            .or_else(|| self.jobs.get(&t.job).map(|j| j.spec.resources.cpu_milli))
    }

    /// The CPU allocation of the attempt `(node, task, attempt)` names, which must be
    /// assigned or running and hold its resources there; or why the command is stale.
    fn running_attempt(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> Result<u64, Outcome> {
        let t = self.current(node, task, attempt)?;
        if !matches!(t.status.state, TaskState::Assigned | TaskState::Running) {
            return Err(Outcome::Ignored(format!("{task} is not running")));
        }
        // A task queued here (S0.3) holds nothing of the node yet: there is nothing to move.
        if !self
            .nodes
            .get(&node)
            .is_some_and(|n| n.tasks.contains(&task))
        {
            return Err(Outcome::Ignored(format!(
                "{task} holds no resources on {node} yet"
            )));
        }
        self.task_cpu_milli(task)
            .ok_or_else(|| Outcome::Rejected(format!("{task} has no job")))
    }

    pub(super) fn set_task_cpus(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        cpu_milli: u64,
    ) -> Outcome {
        let old = match self.running_attempt(node, task, attempt) {
            Ok(c) => c,
            Err(o) => return o,
        };
        if cpu_milli == 0 {
            return Outcome::Rejected("a task keeps at least some CPU".into());
        }
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if cpu_milli > old {
            let more = cpu_milli - old;
            if n.free.cpu_milli < more {
                return Outcome::Ignored(format!(
                    "{node} has {} free millicores, {task} needs {more} more",
                    n.free.cpu_milli
                ));
            }
            n.free.cpu_milli -= more;
        } else {
            n.free.cpu_milli = (n.free.cpu_milli + (old - cpu_milli)).min(n.capacity.cpu_milli);
        }
        if let Some(t) = self.tasks.get_mut(&task) {
            t.cpu_milli = Some(cpu_milli);
        }
        Outcome::CpusSet {
            attempt: TaskRef {
                task,
                node,
                attempt,
            },
            cpu_milli,
        }
    }

    pub(super) fn record_cpu_config(
        &mut self,
        task: TaskId,
        class: TaskClass,
        cpu_milli: u64,
    ) -> Outcome {
        if cpu_milli == 0 {
            return Outcome::Rejected("a recorded CPU count is at least 1".into());
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return Outcome::Rejected(format!("unknown {task}"));
        };
        t.cpu_search = Some(CpuSearchPhase::Done);
        self.profiles.record_cpu(class, cpu_milli);
        Outcome::TaskUpdated
    }

    pub(super) fn compress_task(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        cpu_milli: u64,
        gpu_task: TaskId,
    ) -> Outcome {
        let old = match self.running_attempt(node, task, attempt) {
            Ok(c) => c,
            Err(o) => return o,
        };
        if cpu_milli == 0 || cpu_milli >= old {
            return Outcome::Rejected(format!(
                "a compression shrinks {task}: {cpu_milli} millicores is not below its {old}"
            ));
        }
        let freed = old - cpu_milli;
        // The GPU task must still run on this node; else nothing is there to hold them for.
        let gpu_here = self
            .tasks
            .get(&gpu_task)
            .is_some_and(|g| g.status.node == Some(node) && !g.status.state.is_final())
            && self
                .nodes
                .get(&node)
                .is_some_and(|n| n.tasks.contains(&gpu_task));
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        if gpu_here {
            n.compress_reserves.push(CompressReserve {
                gpu_task,
                from_task: task,
                cpu_milli: freed,
            });
        } else {
            n.free.cpu_milli = (n.free.cpu_milli + freed).min(n.capacity.cpu_milli);
        }
        if let Some(t) = self.tasks.get_mut(&task) {
            t.cpu_milli = Some(cpu_milli);
            t.compressed = true;
        }
        Outcome::TaskUpdated
    }

    /// `task` left `node`: the cores held there for it return to `free`.
    pub(super) fn end_reserves_for(&mut self, node: NodeId, task: TaskId) {
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let mut back = 0;
        n.compress_reserves.retain(|r| {
            let mine = r.gpu_task == task;
            if mine {
                back += r.cpu_milli;
            }
            !mine
        });
        n.free.cpu_milli = (n.free.cpu_milli + back).min(n.capacity.cpu_milli);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Assign, Command, CommandEnvelope, Plan};
    use super::*;
    use crate::state::*;
    use hetsched_common::{
        CpuSearchSpec, GpuDevice, GpuRequest, JobSpec, NodeResources, ResourceRequest,
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
        l.apply(Command::TaskFinished {
            node: n,
            task: gpu,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
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
        l.apply(Command::TaskFinished {
            node: n,
            task: cpu,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        assert_eq!(l.free(n), 6000);
        // The GPU task ending returns its 2 and the held 4.
        l.apply(Command::TaskFinished {
            node: n,
            task: gpu,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        assert_eq!(l.free(n), 12_000);
        assert!(l.state.nodes()[&n].compress_reserves.is_empty());
    }

    #[test]
    fn a_compression_for_a_gpu_task_that_is_gone_frees_the_cores() {
        let (mut l, n, gpu, cpu) = Log::with_two_tasks();
        l.apply(Command::TaskFinished {
            node: n,
            task: gpu,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
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
}
