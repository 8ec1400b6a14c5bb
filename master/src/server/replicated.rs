//! The bridge between consensus and the [`Replica`] (the cluster state and its benchmark
//! counters): decodes committed entries, applies them, and tells the leader-duties actor
//! what changed.

use super::events::Journal;
use hetsched_common::NodeId;
use hetsched_consensus::StateMachine;
use hetsched_master_core::state::{
    command_nodes, touched_nodes, CommandEnvelope, Outcome, Replica,
};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::mpsc;

/// One applied entry, as seen by the leader duties.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Log index.
    pub index: u64,
    /// What applying it returned.
    pub outcome: Outcome,
    /// Nodes whose free resources or liveness may have changed.
    pub touched: Vec<NodeId>,
}

/// The state machine handed to consensus: the state behind a lock (readers are the request
/// handlers and the scheduler) plus a channel of applied outcomes.
pub struct Replicated {
    state: Arc<RwLock<Replica>>,
    applied: mpsc::UnboundedSender<Applied>,
    /// Issue 55: the job and task changes of every applied entry.
    events: Arc<Mutex<Journal>>,
}

impl Replicated {
    /// Wraps shared state.
    pub fn new(
        state: Arc<RwLock<Replica>>,
        applied: mpsc::UnboundedSender<Applied>,
        events: Arc<Mutex<Journal>>,
    ) -> Self {
        Self {
            state,
            applied,
            events,
        }
    }

    /// Tells the journal what entry `index` changed (`restored`: the state was replaced).
    fn journal(&self, index: u64, restored: bool) {
        let s = match self.state.read() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let mut j = match self.events.lock() {
            Ok(j) => j,
            Err(p) => p.into_inner(),
        };
        if restored {
            j.restored(index, &s);
        } else {
            j.record(index, &s);
        }
    }
}

impl StateMachine for Replicated {
    type Output = Outcome;

    fn apply(&mut self, index: u64, command: &[u8]) -> Outcome {
        // An undecodable entry is applied as a rejection on every replica alike, so the
        // replicas stay identical and the log keeps moving.
        let mut touched = Vec::new();
        let outcome = match CommandEnvelope::decode(command) {
            Ok(env) => {
                let nodes = command_nodes(&env.command);
                let outcome = match self.state.write() {
                    Ok(mut s) => s.apply(index, env),
                    Err(poisoned) => poisoned.into_inner().apply(index, env),
                };
                touched = touched_nodes(nodes, &outcome);
                outcome
            }
            Err(e) => {
                tracing::error!(index, error = %e, "undecodable log entry");
                if let Ok(mut s) = self.state.write() {
                    s.skip_undecodable(index);
                }
                Outcome::Rejected(e)
            }
        };
        self.journal(index, false);
        metrics::counter!("hetsched_master_commands_applied_total").increment(1);
        let _ = self.applied.send(Applied {
            index,
            outcome: outcome.clone(),
            touched,
        });
        outcome
    }

    fn snapshot(&self) -> Vec<u8> {
        match self.state.read() {
            Ok(s) => s.to_bytes(),
            Err(p) => p.into_inner().to_bytes(),
        }
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let restored = Replica::from_bytes(snapshot)?;
        let index = restored.last_index();
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        *s = restored;
        drop(s);
        self.journal(index, true);
        // Index 0 marks a restore: every derived cache must be rebuilt.
        let _ = self.applied.send(Applied {
            index: 0,
            outcome: Outcome::Ignored("snapshot restored".into()),
            touched: Vec::new(),
        });
        Ok(())
    }
}
