//! Shared vocabulary of hetsched: ids, resources (GPUs as devices), job and task specs,
//! the task state machine, node info, the wire protocol, and telemetry setup.
//!
//! Everything here is plain data plus pure functions, so the master's replicated state
//! machine, the slave and the CLI agree on one definition of each thing. The exceptions need
//! sockets and sit behind the `net` feature (on by default): the async half of [`wire`] and
//! [`leader`], the client that follows the leading master.

pub mod backoff;
#[cfg(feature = "net")]
pub mod certs;
pub mod dependency;
mod error;
pub mod flow;
pub mod flowfile;
mod ids;
pub mod image;
pub mod jobfile;
#[cfg(feature = "net")]
pub mod leader;
pub mod ports;
pub mod priority;
pub mod procstat;
pub mod program;
pub mod protocol;
mod reason;
mod resources;
pub mod rng;
pub mod sbatch;
mod spec;
mod task_state;
pub mod telemetry;
pub mod tokens;
pub mod wire;

pub use dependency::{AfterMode, DependencyKind};
pub use error::{Error, Result};
pub use flow::{FlowSpec, FlowStep};
pub use ids::{Attempt, ClientRequestId, JobId, MasterId, NodeId, TaskId};
pub use reason::TaskReason;
pub use resources::{
    allocate_gpus, EngineKind, GpuAlloc, GpuDevice, GpuRequest, NodeResources, ResourceRequest,
    GPU_MILLI_PER_DEVICE, MAX_CPUS_PER_TASK, MAX_CPU_MILLI_PER_TASK, MAX_ENGINES_PER_TASK,
    MAX_GPUS_PER_TASK, MAX_MEM_MIB_PER_TASK,
};
pub use spec::{parse_host_port, CpuSearchSpec, JobSpec, TaskClass, MAX_BACKOFF_MS, MAX_RETRIES};
pub use task_state::{TaskState, TaskStatus, TransitionError};
