//! What the replicated state and the scheduler both need, kept below `state` so that the
//! log's meaning never depends on the scheduler: the S1 priority a task gets from its user's
//! quota at admission ([`quota`]) and the S3.1 queue a task waits in ([`queue_kind`]).

pub mod queue_kind;
pub mod quota;

pub use queue_kind::{QueueKind, MULTI_GPU_THRESHOLD};
