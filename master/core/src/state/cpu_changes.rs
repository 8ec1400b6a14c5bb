//! Live CPU changes of running attempts (S3): the CPU-count search of GPU tasks (S3.2) and
//! the compression of CPU tasks that contend with them (S3.6). Pure like the rest of
//! `apply`.
//!
//! A change moves the difference between the node's `free` CPUs and the task's allocation
//! (`Task::cpu_milli`), so `free` stays capacity minus what the tasks hold. Cores freed by a
//! compression do not go back to `free`: they are held in `Node::compress_reserves` for the
//! GPU task that suffered, and return when that task's attempt ends (no new CPU task can be
//! placed on them meanwhile).

use super::command::{Command, Outcome, TaskRef};
use super::job_book::JobBook;
use super::model::CompressReserve;
use super::node_book::NodeBook;
use super::task_book::TaskBook;
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};

/// The live CPU rules. Spans the node book (the CPUs a change moves in or out of `free`, the
/// cores a compression holds) and the task book (the attempt's allocation), reading the job
/// book for what an attempt holds when no change reached it yet.
pub(super) struct CpuRules<'a> {
    /// Free CPUs and compression reserves.
    pub nodes: &'a mut NodeBook,
    /// Attempts' allocations.
    pub tasks: &'a mut TaskBook,
    /// Requests.
    pub jobs: &'a JobBook,
}

impl CpuRules<'_> {
    /// Applies `SetTaskCpus` or `CompressTask`.
    pub(super) fn apply(&mut self, command: Command) -> Outcome {
        match command {
            Command::SetTaskCpus {
                node,
                task,
                attempt,
                cpu_milli,
            } => self.set_cpus(node, task, attempt, cpu_milli),
            Command::CompressTask {
                node,
                task,
                attempt,
                cpu_milli,
                gpu_task,
            } => self.compress(node, task, attempt, cpu_milli, gpu_task),
            _ => Outcome::Rejected("not a CPU change".into()),
        }
    }

    /// The CPU allocation of the attempt `(node, task, attempt)` names, which must be
    /// assigned or running and hold its resources there; or why the command is stale.
    fn running_attempt(
        &self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
    ) -> Result<u64, Outcome> {
        let t = self.tasks.current(node, task, attempt)?;
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
        t.cpu_milli
            .or_else(|| self.jobs.resources(t.job).map(|r| r.cpu_milli))
            .ok_or_else(|| Outcome::Rejected(format!("{task} has no job")))
    }

    /// S3.2: a search step sets the attempt's CPUs, taking more from the node's free CPUs
    /// (refused when they are not there) or giving some back.
    pub(super) fn set_cpus(
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

    /// S3.6: a CPU task is compressed for `gpu_task` on the same node: the cores it frees
    /// are held there for the GPU task (or return to `free` when it is gone).
    pub(super) fn compress(
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
}

#[cfg(test)]
#[path = "cpu_changes_tests.rs"]
mod tests;
