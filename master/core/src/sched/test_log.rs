//! Test harness shared by the scheduler's tests: a cluster state fed one command per log
//! index, with the scheduler's derived caches (index, S3 loads) kept in step as the leader
//! keeps them ([`Scheduler::nodes_changed`] with the nodes each command touched), and the
//! builders the pipeline's stage tests share (nodes, jobs, an index over a state).

use super::index::{IndexConfig, PlacementIndex};
use super::{IndexedScheduler, Scheduler};
use crate::state::{
    command_nodes, touched_nodes, Assign, ClusterState, Command, CommandEnvelope, Outcome, Plan,
};
use hetsched_common::{
    GpuDevice, GpuRequest, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId,
};

/// Applies `command` at `index` (leader time `at_ms`) and tells `sched` what changed.
pub(crate) fn apply_tracked(
    state: &mut ClusterState,
    index: u64,
    at_ms: u64,
    sched: &mut IndexedScheduler,
    command: Command,
) -> Outcome {
    let pre = command_nodes(&command);
    let o = state.apply(
        index,
        CommandEnvelope {
            at_ms,
            request: None,
            command,
        },
    );
    let touched = touched_nodes(pre, &o);
    sched.nodes_changed(state, &touched);
    o
}

/// A state and its last applied index.
pub(crate) struct Log {
    pub s: ClusterState,
    pub i: u64,
}

impl Log {
    /// Applies `c` at the next index, at leader time 0.
    pub fn apply(&mut self, sched: &mut IndexedScheduler, c: Command) -> Outcome {
        self.i += 1;
        apply_tracked(&mut self.s, self.i, 0, sched, c)
    }
}

impl Log {
    /// An empty state at index 0.
    pub fn new() -> Self {
        Self {
            s: ClusterState::new(),
            i: 0,
        }
    }

    /// Applies `c` at the next index with no scheduler following it (for stage tests that
    /// build their own index).
    pub fn apply_bare(&mut self, c: Command) -> Outcome {
        self.i += 1;
        self.s.apply(
            self.i,
            CommandEnvelope {
                at_ms: 0,
                request: None,
                command: c,
            },
        )
    }
}

/// Registers a node (`key` is also its name, as `n<key>`) of `cpus` cores, 64 GiB and `gpus`
/// whole T4 devices, serving `partitions` (none: `default`).
pub(crate) fn node(key: u64, cpus: u64, gpus: usize, partitions: &[&str]) -> Command {
    Command::RegisterNode {
        key,
        node: None,
        name: format!("n{key}"),
        addr: String::new(),
        capacity: NodeResources {
            cpu_milli: cpus * 1000,
            mem_mib: 65_536,
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
        partitions: partitions.iter().map(|p| p.to_string()).collect(),
    }
}

/// A job spec of `count` tasks of user `u`, each asking `cpus` cores, 10 MiB and `gpus`
/// whole GPUs.
pub(crate) fn spec(count: u32, cpus: u64, gpus: u32) -> JobSpec {
    JobSpec {
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
    }
}

/// Submits `spec`.
pub(crate) fn submit(spec: JobSpec) -> Command {
    Command::SubmitJob { spec }
}

/// A placement index over `view`'s nodes taking work, as the scheduler keeps it.
pub(crate) fn index_of(view: &ClusterState) -> PlacementIndex {
    let mut index = PlacementIndex::new(IndexConfig::default());
    index.rebuild(
        view.nodes()
            .values()
            .filter(|n| n.takes_work())
            .map(|n| (n.id, n.free.clone())),
    );
    index
}

/// Assigns `tasks` to `node` (as one applied plan) at the next index; panics unless all
/// are accepted.
pub(crate) fn assign(l: &mut Log, tasks: &[TaskId], node: NodeId) {
    let plan = Plan {
        assignments: tasks.iter().map(|t| Assign::to(*t, node)).collect(),
        ..Default::default()
    };
    match l.apply_bare(Command::ApplyPlan(plan)) {
        Outcome::PlanApplied { rejected: 0, .. } => {}
        o => panic!("{o:?}"),
    }
}

/// A priority configuration with two users above the base priority: `hi` (100) and `lo` (10).
pub(crate) const HI_LO_PRIORITIES: &str = r#"
base_priority = 0
[[users]]
name = "hi"
priority = 100
[[users]]
name = "lo"
priority = 10
"#;

/// The task ids a `SubmitJob` was answered with.
pub(crate) fn submitted_tasks(o: Outcome) -> Vec<TaskId> {
    match o {
        Outcome::Submitted { tasks, .. } => tasks,
        o => panic!("{o:?}"),
    }
}
