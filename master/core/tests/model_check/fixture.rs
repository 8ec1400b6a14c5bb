//! Hand-written logs for the regression and broken-variant tests: envelope builders and a
//! small cluster with a task of every kind of holding (running, queued on its slave,
//! preempted and stopping, compressed with its cores held for a GPU task, finished).

use hetsched_common::priority::{Principal, PriorityConfig, PriorityEntry, Quota};
use hetsched_common::{
    GpuDevice, GpuRequest, JobId, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId,
};
use hetsched_master_core::state::{Assign, Command, CommandEnvelope, Plan, Preemption, TaskRef};

/// Entries of a log, stamped 1 s apart.
#[derive(Default)]
pub struct LogBuilder {
    /// The entries.
    pub log: Vec<CommandEnvelope>,
}

impl LogBuilder {
    /// Appends a command.
    pub fn push(&mut self, command: Command) -> &mut Self {
        let at_ms = 1_000_000 + 1000 * self.log.len() as u64;
        self.log.push(CommandEnvelope {
            at_ms,
            request: None,
            command,
        });
        self
    }

    /// Registers node `key` (ids follow registration order).
    pub fn node(&mut self, key: u64, cpus: u64, gpus: usize) -> &mut Self {
        self.push(Command::RegisterNode {
            key,
            node: None,
            name: format!("n{key}"),
            addr: format!("127.0.0.1:{key}"),
            capacity: NodeResources {
                cpu_milli: cpus * 1000,
                mem_mib: 8192,
                gpus: (0..gpus)
                    .map(|_| GpuDevice {
                        model: "A10".into(),
                        free_milli: 1000,
                        emulated: true,
                    })
                    .collect(),
                engines: Default::default(),
            },
            labels: Default::default(),
            partitions: Vec::new(),
        })
    }

    /// Submits `count` tasks of `cpu_milli` (and one GPU each when `gpu`) for `user`.
    pub fn job(&mut self, user: &str, count: u32, cpu_milli: u64, gpu: bool) -> &mut Self {
        self.push(Command::SubmitJob {
            spec: JobSpec {
                user: user.into(),
                resources: ResourceRequest {
                    cpu_milli,
                    mem_mib: 256,
                    gpu: if gpu {
                        GpuRequest::whole(1)
                    } else {
                        GpuRequest::none()
                    },
                    engines: Default::default(),
                },
                count,
                command: vec!["true".into()],
                ..Default::default()
            },
        })
    }

    /// Places tasks: `(task, node, queued)`.
    pub fn place(&mut self, assignments: &[(u64, u64, bool)]) -> &mut Self {
        self.push(Command::ApplyPlan(Plan {
            assignments: assignments
                .iter()
                .map(|(t, n, q)| Assign {
                    queued: *q,
                    ..Assign::to(TaskId(*t), NodeId(*n))
                })
                .collect(),
            queue_depth: 4,
            ..Default::default()
        }))
    }

    /// Preempts `victims` (task, attempt) on `node` for `preemptor`.
    pub fn preempt(&mut self, preemptor: u64, node: u64, victims: &[(u64, u32)]) -> &mut Self {
        self.push(Command::ApplyPlan(Plan {
            preempt: vec![Preemption {
                preemptor: TaskId(preemptor),
                node: NodeId(node),
                victims: victims
                    .iter()
                    .map(|(t, a)| TaskRef {
                        task: TaskId(*t),
                        node: NodeId(node),
                        attempt: *a,
                    })
                    .collect(),
                take_back: false,
            }],
            ..Default::default()
        }))
    }

    /// The slave of `node` reports `task`'s `attempt` started.
    pub fn started(&mut self, node: u64, task: u64, attempt: u32) -> &mut Self {
        self.push(Command::TaskStarted {
            node: NodeId(node),
            task: TaskId(task),
            attempt,
        })
    }

    /// The slave of `node` reports `task`'s `attempt` ended with `exit_code`.
    pub fn finished(&mut self, node: u64, task: u64, attempt: u32, exit_code: i32) -> &mut Self {
        self.push(Command::TaskFinished {
            node: NodeId(node),
            task: TaskId(task),
            attempt,
            exit_code,
            reason: None,
        })
    }

    /// User `u1` gets priority 5 with a quota of `cpus`; everyone else priority 0.
    pub fn priorities(&mut self, cpus: u64) -> &mut Self {
        self.push(Command::SetPriorityConfig {
            config: PriorityConfig {
                entries: vec![PriorityEntry {
                    who: Principal::User("u1".into()),
                    partition: "default".into(),
                    priority: 5,
                    quota: Quota {
                        cpu_milli: Some(cpus * 1000),
                        ..Default::default()
                    },
                }],
                ..Default::default()
            },
        })
    }
}

/// Node A (16 CPUs, 1 GPU) and node B (4 CPUs). On A: GPU task 2 runs, CPU task 1 was
/// compressed for it (2 cores held) and then preempted for u1's task 5 (still stopping),
/// task 6 finished. On B: task 3 runs, task 4 waits in B's queue. Task 5 (u1, priority 5,
/// holding u1's quota) is pending.
pub fn cluster() -> Vec<CommandEnvelope> {
    let mut b = LogBuilder::default();
    b.node(1, 16, 1).node(2, 4, 0).priorities(16);
    b.job("u0", 1, 4000, false) // job 1: task 1
        .job("u0", 1, 2000, true) // job 2: task 2
        .job("u0", 2, 3000, false); // job 3: tasks 3, 4
    b.place(&[(1, 1, false), (2, 1, false), (3, 2, false), (4, 2, true)]);
    b.started(1, 1, 1).started(1, 2, 1).started(2, 3, 1);
    b.push(Command::CompressTask {
        node: NodeId(1),
        task: TaskId(1),
        attempt: 1,
        cpu_milli: 2000,
        gpu_task: TaskId(2),
    });
    b.job("u1", 1, 12_000, false); // job 4: task 5
    b.preempt(5, 1, &[(1, 1)]);
    b.job("u0", 1, 1000, false); // job 5: task 6
    b.place(&[(6, 1, false)])
        .started(1, 6, 1)
        .finished(1, 6, 1, 0);
    b.log
}

/// Ids in [`cluster`].
pub const NODE_A: NodeId = NodeId(1);
/// Node B.
pub const NODE_B: NodeId = NodeId(2);
/// u1's pending job.
pub const JOB_U1: JobId = JobId(4);
/// The two-task job on B.
pub const JOB_B: JobId = JobId(3);
/// The finished job.
pub const JOB_DONE: JobId = JobId(5);
