//! Encoding the state for snapshots, and the state hash replicas and the chaos checker compare.

use super::admin::BenchBook;
use super::hash::fnv1a64;
use super::job_book::JobBook;
use super::node_book::NodeBook;
use super::profile_book::ProfileBook;
use super::request_book::RequestBook;
use super::snapshot::{Snapshot, SnapshotRef};
use super::task_book::TaskBook;
use super::ClusterState;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

impl ClusterState {
    /// A fixed hash (FNV-1a, 64 bit) of the canonical serialisation: equal on every replica
    /// that applied the same log.
    pub fn state_hash(&self) -> u64 {
        match rmp_serde::to_vec_named(self) {
            Ok(bytes) => fnv1a64(&bytes),
            Err(_) => 0,
        }
    }

    /// Serialised state (for snapshots).
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// State from [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        let mut s: Self = rmp_serde::from_slice(b).map_err(|e| format!("bad snapshot: {e}"))?;
        s.rebuild_derived();
        Ok(s)
    }

    /// Size of the serialised state, bytes (`status --json` `"state_bytes"`).
    pub fn state_bytes(&self) -> u64 {
        rmp_serde::to_vec_named(self).map_or(0, |b| b.len() as u64)
    }
}

impl ClusterState {
    /// The snapshot document of this state, borrowed.
    pub(super) fn document(&self) -> SnapshotRef<'_> {
        SnapshotRef {
            nodes: self.nodes.all(),
            node_keys: self.nodes.keys(),
            jobs: self.jobs.all(),
            tasks: self.tasks.all(),
            pending: self.tasks.pending(),
            requests: self.requests.recent(),
            applied_requests: self.requests.legacy(),
            bench: self.bench.counters(),
            priority: &self.priority,
            awaiting: self.tasks.awaiting(),
            next_job: self.jobs.next_id(),
            next_task: self.tasks.next_id(),
            next_node: self.nodes.next_id(),
            profiles: self.profiles.profiles(),
            relations: self.profiles.relations(),
            cpu_history: self.profiles.cpu_history(),
            batch: &self.batch,
            acl: &self.acl,
            last_index: self.last_index,
            last_ms: self.last_ms,
        }
    }

    /// The state a snapshot document describes, before its derived indexes are rebuilt.
    fn from_document(d: Snapshot) -> Self {
        Self {
            nodes: NodeBook::from_snapshot(d.nodes, d.node_keys, d.next_node),
            jobs: JobBook::from_snapshot(d.jobs, d.next_job),
            tasks: TaskBook::from_snapshot(d.tasks, d.pending, d.awaiting, d.next_task),
            requests: RequestBook::from_snapshot(d.requests, d.applied_requests),
            bench: BenchBook::from_snapshot(d.bench),
            priority: d.priority,
            profiles: ProfileBook::from_snapshot(d.profiles, d.relations, d.cpu_history),
            batch: d.batch,
            acl: d.acl,
            deps: Default::default(), // derived: rebuilt with the other indexes
            last_index: d.last_index,
            last_ms: d.last_ms,
        }
    }
}

/// Written as its snapshot document (see `snapshot.rs`), whatever the books look like.
impl Serialize for ClusterState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.document().serialize(serializer)
    }
}

/// Read from its snapshot document; derived indexes are rebuilt by
/// [`ClusterState::from_bytes`].
impl<'de> Deserialize<'de> for ClusterState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Snapshot::deserialize(deserializer).map(Self::from_document)
    }
}
