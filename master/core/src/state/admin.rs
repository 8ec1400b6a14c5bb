//! Benchmark traffic in the log: `Command::Bench` entries change only these counters, so
//! `bench raft` measures consensus and apply without touching the product state. Kept apart
//! from the product commands; old log entries stay decodable because the command keeps its
//! variant.

use super::command::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What the state remembers of one benchmark client's proposals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchCounter {
    /// Proposals applied.
    pub applied: u64,
    /// Sequence numbers of the recorded ones.
    pub recorded: BTreeSet<u64>,
}

/// Benchmark counters per benchmark client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BenchBook {
    counters: BTreeMap<u64, BenchCounter>,
}

impl BenchBook {
    /// The book a snapshot describes.
    pub(super) fn from_snapshot(counters: BTreeMap<u64, BenchCounter>) -> Self {
        Self { counters }
    }

    /// Counters per benchmark client.
    pub fn counters(&self) -> &BTreeMap<u64, BenchCounter> {
        &self.counters
    }

    /// Applies one benchmark proposal: counts it, and remembers `seq` when `record`.
    pub(super) fn apply(&mut self, client: u64, seq: u64, record: bool) -> Outcome {
        let c = self.counters.entry(client).or_default();
        c.applied += 1;
        if record {
            c.recorded.insert(seq);
        }
        Outcome::Ignored(String::new())
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
