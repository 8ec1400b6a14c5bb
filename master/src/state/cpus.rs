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

    /// The running attempt `(node, task, attempt)` names, or why the command is stale.
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
        self.cpu_history.insert(class, cpu_milli);
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
