//! One sender task per slave, each with its own queue, connection and back-off, so an
//! unresponsive slave (a SIGSTOPped process accepts connections and never answers) delays
//! only its own messages: nothing here is shared between slaves, no lock is held across a
//! connect or a call.
//!
//! Calls on one slave's connection are multiplexed (the wire's `Connection` matches replies
//! by request id), so a slow answer does not hold back the next assignment to the same
//! slave either; each call has its own deadline.
//!
//! Which connection: a slave that attached its link ([`SlaveLinks`], `SlaveRequest::Attach`)
//! gets its messages over the connection it opened to this master, so the leader holds one
//! descriptor per slave; any other (a slave of an older version, or one whose link is
//! between connections) gets them over a connection the sender opens to its address, as
//! before. A sender drops its own connection once the slave's link is there.

use hetsched_common::backoff::Backoff;
use hetsched_common::protocol::{Assignment, ErrorKind, Message, SlaveCommand, SlaveCommandReply};
use hetsched_common::wire::Connection;
use hetsched_common::{Attempt, NodeId, TaskId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A message for one slave.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// Stop this attempt (fire and forget: reconciliation repeats it).
    Stop {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// Time between SIGTERM and SIGKILL.
        grace_ms: Option<u64>,
    },
    /// Run these tasks (one message; a slave that predates batches gets them one by one).
    DispatchBatch(Vec<Assignment>),
    /// Change a running attempt's CPUs live (S3.2; fire and forget: the duties send it
    /// again while the slave's samples show the old count).
    SetCpus {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// New allocation, millicores.
        cpu_milli: u64,
    },
    /// S0.4: release this queued attempt for `to` (answered as [`SenderResult::Released`]).
    Release {
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The thief.
        to: NodeId,
    },
}

/// What a sender reports back to the duties.
#[derive(Clone, Debug)]
pub enum SenderResult {
    /// A dispatch message was answered (or failed).
    Dispatch(DispatchResult),
    /// A release was answered; `released` is false when refused or undelivered.
    Released {
        /// The victim.
        node: NodeId,
        /// Task.
        task: TaskId,
        /// Attempt.
        attempt: Attempt,
        /// The thief.
        to: NodeId,
        /// Whether the victim dropped the queued attempt.
        released: bool,
    },
}

/// The answer to one dispatch message (one or many assignments), reported to the duties.
#[derive(Clone, Debug)]
pub struct DispatchResult {
    /// Node.
    pub node: NodeId,
    /// The attempts the message carried.
    pub tasks: Vec<(TaskId, Attempt)>,
    /// Whether the slave accepted them.
    pub ok: bool,
}

/// Timing of the senders.
#[derive(Clone, Copy, Debug)]
pub struct SenderTiming {
    /// Deadline of one connect.
    pub connect_timeout: Duration,
    /// Deadline of one call.
    pub call_timeout: Duration,
    /// Wait after a failed connect, doubling up to `backoff_max`.
    pub backoff_min: Duration,
    /// Largest wait between connects.
    pub backoff_max: Duration,
}

impl Default for SenderTiming {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(3),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// The slaves' own links to this master that take its commands, by node: written by the
/// network threads (an `Attach`), read by the senders. Shared; a closed link is dropped
/// when next looked up.
#[derive(Clone, Default)]
pub struct SlaveLinks {
    links: Arc<Mutex<Links>>,
}

/// The attached links, and the nodes whose link was found closed since the duties last
/// asked ([`SlaveLinks::take_closed`]).
#[derive(Default)]
struct Links {
    open: HashMap<NodeId, Arc<Connection>>,
    closed: Vec<NodeId>,
}

impl SlaveLinks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Links> {
        match self.links.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// `node`'s commands go over `link` from now on (it replaces an earlier one).
    pub fn attach(&self, node: NodeId, link: Arc<Connection>) {
        self.lock().open.insert(node, link);
    }

    /// `node`'s link, while it is open.
    pub fn get(&self, node: NodeId) -> Option<Arc<Connection>> {
        let mut links = self.lock();
        match links.open.get(&node) {
            Some(l) if !l.is_closed() => Some(l.clone()),
            Some(_) => {
                links.open.remove(&node);
                links.closed.push(node);
                None
            }
            None => None,
        }
    }

    /// Issue 54: the nodes whose link closed since the last call (each forgotten here): a
    /// slave process that ended is declared down without waiting out a long node timeout.
    pub fn take_closed(&self) -> Vec<NodeId> {
        let mut links = self.lock();
        let Links { open, closed } = &mut *links;
        open.retain(|node, l| {
            let keep = !l.is_closed();
            if !keep {
                closed.push(*node);
            }
            keep
        });
        std::mem::take(closed)
    }

    /// Forgets every link (leadership lost: the slaves attach again to the next leader).
    pub fn clear(&self) {
        let mut links = self.lock();
        links.open.clear();
        links.closed.clear();
    }

    /// Links held (open or not yet found closed).
    pub fn count(&self) -> usize {
        self.lock().open.len()
    }
}

impl std::fmt::Debug for SlaveLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlaveLinks({})", self.count())
    }
}

struct Handle {
    addr: String,
    tx: mpsc::UnboundedSender<Outgoing>,
}

/// The senders, by node. Owned by the duties executor (one thread): no lock.
pub struct SlaveSenders {
    senders: HashMap<NodeId, Handle>,
    timing: SenderTiming,
    results: mpsc::UnboundedSender<SenderResult>,
    links: SlaveLinks,
}

impl SlaveSenders {
    /// Senders whose dispatch results go to `results`, preferring the slaves' own links in
    /// `links`.
    pub fn with_links(
        timing: SenderTiming,
        results: mpsc::UnboundedSender<SenderResult>,
        links: SlaveLinks,
    ) -> Self {
        Self {
            senders: HashMap::new(),
            timing,
            results,
            links,
        }
    }

    /// Queues `msg` for `node` at `addr`, starting its sender if needed (or a new one when
    /// the node re-registered at another address).
    pub fn send(&mut self, node: NodeId, addr: &str, msg: Outgoing) {
        let stale = self
            .senders
            .get(&node)
            .is_some_and(|h| h.addr != addr || h.tx.is_closed());
        if stale {
            self.senders.remove(&node);
        }
        let timing = self.timing;
        let results = self.results.clone();
        let links = self.links.clone();
        let h = self.senders.entry(node).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let to = Target {
                node,
                addr: addr.to_string(),
                links,
            };
            tokio::spawn(run_sender(to, rx, timing, results));
            Handle {
                addr: addr.to_string(),
                tx,
            }
        });
        if let Err(e) = h.tx.send(msg) {
            // The sender ended (cannot happen while we hold its receiver's peer); report.
            fail(&self.results, node, &e.0);
        }
    }

    /// Stops every sender (leadership lost): their queues are dropped, and the slaves'
    /// links forgotten.
    pub fn clear(&mut self) {
        self.senders.clear();
        self.links.clear();
    }

    /// Slaves whose commands go over their own link.
    pub fn links(&self) -> usize {
        self.links.count()
    }

    /// Number of slaves with a sender.
    pub fn count(&self) -> usize {
        self.senders.len()
    }
}

fn fail(results: &mpsc::UnboundedSender<SenderResult>, node: NodeId, msg: &Outgoing) {
    let tasks = match msg {
        Outgoing::DispatchBatch(b) => b.iter().map(|a| (a.task, a.attempt)).collect(),
        Outgoing::Stop { .. } | Outgoing::SetCpus { .. } => return,
        Outgoing::Release { task, attempt, to } => {
            let _ = results.send(SenderResult::Released {
                node,
                task: *task,
                attempt: *attempt,
                to: *to,
                released: false,
            });
            return;
        }
    };
    let _ = results.send(SenderResult::Dispatch(DispatchResult {
        node,
        tasks,
        ok: false,
    }));
}

/// Whether an answer means the peer does not speak `AssignBatch` (a slave of an older
/// version): its decoder rejects the unknown variant.
fn batch_not_understood(r: &Result<Message, hetsched_common::wire::CallError>) -> bool {
    matches!(
        r,
        Ok(Message::Error(e)) if matches!(e.kind, ErrorKind::Malformed | ErrorKind::Unsupported)
    )
}

/// Whether the slave accepted what it was sent.
fn accepted(r: &Result<Message, hetsched_common::wire::CallError>) -> bool {
    matches!(r, Ok(Message::ToSlaveReply(SlaveCommandReply::Accepted)))
}

/// Whether the victim dropped the queued attempt it was asked to release.
fn released(r: &Result<Message, hetsched_common::wire::CallError>) -> bool {
    matches!(
        r,
        Ok(Message::ToSlaveReply(SlaveCommandReply::Released {
            released: true
        }))
    )
}

/// The command a message is to its slave.
fn command(msg: &Outgoing) -> SlaveCommand {
    match msg {
        Outgoing::DispatchBatch(batch) => SlaveCommand::AssignBatch(batch.clone()),
        Outgoing::Stop {
            task,
            attempt,
            grace_ms,
        } => SlaveCommand::StopTask {
            task: *task,
            attempt: *attempt,
            grace_ms: *grace_ms,
        },
        Outgoing::SetCpus {
            task,
            attempt,
            cpu_milli,
        } => SlaveCommand::SetCpus {
            task: *task,
            attempt: *attempt,
            cpu_milli: *cpu_milli,
        },
        Outgoing::Release { task, attempt, .. } => SlaveCommand::ReleaseQueued {
            task: *task,
            attempt: *attempt,
        },
    }
}

/// Where one sender's messages go.
struct Target {
    node: NodeId,
    /// The slave's address (when it has no link).
    addr: String,
    links: SlaveLinks,
}

/// One slave's sender: its messages in order, over the slave's link when it has one, else
/// over one connection made again (after a back-off) when it breaks.
async fn run_sender(
    to: Target,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    timing: SenderTiming,
    results: mpsc::UnboundedSender<SenderResult>,
) {
    let Target { node, addr, links } = to;
    let mut conn: Option<Connection> = None;
    let mut backoff = Backoff::new(timing.backoff_min, timing.backoff_max);
    while let Some(msg) = rx.recv().await {
        if let Some(link) = links.get(node) {
            // The slave's own link: the descriptor of a connection of ours is given back.
            conn = None;
            backoff.reset();
            tokio::spawn(deliver(
                (*link).clone(),
                node,
                msg,
                timing.call_timeout,
                results.clone(),
            ));
            continue;
        }
        let c = match conn.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => match Connection::connect(&addr, timing.connect_timeout).await {
                Ok(c) => {
                    metrics::counter!("hetsched_master_slave_dials_total").increment(1);
                    backoff.reset();
                    conn = Some(c.clone());
                    c
                }
                Err(e) => {
                    tracing::debug!(%node, %addr, error = %e, "cannot reach slave; backing off");
                    fail(&results, node, &msg);
                    // Everything queued now would fail the same way: report it, so the
                    // duties retry it on their own back-off.
                    while let Ok(m) = rx.try_recv() {
                        fail(&results, node, &m);
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            },
        };
        tokio::spawn(deliver(c, node, msg, timing.call_timeout, results.clone()));
    }
}

/// Sends one message over `c` and reports what the duties wait for (dispatches and
/// releases); stops and CPU changes are fire and forget.
async fn deliver(
    c: Connection,
    node: NodeId,
    msg: Outgoing,
    timeout: Duration,
    results: mpsc::UnboundedSender<SenderResult>,
) {
    let call = Message::ToSlave(command(&msg));
    match msg {
        Outgoing::DispatchBatch(batch) => {
            let tasks: Vec<(TaskId, Attempt)> = batch.iter().map(|a| (a.task, a.attempt)).collect();
            tracing::debug!(target: "hetsched::trace", %node, tasks = tasks.len(), first = ?tasks.first(), "dispatch: sending");
            let r = c.call(call, timeout).await;
            let ok = if batch_not_understood(&r) {
                // An older slave: one message per assignment, as before batches.
                let mut all = true;
                for a in batch {
                    let r = c
                        .call(Message::ToSlave(SlaveCommand::Assign(a)), timeout)
                        .await;
                    all &= accepted(&r);
                }
                all
            } else {
                accepted(&r)
            };
            if !ok {
                tracing::debug!(%node, tasks = tasks.len(), reply = ?r, "batch dispatch not acknowledged; will retry");
            }
            tracing::debug!(target: "hetsched::trace", %node, tasks = tasks.len(), ok, "dispatch: answered");
            let _ = results.send(SenderResult::Dispatch(DispatchResult { node, tasks, ok }));
        }
        Outgoing::Stop { task, .. } => {
            if let Err(e) = c.call(call, timeout).await {
                tracing::debug!(%node, %task, error = %e, "stop not delivered; reconciliation will retry");
            }
        }
        Outgoing::SetCpus { task, .. } => {
            let r = c.call(call, timeout).await;
            if !accepted(&r) {
                tracing::debug!(%node, %task, reply = ?r, "CPU change not applied; the search will send it again");
            }
        }
        Outgoing::Release { task, attempt, to } => {
            let r = c.call(call, timeout).await;
            let _ = results.send(SenderResult::Released {
                node,
                task,
                attempt,
                to,
                released: released(&r),
            });
        }
    }
}

#[cfg(test)]
#[path = "senders_tests.rs"]
mod tests;
