//! Heartbeats answered off the duties actor: the network threads check the node and the
//! leader's role and answer at once, leaving the heartbeat in an inbox that the duties
//! executor empties in one pass before each tick's liveness check.
//!
//! Why: with thousands of slaves, a heartbeat that waits for its answer in the actor's
//! mailbox behind plans, applied entries and dispatch results can outlast the node timeout
//! on a busy leader, and the node is then declared down and its tasks placed again while
//! it still runs them. Answering from the network threads keeps the slave's view of the
//! leader fresh; draining the inbox *before* the tick's liveness check means no node whose
//! heartbeat arrived is ever declared down by that tick (docs/DESIGN.md, liveness).

use hetsched_common::protocol::{HeldTask, ProbeSample};
use hetsched_common::NodeId;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// What the duties executor's role lets a heartbeat get (mirrored after each event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Not the leader.
    NotLeader = 0,
    /// Leader still applying its predecessor's log.
    CatchingUp = 1,
    /// Leading: heartbeats of registered nodes are accepted.
    Leading = 2,
}

/// One heartbeat waiting for the duties executor.
#[derive(Debug)]
pub struct Pending {
    /// The node.
    pub node: NodeId,
    /// What it holds.
    pub held: Vec<HeldTask>,
    /// Its probe samples.
    pub samples: Vec<ProbeSample>,
}

/// The gate and the inbox, shared by the network threads and the duties executor.
#[derive(Debug)]
pub struct HeartbeatDesk {
    gate: AtomicU8,
    /// Issue 54: the heartbeat period slaves are asked for (0: their own), ms.
    floor_ms: AtomicU64,
    inbox: Mutex<Vec<Pending>>,
    /// The slaves' links that take the leader's commands (`SlaveRequest::Attach`, answered
    /// on the network threads as heartbeats are; read by the senders).
    pub links: super::senders::SlaveLinks,
}

impl Default for HeartbeatDesk {
    fn default() -> Self {
        Self {
            gate: AtomicU8::new(Gate::NotLeader as u8),
            floor_ms: AtomicU64::new(0),
            inbox: Mutex::new(Vec::new()),
            links: Default::default(),
        }
    }
}

impl HeartbeatDesk {
    /// The role as the duties executor last saw it.
    pub fn gate(&self) -> Gate {
        match self.gate.load(Ordering::Acquire) {
            2 => Gate::Leading,
            1 => Gate::CatchingUp,
            _ => Gate::NotLeader,
        }
    }

    /// Sets the gate (the duties executor, after each event it handled).
    pub fn set_gate(&self, g: Gate) {
        self.gate.store(g as u8, Ordering::Release);
    }

    /// The heartbeat period slaves are asked for, ms (0: their own).
    pub fn floor_ms(&self) -> u64 {
        self.floor_ms.load(Ordering::Relaxed)
    }

    /// Sets the period slaves are asked for (the duties executor, with the gate).
    pub fn set_floor_ms(&self, ms: u64) {
        self.floor_ms.store(ms, Ordering::Relaxed);
    }

    /// Leaves an accepted heartbeat for the next drain.
    pub fn push(&self, p: Pending) {
        match self.inbox.lock() {
            Ok(mut v) => v.push(p),
            Err(poisoned) => poisoned.into_inner().push(p),
        }
    }

    /// Takes every waiting heartbeat, oldest first.
    pub fn drain(&self) -> Vec<Pending> {
        match self.inbox.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_round_trips_and_inbox_drains_in_order() {
        let d = HeartbeatDesk::default();
        assert_eq!(d.gate(), Gate::NotLeader);
        for g in [Gate::CatchingUp, Gate::Leading, Gate::NotLeader] {
            d.set_gate(g);
            assert_eq!(d.gate(), g);
        }
        for n in 1..=3 {
            d.push(Pending {
                node: NodeId(n),
                held: Vec::new(),
                samples: Vec::new(),
            });
        }
        let got: Vec<u64> = d.drain().iter().map(|p| p.node.0).collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert!(d.drain().is_empty());
    }
}
