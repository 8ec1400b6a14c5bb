//! The history of a chaos run: every client operation (invoked / acknowledged / failed), every
//! observed task transition, leadership observation and injected fault,
//! timestamped in ms since the run started. Written as JSON lines (`history.jsonl` in the run
//! directory), one [`Event`] a line, tagged by `"kind"`.

use serde::{Deserialize, Serialize};

/// One entry of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Event {
    /// A client operation was sent.
    Invoke {
        /// ms since the run started.
        t_ms: u64,
        /// Operation number (unique within the run).
        op: u64,
        /// What it was (`submit job-name count=N`).
        what: String,
    },
    /// The cluster acknowledged the operation: the job and its tasks exist.
    Ack {
        /// ms since the run started.
        t_ms: u64,
        /// Operation number.
        op: u64,
        /// The job created.
        job: u64,
        /// Its tasks.
        tasks: Vec<u64>,
        /// An API program job: its tasks run in the slave and leave no side effect.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        program: bool,
    },
    /// The operation failed or its outcome is unknown (timeout).
    Fail {
        /// ms since the run started.
        t_ms: u64,
        /// Operation number.
        op: u64,
        /// The error.
        error: String,
    },
    /// A task was observed in a state (a listing answered by the leader).
    Task {
        /// ms since the run started.
        t_ms: u64,
        /// Task id.
        task: u64,
        /// Its job.
        job: u64,
        /// State, as in JSON listings (`running`, `succeeded`, ...).
        state: String,
        /// Attempt.
        attempt: u32,
    },
    /// A master said it is the leader in `term`.
    Leader {
        /// ms since the run started.
        t_ms: u64,
        /// The master.
        master: u64,
        /// Its term.
        term: u64,
    },
    /// A node's use and capacity, as the leader reported it. Only in histories of earlier
    /// builds: a sample of `capacity - free` can never exceed the capacity, so `over-commit`
    /// now replays the masters' logs instead (see [`crate::replay`]).
    Usage {
        /// ms since the run started.
        t_ms: u64,
        /// Node id.
        node: u64,
        /// Running (and assigned) tasks' CPU, milli-cores.
        cpu_milli_used: u64,
        /// The node's CPU capacity, milli-cores.
        cpu_milli_capacity: u64,
    },
    /// A fault began or was healed.
    Fault {
        /// ms since the run started.
        t_ms: u64,
        /// What (`kill-leader master-2`, `heal`).
        fault: String,
    },
}

impl Event {
    /// When it happened, ms since the run started.
    pub fn t_ms(&self) -> u64 {
        match self {
            Event::Invoke { t_ms, .. }
            | Event::Ack { t_ms, .. }
            | Event::Fail { t_ms, .. }
            | Event::Task { t_ms, .. }
            | Event::Leader { t_ms, .. }
            | Event::Usage { t_ms, .. }
            | Event::Fault { t_ms, .. } => *t_ms,
        }
    }
}

/// One task in the final state (after heal and settle).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinalTask {
    /// Task id.
    pub task: u64,
    /// Job.
    pub job: u64,
    /// Final state.
    pub state: String,
    /// Final attempt.
    pub attempt: u32,
    /// How many times it was preempted (S1).
    #[serde(default)]
    pub preemptions: u32,
}

/// What one master said at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MasterView {
    /// Master id.
    pub master: u64,
    /// Its applied index.
    pub applied_index: u64,
    /// Hash of its state at that index.
    pub state_hash: String,
}

/// The final state the checker compares the history with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalState {
    /// Every task the leader lists.
    pub tasks: Vec<FinalTask>,
    /// Each master's applied index and state hash after heal.
    pub masters: Vec<MasterView>,
    /// The side-effect file: `(task, attempt)` per line, in file order.
    pub side_effects: Vec<(u64, u32)>,
    /// The settle period, for messages.
    pub settle_s: u64,
    /// Each master's exported log, replayed (`over-commit` at every index).
    #[serde(default)]
    pub replays: Vec<crate::replay::Replayed>,
}

/// A malformed line in a history or side-effect file.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a history file (JSON lines; blank lines are skipped).
pub fn parse_history(text: &str) -> Result<Vec<Event>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| ParseError {
                line: i + 1,
                message: e.to_string(),
            })
        })
        .collect()
}

/// Parses the side-effect file: one `TASK ATTEMPT` a line. A torn last line (a task killed
/// mid-write) is skipped; any other malformed line is an error.
pub fn parse_side_effects(text: &str) -> Result<Vec<(u64, u32)>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let mut parts = l.split_whitespace();
        let parsed = match (parts.next(), parts.next(), parts.next()) {
            (Some(t), Some(a), None) => t.parse::<u64>().ok().zip(a.parse::<u32>().ok()),
            _ => None,
        };
        match parsed {
            Some(p) => out.push(p),
            None if i + 1 == lines.len() && !text.ends_with('\n') => {}
            None => {
                return Err(ParseError {
                    line: i + 1,
                    message: format!("expected `TASK ATTEMPT`, found {l:?}"),
                })
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lines_round_trip() {
        let ev = vec![
            Event::Invoke {
                t_ms: 1,
                op: 1,
                what: "submit".into(),
            },
            Event::Ack {
                t_ms: 2,
                op: 1,
                job: 1,
                tasks: vec![1, 2],
                program: false,
            },
            Event::Leader {
                t_ms: 3,
                master: 1,
                term: 2,
            },
        ];
        let text: String = ev
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        assert!(text.contains("\"kind\":\"invoke\""));
        assert_eq!(parse_history(&text).unwrap(), ev);
    }

    #[test]
    fn bad_history_line_names_its_line() {
        let err = parse_history("\n{\"kind\":\"nope\"}\n").unwrap_err();
        assert_eq!(err.line, 2);
    }

    #[test]
    fn side_effects_parse_and_torn_tail_is_skipped() {
        assert_eq!(
            parse_side_effects("1 1\n2 1\n3").unwrap(),
            vec![(1, 1), (2, 1)]
        );
        assert!(parse_side_effects("1 x\n2 1\n").is_err());
    }
}
