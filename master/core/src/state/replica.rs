//! The replicated state machine as the masters run it: the cluster state, and beside it the
//! benchmark counters that `bench raft` drives through the log (`Command::Bench`, proposed
//! and checked through the admin port only). Benchmark traffic is a test hook, not cluster
//! state, so it lives here rather than in [`ClusterState`]; the snapshot and the state hash
//! are still one document holding both, as older binaries wrote and read it, so replicas of
//! any version agree.

use super::accounting::{self, AccountingBook};
use super::admin::{BenchBook, BenchCounter};
use super::codec::{bytes_of, hash_of, size_of};
use super::command::{Command, CommandEnvelope, NodeReports, Outcome};
use super::ClusterState;
use crate::sched::multiqueue::{cluster_capacity, DrfUsage};
use hetsched_common::protocol::{AttemptRecord, TaskReport};
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
    /// Issue 53: the usage record of every ended attempt (`accounting.rs`). In snapshots,
    /// not in the state hash or size.
    accounting: AccountingBook,
    /// The capacity of the nodes taking work, as the usage records weigh it, kept between
    /// entries: computing it walks every node, and a cluster of 10,000 slaves applies
    /// finish reports many times a second (18 % of the leader's time in `bench scale`'s
    /// profile, issue 54). Only node commands change it (see [`changes_capacity`]).
    capacity: CapacityCache,
}

/// A derived value, not state: replicas holding the same state are equal whatever it holds.
#[derive(Clone, Debug, Default)]
struct CapacityCache(Option<DrfUsage>);

impl PartialEq for CapacityCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CapacityCache {}

/// Whether applying `command` may change which nodes take work or what they hold — the
/// only inputs of [`cluster_capacity`]: registration (new node or new capacity), up, down,
/// drain and undrain are the only changes to a node's liveness, drain or capacity
/// (`node_book.rs`).
/// A slave's report that an attempt ended (the reports that draft usage records).
fn is_finish(r: &TaskReport) -> bool {
    matches!(r, TaskReport::Finished { .. })
}

/// A grouped report entry with a finish in it (its records are drafted group by group).
fn grouped_finishes(command: &Command) -> bool {
    matches!(command, Command::GroupedTaskReports { groups }
        if groups.iter().any(|g| g.reports.iter().any(is_finish)))
}

fn changes_capacity(command: &Command) -> bool {
    matches!(
        command,
        Command::RegisterNode { .. }
            | Command::NodeUp { .. }
            | Command::NodeDown { .. }
            | Command::DrainNode { .. }
            | Command::UndrainNode { .. }
    )
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

    /// The accounting records.
    pub fn accounting(&self) -> &AccountingBook {
        &self.accounting
    }

    /// How long accounting detail is kept, ms (the replicated setting, issue 53).
    pub fn retention_ms(&self) -> u64 {
        self.cluster.accounting_settings().retention_ms
    }

    /// Fair share's half-life, ms (`None`: off; the replicated setting).
    pub fn half_life_ms(&self) -> Option<u64> {
        self.cluster.accounting_settings().half_life_ms
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
            command => {
                let drafts = self.drafts(&command, at_ms);
                if changes_capacity(&command) {
                    self.capacity = CapacityCache::default();
                }
                // Issue 54: a grouped entry's records are drafted group by group against the
                // state just before each, as before the group's own `TaskReports` entry.
                let capacity = grouped_finishes(&command).then(|| self.capacity());
                let mut grouped = Vec::new();
                let mut draft =
                    |state: &ClusterState, g: &NodeReports| {
                        if let Some(capacity) = &capacity {
                            grouped.extend(g.reports.iter().filter_map(|r| {
                                accounting::draft(state, g.node, r, at_ms, capacity)
                            }));
                        }
                    };
                let env = CommandEnvelope {
                    at_ms,
                    request,
                    command,
                };
                let outcome = self.cluster.apply_observed(index, env, &mut draft);
                self.keep_records(drafts.into_iter().chain(grouped), at_ms);
                outcome
            }
        }
    }

    /// Records an entry's drafted usage records (charging fair share once per attempt) and
    /// folds detail past the retention.
    fn keep_records(&mut self, drafts: impl IntoIterator<Item = AttemptRecord>, at_ms: u64) {
        // The settings as of this entry (a barrier may just have changed them).
        let settings = self.cluster.accounting_settings();
        for r in drafts {
            if let Some(h) = settings.half_life_ms {
                if !self.accounting.holds(&r) {
                    self.accounting.charge(&r, h);
                }
            }
            self.accounting.record(r);
        }
        self.accounting
            .fold_before(at_ms.saturating_sub(settings.retention_ms));
    }

    /// The capacity of the nodes taking work, kept between entries. Computed only when a
    /// record is drafted: node registrations come in storms, and each one clears it.
    fn capacity(&mut self) -> DrfUsage {
        let kept = *self
            .capacity
            .0
            .get_or_insert_with(|| cluster_capacity(&self.cluster));
        // Every test build checks the kept value against a fresh walk (the model check
        // and the chaos replays drive every command kind through here).
        debug_assert_eq!(kept, cluster_capacity(&self.cluster), "stale capacity");
        kept
    }

    /// The usage records of the attempts a command ends, drafted before it applies (the
    /// attempt's node and start are still the task's): a slave's finish reports, and the
    /// started attempts the master ends without one — those on a node declared down, or one
    /// its slave no longer holds (null readings, [`accounting::draft_lost`]).
    fn drafts(&mut self, command: &Command, at_ms: u64) -> Vec<AttemptRecord> {
        let lost = |cluster: &ClusterState, node, task, attempt, capacity: &_| {
            let at = super::command::TaskRef {
                node,
                task,
                attempt,
            };
            accounting::draft_lost(cluster, at, at_ms, capacity)
        };
        match command {
            Command::TaskReports { node, reports } => {
                if !reports.iter().any(is_finish) {
                    return Vec::new();
                }
                let capacity = self.capacity();
                reports
                    .iter()
                    .filter_map(|r| accounting::draft(&self.cluster, *node, r, at_ms, &capacity))
                    .collect()
            }
            Command::NodeDown { node } => {
                if !self.cluster.nodes().contains_key(node) {
                    return Vec::new();
                }
                let capacity = self.capacity();
                let cluster = &self.cluster;
                cluster
                    .nodes()
                    .get(node)
                    .into_iter()
                    .flat_map(|n| n.tasks.iter())
                    .filter_map(|t| {
                        let attempt = cluster.task(*t)?.status.attempt;
                        lost(cluster, *node, *t, attempt, &capacity)
                    })
                    .collect()
            }
            Command::TaskLost {
                node,
                task,
                attempt,
            } => {
                let capacity = self.capacity();
                lost(&self.cluster, *node, *task, *attempt, &capacity)
                    .into_iter()
                    .collect()
            }
            _ => Vec::new(),
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

    /// The state's document without the accounting book: what [`state_hash`](Self::state_hash)
    /// hashes and [`state_bytes`](Self::state_bytes) counts (`status` shows both).
    pub fn state_document(&self) -> Vec<u8> {
        bytes_of(self)
    }

    /// The snapshot: the state's document with the accounting book in it (left out while
    /// empty, so a cluster that never ended an attempt writes the bytes it always did).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut d = self.cluster.document_with(self.bench.counters());
        if !self.accounting.is_empty() {
            d.accounting = Some(&self.accounting);
        }
        bytes_of(&d)
    }

    /// The replica a snapshot holds (written by this binary or an older one; its
    /// accounting settings are the state's).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        let (cluster, bench, accounting) = ClusterState::decode(b)?;
        Ok(Self {
            cluster,
            bench,
            accounting,
            capacity: CapacityCache::default(),
        })
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
