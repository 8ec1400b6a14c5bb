//! Why a task attempt ended: the `"reason"` vocabulary of docs/CONTRACT.md ("Task states and
//! reasons"), shared by the slave (which observes exits), the master (which records them) and
//! the CLI (which shows them). A normal exit (code 0) has no reason: JSON `null`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an attempt ended other than by a normal exit.
///
/// Serialised in kebab case (`"cannot-start"`); new reasons are added at the end so that
/// replicated logs and older peers keep decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskReason {
    /// The process exited with a non-zero code.
    Exit,
    /// The process was killed by a signal (not by the slave for one of the reasons below).
    Signal,
    /// The kernel's OOM killer ended it: it went over its memory limit.
    Oom,
    /// It ran past its time limit.
    Timeout,
    /// A user cancelled it.
    Cancelled,
    /// A higher-priority task took its resources; a new attempt follows.
    Preempted,
    /// Its node or its supervisor was lost; a new attempt follows.
    Lost,
    /// Its node was drained; a new attempt follows.
    Drained,
    /// Its command could not be started (no such program, not executable, no log files).
    CannotStart,
    /// A job it had to follow failed or was cancelled, so it never ran (`reason_detail`
    /// names that job and its state).
    Dependency,
    /// Its container image could not be read, verified or unpacked (`reason_detail` names
    /// the image and the step).
    Image,
}

impl TaskReason {
    /// The JSON / CLI name (`"oom"`, `"cannot-start"`).
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
            TaskReason::Dependency => "dependency",
            TaskReason::Image => "image",
        }
    }

    /// The reason a bare exit code implies (for reports that carry no reason): `None` for 0,
    /// `signal` for a negative code (killed by signal −code), `exit` otherwise.
    pub fn of_exit_code(exit_code: i32) -> Option<TaskReason> {
        match exit_code {
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
    fn json_names_follow_the_contract() {
        let all = [
            (TaskReason::Exit, "exit"),
            (TaskReason::Signal, "signal"),
            (TaskReason::Oom, "oom"),
            (TaskReason::Timeout, "timeout"),
            (TaskReason::Cancelled, "cancelled"),
            (TaskReason::Preempted, "preempted"),
            (TaskReason::Lost, "lost"),
            (TaskReason::Drained, "drained"),
            (TaskReason::CannotStart, "cannot-start"),
            (TaskReason::Dependency, "dependency"),
            (TaskReason::Image, "image"),
        ];
        for (r, name) in all {
            assert_eq!(
                serde_json::to_string(&r).expect("json"),
                format!("\"{name}\"")
            );
            assert_eq!(r.as_str(), name);
        }
        assert_eq!(
            serde_json::to_string(&None::<TaskReason>).expect("json"),
            "null"
        );
    }

    #[test]
    fn reason_of_exit_code() {
        assert_eq!(TaskReason::of_exit_code(0), None);
        assert_eq!(TaskReason::of_exit_code(3), Some(TaskReason::Exit));
        assert_eq!(TaskReason::of_exit_code(-9), Some(TaskReason::Signal));
    }
}
