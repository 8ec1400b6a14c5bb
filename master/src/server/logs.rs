//! `hetsched logs`: a master finds the node that ran a task attempt (from the replicated
//! state) and fetches part of the attempt's output file from that node's slave. Any master
//! answers (a read of where an attempt ran needs no linearizability), and the file is read
//! also after the task ended, for as long as the slave keeps it.

use super::MasterShared;
use hetsched_common::protocol::{
    ClientResponse, ErrorKind, ErrorReply, LogChunk, Message, SlaveCommand, SlaveCommandReply,
};
use hetsched_common::wire::Connection;
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
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

/// Answers a log query.
pub async fn read(shared: &MasterShared, q: LogQuery) -> Result<ClientResponse, ErrorReply> {
    let not_found = |m: String| ErrorReply::new(ErrorKind::NotFound, m);
    let (attempt, node, addr, task_final, placed_not_started) = {
        let s = shared.read_state();
        let t = s
            .tasks()
            .get(&q.task)
            .ok_or_else(|| not_found(format!("no such task: {}", q.task)))?;
        let latest = t.status.attempt;
        let attempt = q.attempt.unwrap_or(latest);
        if latest == 0 && !t.status.state.is_final() && q.attempt.is_none() {
            // Waiting for its first placement: no output yet (`logs --follow` waits).
            return Ok(ClientResponse::Logs(empty_chunk(q.task, 0, None)));
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
            .or(if attempt == latest {
                t.status.node
            } else {
                None
            })
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
        // Final, or waiting in the queue for another attempt: this attempt writes no more.
        let done = t.status.state.is_final() || attempt < latest || t.status.node.is_none();
        let placed_not_started = attempt == latest && t.status.state == TaskState::Assigned;
        (attempt, node, addr, done, placed_not_started)
    };
    let max_bytes = match q.max_bytes {
        0 => MAX_LOG_CHUNK,
        n => n.min(MAX_LOG_CHUNK),
    };
    let cmd = SlaveCommand::ReadLog {
        task: q.task,
        attempt,
        stderr: q.stderr,
        offset: q.offset,
        max_bytes,
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
                task_final,
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
