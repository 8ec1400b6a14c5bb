//! Delivery of what the slave tells the masters about its engines (S0.5 `RecordProfile`)
//! and its program tasks' calls (`RecordCalls`), apart from the link's task reports: each
//! message is sent to the leader through a [`LeaderClient`] (following `NotLeader`
//! redirects), retried with backoff until acknowledged, in order. It waits for the node id
//! the link's registration stores.

use crate::store::Store;
use hetsched_common::backoff::Backoff;
use hetsched_common::leader::{LeaderClient, LeaderError, LeaderOptions};
use hetsched_common::program::{CallSummary, EngineDecl, SelectionTable};
use hetsched_common::protocol::{ErrorKind, Message, SlaveRequest, SlaveResponse};
use hetsched_common::{Attempt, TaskId};
use std::time::Duration;
use tokio::sync::mpsc;

/// Something to tell the masters.
#[derive(Clone, Debug)]
pub enum Announcement {
    /// Engines and selection table.
    Profile {
        /// Engines.
        engines: Vec<EngineDecl>,
        /// Table.
        table: SelectionTable,
    },
    /// A program task's calls in brief.
    Calls {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Summary.
        summary: CallSummary,
    },
}

/// Delivers announcements until every sender is gone.
pub async fn run(
    masters: Vec<String>,
    store: Store,
    call_timeout: Duration,
    mut inbox: mpsc::UnboundedReceiver<Announcement>,
) {
    let mut client = LeaderClient::new(masters)
        .with_options(LeaderOptions {
            connect_timeout: call_timeout,
            call_timeout,
            ..LeaderOptions::default()
        })
        .with_leader_hint(store.leader_hint().ok().flatten());
    while let Some(a) = inbox.recv().await {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            let node = match store.node() {
                Ok(Some(n)) => n,
                _ => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let req = match a.clone() {
                Announcement::Profile { engines, table } => SlaveRequest::RecordProfile {
                    node,
                    engines,
                    table,
                },
                Announcement::Calls {
                    task,
                    attempt,
                    summary,
                } => SlaveRequest::RecordCalls {
                    node,
                    task,
                    attempt,
                    summary,
                },
            };
            match client.attempt(Message::Slave(req)).await {
                Ok(Message::SlaveReply(SlaveResponse::Ack)) => break,
                Err(LeaderError::Refused {
                    kind: ErrorKind::Invalid,
                    message,
                    ..
                }) => {
                    tracing::warn!(announcement = ?a, error = %message, "master refused an announcement; dropped");
                    break;
                }
                Err(e @ LeaderError::Unreachable { .. }) => {
                    tracing::debug!(error = %e, "announcement not delivered")
                }
                Err(e) => tracing::debug!(error = %e, "announcement deferred"),
                Ok(other) => {
                    tracing::debug!(answer = ?other, "unexpected answer to an announcement")
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}
