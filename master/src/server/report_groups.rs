//! Group commit of the slaves' task reports (issue 54): while a few report entries are on
//! their way through Raft, the batches that arrive wait and then go out together as one
//! [`Command::GroupedTaskReports`] entry. Alone, a batch is proposed at once as the
//! `TaskReports` entry it always was, so a quiet cluster waits for nothing; under load the
//! number of entries follows the number of commit rounds instead of the number of slaves.
//! At 10,000 slaves each task's reports were an entry of their own, and per-entry work
//! (the log write, replication, apply on every replica, the snapshots every 10,000
//! entries) was the larger part of the leader's cost per task.
//!
//! Each waiting batch gets the entry's outcome, or its error (a batch in an entry that did
//! not apply is re-sent by its slave, as before). A group too large for one entry is
//! proposed batch by batch.

use hetsched_common::protocol::{ErrorReply, TaskReport};
use hetsched_common::NodeId;
use hetsched_master_core::state::{Command, NodeReports, Outcome};
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Report entries in flight before new batches wait to be grouped. Two keep one entry
/// forming while another commits; Raft already writes and sends what is proposed together.
const IN_FLIGHT: usize = 2;

/// A group stops taking waiting batches once it holds this many reports (a report is tens
/// of bytes: far below the 4 MiB entry limit; a larger entry is split anyway).
const MOST_REPORTS: usize = 8_192;

/// Why a proposal failed: the answer for the slave and, when the entry was too large for
/// the log, the command itself (a group is then proposed again batch by batch).
#[derive(Debug)]
pub(super) struct ProposeFailure {
    /// What the slave is answered.
    pub reply: ErrorReply,
    /// The command, handed back when it exceeded the entry size limit.
    pub too_large: Option<Box<Command>>,
}

/// What proposing one command returns once it applied.
pub(super) type Proposed = Result<Outcome, ProposeFailure>;

/// Proposes one command and waits until it applied (the master's Raft handle).
pub(super) type Propose =
    Box<dyn Fn(Command) -> Pin<Box<dyn Future<Output = Proposed> + Send>> + Send + Sync>;

/// A batch waiting for its entry.
struct Waiting {
    batch: NodeReports,
    done: oneshot::Sender<Result<Outcome, ErrorReply>>,
}

/// The way into the group commit: cheap to clone; the grouping task ends when every clone
/// is gone.
#[derive(Clone)]
pub(super) struct ReportGroups {
    tx: mpsc::UnboundedSender<Waiting>,
}

impl ReportGroups {
    /// Starts the grouping task (on the current tokio runtime).
    pub(super) fn start(propose: Propose) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(group(rx, propose));
        Self { tx }
    }

    /// Proposes `node`'s reports, alone or grouped with others; resolves once the entry
    /// holding them applied.
    pub(super) async fn propose(
        &self,
        node: NodeId,
        reports: Vec<TaskReport>,
    ) -> Result<Outcome, ErrorReply> {
        let (done, rx) = oneshot::channel();
        let waiting = Waiting {
            batch: NodeReports { node, reports },
            done,
        };
        if self.tx.send(waiting).is_err() {
            return Err(stopped());
        }
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> ErrorReply {
    ErrorReply::new(
        hetsched_common::protocol::ErrorKind::Unavailable,
        "the master is stopping",
    )
}

/// The grouping loop: a batch is taken while fewer than [`IN_FLIGHT`] entries are on their
/// way, together with the batches already waiting (until [`MOST_REPORTS`] reports).
async fn group(mut rx: mpsc::UnboundedReceiver<Waiting>, propose: Propose) {
    let propose = std::sync::Arc::new(propose);
    let mut in_flight = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            // Finished entries first: each frees a place for the batches that waited.
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            next = rx.recv(), if in_flight.len() < IN_FLIGHT => {
                let Some(first) = next else { break };
                let mut reports = first.batch.reports.len();
                let mut group = vec![first];
                while reports < MOST_REPORTS {
                    match rx.try_recv() {
                        Ok(w) => {
                            reports += w.batch.reports.len();
                            group.push(w);
                        }
                        Err(_) => break,
                    }
                }
                let propose = propose.clone();
                in_flight.spawn(async move { commit(&propose, group).await });
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// Proposes `group` as one entry (a plain `TaskReports` when alone) and answers each
/// waiting batch; a group too large for one entry goes batch by batch.
async fn commit(propose: &Propose, group: Vec<Waiting>) {
    // Their ratio is the grouping: batches per entry.
    metrics::counter!("hetsched_master_report_batches_total").increment(group.len() as u64);
    let entries = metrics::counter!("hetsched_master_report_entries_total");
    if group.len() == 1 {
        entries.increment(1);
        for w in group {
            let NodeReports { node, reports } = w.batch;
            let r = propose(Command::TaskReports { node, reports }).await;
            let _ = w.done.send(r.map_err(|f| f.reply));
        }
        return;
    }
    let (batches, answers): (Vec<NodeReports>, Vec<_>) =
        group.into_iter().map(|w| (w.batch, w.done)).unzip();
    match propose(Command::GroupedTaskReports { groups: batches }).await {
        Err(ProposeFailure {
            too_large: Some(returned),
            reply,
        }) => {
            let Command::GroupedTaskReports { groups } = *returned else {
                for done in answers {
                    let _ = done.send(Err(reply.clone()));
                }
                return;
            };
            entries.increment(groups.len() as u64);
            for (NodeReports { node, reports }, done) in groups.into_iter().zip(answers) {
                let r = propose(Command::TaskReports { node, reports }).await;
                let _ = done.send(r.map_err(|f| f.reply));
            }
        }
        r => {
            entries.increment(1);
            let r = r.map_err(|f| f.reply);
            for done in answers {
                let _ = done.send(r.clone());
            }
        }
    }
}

#[cfg(test)]
#[path = "report_groups_tests.rs"]
mod tests;
