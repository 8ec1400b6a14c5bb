//! Encoding the state for snapshots, the state hash replicas and the chaos checker compare,
//! and the planning copy (the state without what only grows with history).
//!
//! The planning copy serves `duties::place_new` (an idle submit planned before it is
//! proposed). A full clone costs time in the number of jobs and tasks ever retained
//! (finished ones stay until garbage collection), while the scheduler reads only what is
//! live: nodes, pending tasks, the tasks nodes hold, their jobs. So the copy keeps the jobs
//! still open (and those a stopping attempt still names) with all their tasks, and leaves out
//! finished jobs, client request outcomes and tokens. It is never applied to the log's state
//! and never snapshotted: it exists for one plan.

use super::accounting::AccountingBook;
use super::acl::AclBook;
use super::admin::{BenchBook, BenchCounter};
use super::flows::FlowBook;
use super::hash::fnv1a64;
use super::job_book::JobBook;
use super::model::Job;
use super::node_book::NodeBook;
use super::profile_book::ProfileBook;
use super::request_book::RequestBook;
use super::snapshot::{Snapshot, SnapshotRef};
use super::task_book::TaskBook;
use super::ClusterState;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// The benchmark counters of a state alone: none (they are the
/// [`Replica`](super::Replica)'s).
static NO_BENCH: BTreeMap<u64, BenchCounter> = BTreeMap::new();

/// The hash of a snapshot document (0 if it cannot be written).
pub(super) fn hash_of(document: &impl Serialize) -> u64 {
    rmp_serde::to_vec_named(document).map_or(0, |bytes| fnv1a64(&bytes))
}

/// A snapshot document's bytes (none if it cannot be written).
pub(super) fn bytes_of(document: &impl Serialize) -> Vec<u8> {
    rmp_serde::to_vec_named(document).unwrap_or_default()
}

/// A snapshot document's size in bytes.
pub(super) fn size_of(document: &impl Serialize) -> u64 {
    rmp_serde::to_vec_named(document).map_or(0, |b| b.len() as u64)
}

impl ClusterState {
    /// A fixed hash (FNV-1a, 64 bit) of the canonical serialisation: equal on every replica
    /// that applied the same log.
    pub fn state_hash(&self) -> u64 {
        hash_of(self)
    }

    /// Serialised state (for snapshots).
    pub fn to_bytes(&self) -> Vec<u8> {
        bytes_of(self)
    }

    /// State from [`to_bytes`](Self::to_bytes) (benchmark counters a replica wrote are left
    /// out: [`Replica::from_bytes`](super::Replica::from_bytes) keeps them).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        Self::decode(b).map(|(s, _, _)| s)
    }

    /// Size of the serialised state, bytes (`status --json` `"state_bytes"`).
    pub fn state_bytes(&self) -> u64 {
        size_of(self)
    }

    /// The snapshot document of this state, borrowed, with no benchmark counters.
    pub(super) fn document(&self) -> SnapshotRef<'_> {
        self.document_with(&NO_BENCH)
    }

    /// The snapshot document of this state beside `bench`'s counters, borrowed.
    pub(super) fn document_with<'a>(
        &'a self,
        bench: &'a BTreeMap<u64, BenchCounter>,
    ) -> SnapshotRef<'a> {
        SnapshotRef {
            nodes: self.nodes.all(),
            node_keys: self.nodes.keys(),
            jobs: self.jobs.all(),
            tasks: self.tasks.all(),
            pending: self.tasks.pending(),
            requests: self.requests.recent(),
            applied_requests: self.requests.legacy(),
            bench,
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
            flows: &self.flows,
            accounting_settings: &self.accounting_settings,
            last_index: self.last_index,
            last_ms: self.last_ms,
            accounting: None,
        }
    }

    /// The state, benchmark counters and accounting book a snapshot holds, derived indexes
    /// rebuilt.
    pub(super) fn decode(b: &[u8]) -> Result<(Self, BenchBook, AccountingBook), String> {
        let d: Snapshot = rmp_serde::from_slice(b).map_err(|e| format!("bad snapshot: {e}"))?;
        let (mut s, bench, accounting) = Self::from_document(d);
        s.rebuild_derived();
        Ok((s, bench, accounting))
    }

    /// The state, benchmark counters and accounting book a snapshot document describes,
    /// before the state's derived indexes are rebuilt.
    fn from_document(d: Snapshot) -> (Self, BenchBook, AccountingBook) {
        let state = Self {
            nodes: NodeBook::from_snapshot(d.nodes, d.node_keys, d.next_node),
            jobs: JobBook::from_snapshot(d.jobs, d.next_job),
            tasks: TaskBook::from_snapshot(d.tasks, d.pending, d.awaiting, d.next_task),
            requests: RequestBook::from_snapshot(d.requests, d.applied_requests),
            priority: d.priority,
            profiles: ProfileBook::from_snapshot(d.profiles, d.relations, d.cpu_history),
            batch: d.batch,
            acl: d.acl,
            deps: Default::default(), // derived: rebuilt with the other indexes
            flows: d.flows.restored(),
            accounting_settings: d.accounting_settings,
            last_index: d.last_index,
            last_ms: d.last_ms,
        };
        (state, BenchBook::from_snapshot(d.bench), d.accounting)
    }

    /// Recomputes what is derived rather than serialised: open-task counters, the
    /// finished-job and request orders, the dependency edges; folds a legacy request map
    /// into the compact one.
    fn rebuild_derived(&mut self) {
        self.requests.rebuild(self.last_ms);
        let tasks = &self.tasks;
        let open_of = |j: &Job| {
            j.tasks
                .iter()
                .filter(|t| tasks.get(t).is_some_and(|t| !t.status.state.is_final()))
                .count() as u32
        };
        self.jobs.rebuild(open_of, self.last_ms);
        self.dependency_rules().rebuild();
    }

    /// The live part of the state, for planning (see the module's documentation).
    pub fn planning_copy(&self) -> Self {
        let stopping = self.nodes.stopping_jobs();
        // The jobs open jobs follow come too, ended or not: the dependency gate reads them.
        let jobs = self.jobs.planning_copy(|j| {
            j.open > 0 || stopping.contains(&j.id) || self.deps.has_dependents(j.id)
        });
        let tasks = self
            .tasks
            .planning_copy(jobs.values().flat_map(|j| j.tasks.iter()));
        Self {
            nodes: self.nodes.clone(),
            jobs,
            tasks,
            requests: RequestBook::default(),
            priority: self.priority.clone(),
            profiles: self.profiles.clone(),
            batch: self.batch.clone(),
            acl: AclBook::default(),
            deps: self.deps.clone(),
            flows: FlowBook::default(),
            accounting_settings: self.accounting_settings,
            last_index: self.last_index,
            last_ms: self.last_ms,
        }
    }
}

/// Written as its snapshot document (see `snapshot.rs`), whatever the books look like.
impl Serialize for ClusterState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.document().serialize(serializer)
    }
}

/// Read from its snapshot document (benchmark counters left out); derived indexes are
/// rebuilt by [`ClusterState::from_bytes`].
impl<'de> Deserialize<'de> for ClusterState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Snapshot::deserialize(deserializer).map(|d| Self::from_document(d).0)
    }
}
