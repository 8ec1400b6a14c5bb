//! `hetsched logs`: a master finds the node that ran a task attempt (from the replicated
//! state) and fetches part of the attempt's output file from that node's slave. Any master
//! answers (a read of where an attempt ran needs no linearizability), and the file is read
//! also after the task ended, for as long as the slave keeps it.

use super::reply::not_found;
use super::MasterShared;
use hetsched_common::protocol::{
    ClientResponse, ErrorKind, ErrorReply, LogChunk, Message, SlaveCommand, SlaveCommandReply,
};
use hetsched_common::wire::Connection;
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use hetsched_master_core::state::ClusterState;
use std::time::Duration;

/// Largest chunk one answer carries (well under the frame cap).
pub const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// What a client asks for.
#[derive(Clone, Copy, Debug)]
pub struct LogQuery {
    /// Task.
    pub task: TaskId,
    /// Attempt (default: the latest).
    pub attempt: Option<Attempt>,
    /// Standard error instead of standard output.
    pub stderr: bool,
    /// Offset to read from.
    pub offset: u64,
    /// Most bytes (0: the maximum).
    pub max_bytes: u64,
}

/// Where the output a query asks for is.
#[derive(Debug, PartialEq)]
enum Located {
    /// The task waits for its first placement: no output yet (`logs --follow` waits).
    NotYet,
    /// On `node` at `addr`.
    At {
        attempt: Attempt,
        node: NodeId,
        addr: String,
        /// Final, or waiting in the queue for another attempt: this attempt writes no more.
        done: bool,
        /// The latest attempt, placed and not started: its files may not exist yet.
        placed_not_started: bool,
    },
}

/// Finds the node that ran (or runs) the attempt `q` asks for, from the applied state.
fn locate(s: &ClusterState, q: &LogQuery) -> Result<Located, ErrorReply> {
    let t = s
        .tasks()
        .get(&q.task)
        .ok_or_else(|| not_found(format!("no such task: {}", q.task)))?;
    let latest = t.status.attempt;
    let attempt = q.attempt.unwrap_or(latest);
    if latest == 0 && !t.status.state.is_final() && q.attempt.is_none() {
        return Ok(Located::NotYet);
    }
    if attempt == 0 || latest == 0 {
        return Err(not_found(format!("{} never ran: no output", q.task)));
    }
    if attempt > latest {
        return Err(not_found(format!(
            "{} has no attempt {attempt} (latest: {latest})",
            q.task
        )));
    }
    let node = t
        .attempt_nodes
        .get(&attempt)
        .copied()
        .or(t.status.node.filter(|_| attempt == latest))
        .ok_or_else(|| {
            not_found(format!(
                "the node of {} attempt {attempt} is not known",
                q.task
            ))
        })?;
    let addr = s
        .nodes()
        .get(&node)
        .map(|n| n.addr.clone())
        .ok_or_else(|| not_found(format!("{node} of {} is gone", q.task)))?;
    Ok(Located::At {
        attempt,
        node,
        addr,
        done: t.status.state.is_final() || attempt < latest || t.status.node.is_none(),
        placed_not_started: attempt == latest && t.status.state == TaskState::Assigned,
    })
}

/// Answers a log query.
pub async fn read(shared: &MasterShared, q: LogQuery) -> Result<ClientResponse, ErrorReply> {
    let located = locate(&shared.read_state(), &q)?;
    let Located::At {
        attempt,
        node,
        addr,
        done,
        placed_not_started,
    } = located
    else {
        return Ok(ClientResponse::Logs(empty_chunk(q.task, 0, None)));
    };
    let cmd = SlaveCommand::ReadLog {
        task: q.task,
        attempt,
        stderr: q.stderr,
        offset: q.offset,
        max_bytes: match q.max_bytes {
            0 => MAX_LOG_CHUNK,
            n => n.min(MAX_LOG_CHUNK),
        },
    };
    let unreachable = |e: String| {
        ErrorReply::new(
            ErrorKind::Unavailable,
            format!(
                "cannot reach {node} at {addr} for the output of {}: {e}",
                q.task
            ),
        )
    };
    let conn = Connection::connect(&addr, Duration::from_secs(2))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    match conn
        .call(Message::ToSlave(cmd), Duration::from_secs(5))
        .await
        .map_err(|e| unreachable(e.to_string()))?
    {
        Message::ToSlaveReply(SlaveCommandReply::Log { offset, data, size }) => {
            Ok(ClientResponse::Logs(LogChunk {
                task: q.task,
                attempt,
                node: Some(node),
                offset,
                data,
                size,
                task_final: done,
            }))
        }
        // The slave creates the files when the process starts.
        Message::Error(e) if e.kind == ErrorKind::NotFound && placed_not_started => Ok(
            ClientResponse::Logs(empty_chunk(q.task, attempt, Some(node))),
        ),
        Message::Error(e) => Err(e),
        other => Err(ErrorReply::new(
            ErrorKind::Internal,
            format!("unexpected answer from {node}: {other:?}"),
        )),
    }
}

/// No output yet.
fn empty_chunk(task: TaskId, attempt: Attempt, node: Option<NodeId>) -> LogChunk {
    LogChunk {
        task,
        attempt,
        node,
        offset: 0,
        data: Default::default(),
        size: 0,
        task_final: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::test_state::TestState;
    use hetsched_master_core::state::{Assign, Command, Plan};

    fn query(task: TaskId, attempt: Option<Attempt>) -> LogQuery {
        LogQuery {
            task,
            attempt,
            stderr: false,
            offset: 0,
            max_bytes: 0,
        }
    }

    #[test]
    fn a_query_finds_the_node_of_its_attempt() {
        let mut t = TestState::new();
        let n = t.node(1, "n1", 2);
        let (_, tasks) = t.job("u", 1);
        let task = tasks[0];
        assert_eq!(locate(&t.state, &query(task, None)), Ok(Located::NotYet));
        let e = locate(&t.state, &query(task, Some(1))).expect_err("never ran");
        assert_eq!(e.kind, ErrorKind::NotFound);
        t.apply(Command::ApplyPlan(Plan {
            assignments: vec![Assign::to(task, n)],
            ..Default::default()
        }));
        let Ok(Located::At {
            attempt,
            node,
            done,
            placed_not_started,
            ..
        }) = locate(&t.state, &query(task, None))
        else {
            panic!("placed: found");
        };
        assert_eq!(
            (attempt, node, done, placed_not_started),
            (1, n, false, true)
        );
        let e = locate(&t.state, &query(task, Some(2))).expect_err("no attempt 2");
        assert_eq!(e.message, format!("{task} has no attempt 2 (latest: 1)"));
        let e = locate(&t.state, &query(TaskId(99), None)).expect_err("no task");
        assert_eq!(e.kind, ErrorKind::NotFound);
    }
}
