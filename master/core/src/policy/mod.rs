//! What the replicated state and the scheduler both need, kept below `state` so that the
//! log's meaning never depends on the scheduler: the S1 priority a task gets from its user's
//! quota at admission ([`quota`]) and the S3.1 queue a task waits in ([`queue_kind`]). Beside
//! them, outside the log: whether any registered node could ever hold a request
//! ([`placeable`]), the leader's advisory check at submit.

pub mod placeable;
pub mod queue_kind;
pub mod quota;

pub use placeable::{unplaceable, Unplaceable};
pub use queue_kind::{QueueKind, MULTI_GPU_THRESHOLD};
