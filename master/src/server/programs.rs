//! Client and slave requests about API programs (S0): a task's call records, fetched from
//! the slave that ran it, and the selection tables and task–engine relation of `profiles`.

use hetsched_common::protocol::{
    ClientResponse, ErrorKind, ErrorReply, Message, NodeProfileInfo, ProfilesInfo, RelationInfo,
    SlaveCommand, SlaveCommandReply,
};
use hetsched_common::wire::Connection;
use hetsched_common::TaskId;
use hetsched_master_core::state::ClusterState;
use std::time::Duration;

/// Deadline of one call-records fetch from a slave.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a task's current (or last) attempt ran: (node, its address, attempt).
pub fn locate(
    s: &ClusterState,
    task: TaskId,
) -> Result<(hetsched_common::NodeId, String, u32), ErrorReply> {
    let t = s.tasks().get(&task).ok_or_else(|| {
        let why = if s.task_was_collected(task) {
            format!("{task} was collected (finished jobs are kept for --job-gc-after)")
        } else {
            format!("no such task: {task}")
        };
        ErrorReply::new(ErrorKind::NotFound, why)
    })?;
    let node = t.status.node.ok_or_else(|| {
        ErrorReply::new(
            ErrorKind::Invalid,
            format!("{task} has not been placed on a node yet"),
        )
    })?;
    let addr = s
        .nodes()
        .get(&node)
        .map(|n| n.addr.clone())
        .ok_or_else(|| ErrorReply::new(ErrorKind::Internal, format!("unknown {node}")))?;
    Ok((node, addr, t.status.attempt))
}

/// Asks the slave at `addr` for the call records of `task`'s `attempt`.
pub async fn fetch_calls(
    task: TaskId,
    node: hetsched_common::NodeId,
    addr: &str,
    attempt: u32,
) -> Result<ClientResponse, ErrorReply> {
    let unavailable = |e: String| {
        ErrorReply::new(
            ErrorKind::Unavailable,
            format!("cannot fetch the calls of {task} from {node} at {addr}: {e}"),
        )
    };
    let conn = Connection::connect(addr, FETCH_TIMEOUT)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    match conn
        .call(
            Message::ToSlave(SlaveCommand::Calls { task, attempt }),
            FETCH_TIMEOUT,
        )
        .await
        .map_err(|e| unavailable(e.to_string()))?
    {
        Message::ToSlaveReply(SlaveCommandReply::Calls(calls)) => Ok(ClientResponse::Calls {
            task,
            attempt,
            node,
            calls,
        }),
        Message::Error(e) => Err(e),
        other => Err(unavailable(format!("unexpected answer {other:?}"))),
    }
}

/// The `profiles` answer from the applied state.
pub fn profiles_info(s: &ClusterState) -> ProfilesInfo {
    ProfilesInfo {
        nodes: s
            .profiles()
            .iter()
            .map(|(id, p)| NodeProfileInfo {
                node: *id,
                name: s
                    .nodes()
                    .get(id)
                    .map(|n| n.name.clone())
                    .unwrap_or_default(),
                engines: p.engines.clone(),
                table: p.table.clone(),
            })
            .collect(),
        relations: s
            .relations()
            .iter()
            .map(|(k, r)| RelationInfo {
                kind: k.to_string(),
                parts: k.clone(),
                engines: r.clone(),
            })
            .collect(),
    }
}
