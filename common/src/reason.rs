//! Why a task attempt ended (CONTRACT.md, "Task states and reasons"): `null` for a normal
//! exit, else one of these, spelled in JSON exactly as the contract spells them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a task attempt ended other than by a normal exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskReason {
    /// The process exited with a non-zero code.
    Exit,
    /// The process was killed by a signal.
    Signal,
    /// The process was killed for using too much memory.
    Oom,
    /// The attempt ran past the job's per-attempt timeout and was stopped.
    Timeout,
    /// A user cancelled the task or its job.
    Cancelled,
    /// A higher-priority task took its resources.
    Preempted,
    /// Its node or supervisor was lost.
    Lost,
    /// Its node was drained and the drain deadline passed.
    Drained,
    /// The process could not be started.
    CannotStart,
}

impl TaskReason {
    /// Every reason, in a fixed order.
    pub const ALL: [TaskReason; 9] = [
        TaskReason::Exit,
        TaskReason::Signal,
        TaskReason::Oom,
        TaskReason::Timeout,
        TaskReason::Cancelled,
        TaskReason::Preempted,
        TaskReason::Lost,
        TaskReason::Drained,
        TaskReason::CannotStart,
    ];

    /// The contract's spelling (as in JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskReason::Exit => "exit",
            TaskReason::Signal => "signal",
            TaskReason::Oom => "oom",
            TaskReason::Timeout => "timeout",
            TaskReason::Cancelled => "cancelled",
            TaskReason::Preempted => "preempted",
            TaskReason::Lost => "lost",
            TaskReason::Drained => "drained",
            TaskReason::CannotStart => "cannot-start",
        }
    }

    /// The reason for an exit code per the slave's convention (−N: killed by signal N);
    /// `None` for a normal exit (0).
    pub fn of_exit_code(code: i32) -> Option<Self> {
        match code {
            0 => None,
            c if c < 0 => Some(TaskReason::Signal),
            _ => Some(TaskReason::Exit),
        }
    }
}

impl fmt::Display for TaskReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_spellings_follow_the_contract() {
        for r in TaskReason::ALL {
            let json = serde_json::to_string(&r).expect("serialise");
            assert_eq!(json, format!("\"{}\"", r.as_str()));
        }
        assert_eq!(TaskReason::CannotStart.as_str(), "cannot-start");
    }
}
