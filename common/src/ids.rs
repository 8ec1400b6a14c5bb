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

        /// A bare number (`5`) or the display form (`job-5`), as docs/CONTRACT.md allows.
        impl std::str::FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> crate::Result<Self> {
                let t = s.trim();
                let digits = t.strip_prefix($prefix).unwrap_or(t);
                digits.parse::<u64>().map($name).map_err(|_| crate::Error::Invalid {
                    what: "id",
                    why: format!(
                        "{s:?} is not an id (expected a number or {}N)",
                        $prefix
                    ),
                })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_bare_and_prefixed() {
        assert_eq!("5".parse::<JobId>().ok(), Some(JobId(5)));
        assert_eq!("job-5".parse::<JobId>().ok(), Some(JobId(5)));
        assert_eq!("task-17".parse::<TaskId>().ok(), Some(TaskId(17)));
        assert_eq!("node-3".parse::<NodeId>().ok(), Some(NodeId(3)));
        assert!("task-17".parse::<JobId>().is_err());
        assert!("lots".parse::<JobId>().is_err());
        assert!("-1".parse::<JobId>().is_err());
    }
}
