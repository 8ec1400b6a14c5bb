use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl $name {
            /// The raw number (always ≥ 1 for ids handed out by the cluster).
            pub fn get(self) -> u64 {
                self.0
            }
        }
    };
}

id_type!(
    /// A job: one submission of K identical tasks.
    JobId,
    "job-"
);
id_type!(
    /// A task: one unit of execution of a job. Equals `HETSCHED_TASK_ID` in the task's env.
    TaskId,
    "task-"
);
id_type!(
    /// A slave node, handed out by the cluster on first registration and kept by the slave.
    NodeId,
    "node-"
);
id_type!(
    /// A master (Raft peer). Must be ≥ 1: raft-rs reserves 0 for "none".
    MasterId,
    "master-"
);

/// A client-chosen id carried by every mutating command so that a retried request applies
/// at most once (the state machine remembers the ids it has applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientRequestId(pub u64);

impl fmt::Display for ClientRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{:016x}", self.0)
    }
}

/// Which execution of a task an assignment or report belongs to. A task that is lost,
/// preempted or moved is retried with attempt + 1; reports of older attempts are ignored.
pub type Attempt = u32;
