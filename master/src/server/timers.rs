//! Time at the edge: the leader's clock handed to the pure scheduler ([`Clocked`]) and the
//! leader's deadline checks ([`run_deadlines`]): drain deadlines and per-attempt timeouts.
//!
//! INTERIM (issue 17): `run_deadlines` is a small loop of its own beside the leader duties
//! so that drain deadlines and task timeouts work end to end today; once the duties become
//! a pure core with effects (issue 8), its two questions — `ClusterState::drains_due` and
//! `ClusterState::timeouts_due` — belong in that core's tick, and this loop goes away.
//! Every command it proposes is fenced at apply (a drain that was lifted, an attempt that
//! already ended), so a late or duplicate proposal changes nothing.

use super::pool::SlavePool;
use super::{now_ms, MasterShared, Replicated};
use crate::sched::Scheduler;
use crate::state::{ClusterState, Command, CommandEnvelope, Outcome, Plan, TaskRef};
use hetsched_common::protocol::{Message, SlaveCommand};
use hetsched_common::NodeId;
use hetsched_consensus::{Consensus, Role};
use std::collections::BTreeSet;
use std::time::Duration;

/// A scheduler that is given the leader's clock: placements respect retry backoff
/// (`not_before_ms`). The inner scheduler stays pure; only this adapter reads the clock.
pub struct Clocked<S>(pub S);

impl<S: Scheduler> Scheduler for Clocked<S> {
    fn plan(&mut self, view: &ClusterState) -> Plan {
        self.0.plan_at(view, now_ms())
    }

    fn plan_at(&mut self, view: &ClusterState, now_ms: u64) -> Plan {
        self.0.plan_at(view, now_ms)
    }

    fn nodes_changed(&mut self, view: &ClusterState, nodes: &[NodeId]) {
        self.0.nodes_changed(view, nodes);
    }

    fn reset(&mut self, view: &ClusterState) {
        self.0.reset(view);
    }
}

/// What is due now, as commands (pure; the loop below proposes them).
pub fn due_commands(state: &ClusterState, now_ms: u64) -> Vec<Command> {
    let mut cmds: Vec<Command> = state
        .drains_due(now_ms)
        .into_iter()
        .map(|node| Command::RequeueDrained { node })
        .collect();
    cmds.extend(
        state
            .timeouts_due(now_ms)
            .into_iter()
            .map(|r| Command::TimeoutTask {
                node: r.node,
                task: r.task,
                attempt: r.attempt,
            }),
    );
    cmds
}

/// While this master leads: every `period`, proposes what [`due_commands`] finds (each once
/// while in flight) and asks the slaves to stop the attempts that were re-queued or timed
/// out. Runs until the process ends.
pub async fn run_deadlines(
    shared: MasterShared,
    raft: Consensus<Replicated>,
    period: Duration,
    stop_timeout: Duration,
) {
    let pool = SlavePool::default();
    let in_flight = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::<String>::new()));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if raft.status().role != Role::Leader {
            continue;
        }
        let cmds = due_commands(&shared.read_state(), now_ms());
        for cmd in cmds {
            let key = format!("{cmd:?}");
            let fresh = match in_flight.lock() {
                Ok(mut g) => g.insert(key.clone()),
                Err(p) => p.into_inner().insert(key.clone()),
            };
            if !fresh {
                continue;
            }
            tracing::info!(command = ?cmd, "deadline reached");
            let (raft, shared, pool, in_flight) = (
                raft.clone(),
                shared.clone(),
                pool.clone(),
                in_flight.clone(),
            );
            tokio::spawn(async move {
                let bytes = CommandEnvelope {
                    at_ms: now_ms(),
                    request: None,
                    command: cmd,
                }
                .encode();
                match raft.propose(bytes).await {
                    Ok(Outcome::Drained { requeued, .. }) => {
                        stop_attempts(&shared, &pool, requeued, stop_timeout).await
                    }
                    Ok(Outcome::TimedOut { stop, .. }) => {
                        stop_attempts(&shared, &pool, vec![stop], stop_timeout).await
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "deadline command not applied"),
                }
                match in_flight.lock() {
                    Ok(mut g) => g.remove(&key),
                    Err(p) => p.into_inner().remove(&key),
                };
            });
        }
    }
}

/// Asks each attempt's slave to stop it. Best effort: reconciliation stops attempts the log
/// no longer gives a slave, should this message be lost.
async fn stop_attempts(
    shared: &MasterShared,
    pool: &SlavePool,
    stops: Vec<TaskRef>,
    timeout: Duration,
) {
    for r in stops {
        let Some(addr) = shared
            .read_state()
            .nodes
            .get(&r.node)
            .map(|n| n.addr.clone())
        else {
            continue;
        };
        let msg = Message::ToSlave(SlaveCommand::StopTask {
            task: r.task,
            attempt: r.attempt,
        });
        if let Err(e) = pool.call(&addr, msg, timeout).await {
            tracing::debug!(task = %r.task, error = %e, "stop not delivered; reconciliation will retry");
        }
    }
}
