//! The actix side of the node: on start, the transport, the input stream and the tick
//! timer; each turn's inputs dispatched, then the Ready cycle driven; on stop, every waiter
//! answered and the node's threads ended before the data dir is released.

use super::inputs::{inputs, Input};
use super::proposals::is_command;
use super::RaftNode;
use crate::transport::Transport;
use crate::StateMachine;
use actix::prelude::*;
use raft::SnapshotStatus;

/// Continue the Ready cycle on a later turn.
#[derive(actix::Message)]
#[rtype(result = "()")]
pub(super) struct Drive;

impl<S: StateMachine> Handler<Drive> for RaftNode<S> {
    type Result = ();
    fn handle(&mut self, _: Drive, ctx: &mut Context<Self>) {
        self.drive(ctx);
    }
}

impl<S: StateMachine> Actor for RaftNode<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let back = self.control_tx.clone();
        let report: crate::transport::SnapshotReport = std::sync::Arc::new(move |to, ok| {
            let _ = back.send(Input::SnapshotSent { to, ok });
        });
        let addrs = self
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match Transport::start(self.id, &addrs, report) {
            Ok(t) => self.transport = Some(t),
            Err(e) => {
                tracing::error!(member = self.id, error = %e, "cannot start the raft transport");
                ctx.stop();
                return;
            }
        }
        if let Some((control, proposals)) = self.receivers.take() {
            ctx.add_stream(inputs(control, proposals));
        }
        let mut last_tick = std::time::Instant::now();
        let min_gap = self.tick.mul_f64(0.8);
        ctx.run_interval(self.tick, move |node, ctx| {
            // A late timer fires its missed ticks back to back. Raft must not see them: the
            // peers' messages that arrived meanwhile are still queued, so a leader would count
            // a whole election timeout without them and step down (check_quorum).
            let now = std::time::Instant::now();
            if now.duration_since(last_tick) < min_gap {
                return;
            }
            last_tick = now;
            node.proposals.tick();
            node.raw.tick();
            node.drive(ctx);
            node.proposals.expire_orphans();
            node.reads.prune_closed();
        });
        // A restarted member has committed entries to replay right away.
        self.drive(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!(member = self.id, "raft node stopped");
        // The arbiter exists for this actor alone.
        actix::Arbiter::current().stop();
    }
}

impl<S: StateMachine> StreamHandler<Vec<Input<S::Output>>> for RaftNode<S> {
    fn handle(&mut self, inputs: Vec<Input<S::Output>>, ctx: &mut Context<Self>) {
        for input in inputs {
            match input {
                Input::Propose { data, reply } => self.propose(data, reply),
                Input::Step(msgs) => self.step(msgs),
                Input::ReadIndex(reply) => self.read_index(reply),
                Input::Admin(op, reply) => self.admin(op, reply),
                Input::ExportLog {
                    from,
                    max_bytes,
                    reply,
                } => {
                    let page = self
                        .raw
                        .store()
                        .export(from, self.applied, max_bytes, is_command);
                    let _ = reply.send(page);
                }
                Input::SnapshotWritten(written) => {
                    if let Err(e) = self.on_snapshot_written(written) {
                        tracing::error!(member = self.id, error = %e, "compaction failed; stopping the node");
                        ctx.stop();
                        return;
                    }
                }
                Input::SnapshotSent { to, ok } => {
                    let status = if ok {
                        SnapshotStatus::Finish
                    } else {
                        SnapshotStatus::Failure
                    };
                    tracing::debug!(member = self.id, to, ok, "snapshot delivery reported");
                    self.raw.report_snapshot(to, status);
                }
                Input::Persisted(number) => self.on_persisted(number),
                Input::PersistFailed(e) => {
                    tracing::error!(member = self.id, error = %e, "sled flush failed; stopping the node");
                    ctx.stop();
                    return;
                }
                Input::Stop => {
                    ctx.stop();
                    return;
                }
            }
        }
        self.drive(ctx);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl<S: StateMachine> Drop for RaftNode<S> {
    fn drop(&mut self) {
        self.proposals.stop();
        self.reads.stop();
        // Ending the storage thread releases its sled handle, so the data dir can be
        // reopened once `_terminated` (dropped after `raw`) signals.
        self.persist.stop();
        self.snapshots.stop();
    }
}
