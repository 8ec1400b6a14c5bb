//! The replicated state machine as the masters run it: the cluster state, and beside it the
//! benchmark counters that `bench raft` drives through the log (`Command::Bench`, proposed
//! and checked through the admin port only). Benchmark traffic is a test hook, not cluster
//! state, so it lives here rather than in [`ClusterState`]; the snapshot and the state hash
//! are still one document holding both, as older binaries wrote and read it, so replicas of
//! any version agree.

use super::admin::{BenchBook, BenchCounter};
use super::codec::{bytes_of, hash_of, size_of};
use super::command::{Command, CommandEnvelope, Outcome};
use super::ClusterState;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::ops::Deref;

/// The cluster state and the benchmark counters, applied from one log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replica {
    /// Everything but benchmark traffic.
    cluster: ClusterState,
    /// Benchmark counters per benchmark client.
    bench: BenchBook,
}

impl Replica {
    /// An empty replica.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cluster state.
    pub fn cluster(&self) -> &ClusterState {
        &self.cluster
    }

    /// Benchmark counters per benchmark client.
    pub fn bench(&self) -> &BTreeMap<u64, BenchCounter> {
        self.bench.counters()
    }

    /// Applies one committed command at log `index`: benchmark traffic to the counters, the
    /// rest to the cluster state ([`ClusterState::apply`]); either way the applied index,
    /// the clock and a client request's outcome move as for any command.
    pub fn apply(&mut self, index: u64, env: CommandEnvelope) -> Outcome {
        let (at_ms, request) = (env.at_ms, env.request);
        match env.command {
            Command::Bench {
                client,
                seq,
                record,
                ..
            } => {
                let bench = &mut self.bench;
                self.cluster
                    .applied(index, at_ms, request, |_| bench.apply(client, seq, record))
            }
            command => self.cluster.apply(
                index,
                CommandEnvelope {
                    at_ms,
                    request,
                    command,
                },
            ),
        }
    }

    /// See [`ClusterState::skip_undecodable`].
    pub fn skip_undecodable(&mut self, index: u64) {
        self.cluster.skip_undecodable(index);
    }

    /// A fixed hash (FNV-1a, 64 bit) of the snapshot: equal on every replica that applied
    /// the same log.
    pub fn state_hash(&self) -> u64 {
        hash_of(self)
    }

    /// The snapshot.
    pub fn to_bytes(&self) -> Vec<u8> {
        bytes_of(self)
    }

    /// The replica a snapshot holds (written by this binary or an older one).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        let (cluster, bench) = ClusterState::decode(b)?;
        Ok(Self { cluster, bench })
    }

    /// Size of the snapshot, bytes (`status --json` `"state_bytes"`).
    pub fn state_bytes(&self) -> u64 {
        size_of(self)
    }
}

/// A replica reads as its cluster state: every query of the state is one of the cluster's.
impl Deref for Replica {
    type Target = ClusterState;

    fn deref(&self) -> &ClusterState {
        &self.cluster
    }
}

/// Written as the one snapshot document (see `snapshot.rs`): the cluster's fields with the
/// benchmark counters in their place.
impl Serialize for Replica {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.cluster
            .document_with(self.bench.counters())
            .serialize(serializer)
    }
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;
