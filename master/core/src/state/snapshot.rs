//! The snapshot document: the flat map of named fields that snapshots and the state hash
//! have always been, kept apart from the books the state is made of in memory.
//!
//! Replicas compare `state_hash`, and a master restores snapshots written by older
//! binaries, so the bytes must not follow the in-memory layout: the books are an
//! arrangement of code, the document is a format. [`SnapshotRef`] borrows every field for
//! writing (no copy of a large state), [`Snapshot`] owns them for reading; the field order,
//! names, defaults and skips are those of the `ClusterState` derive before the books
//! (`encoding_tests.rs` pins the bytes). `#[serde(flatten)]` would give the same names but
//! writes maps of unknown length and reads through a buffered map, so it is not used.

use super::accounting::{AccountingBook, AccountingSettings};
use super::acl::AclBook;
use super::admin::BenchCounter;
use super::batch::BatchBook;
use super::command::{Outcome, TaskRef};
use super::flows::FlowBook;
use super::model::{Job, Node, NodeProfile, Task};
use super::request_book::RecentRequest;
use hetsched_common::priority::PriorityConfig;
use hetsched_common::program::{EngineTotal, TaskKind};
use hetsched_common::{ClientRequestId, JobId, NodeId, TaskClass, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The state as written: every field borrowed.
#[derive(Serialize)]
pub(super) struct SnapshotRef<'a> {
    pub nodes: &'a BTreeMap<NodeId, Node>,
    pub node_keys: &'a BTreeMap<u64, NodeId>,
    pub jobs: &'a BTreeMap<JobId, Job>,
    pub tasks: &'a BTreeMap<TaskId, Task>,
    pub pending: &'a BTreeSet<TaskId>,
    pub requests: &'a BTreeMap<ClientRequestId, RecentRequest>,
    /// Never written again once folded on restore; kept so the skip is the format's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub applied_requests: &'a BTreeMap<ClientRequestId, Outcome>,
    pub bench: &'a BTreeMap<u64, BenchCounter>,
    pub priority: &'a PriorityConfig,
    pub awaiting: &'a BTreeMap<TaskId, (NodeId, Vec<TaskRef>)>,
    pub next_job: u64,
    pub next_task: u64,
    pub next_node: u64,
    pub profiles: &'a BTreeMap<NodeId, NodeProfile>,
    pub relations: &'a BTreeMap<TaskKind, Vec<EngineTotal>>,
    pub cpu_history: &'a BTreeMap<TaskClass, u64>,
    pub batch: &'a BatchBook,
    pub acl: &'a AclBook,
    /// Issue 51: left out until a flow was ever submitted, so older states keep their bytes.
    #[serde(skip_serializing_if = "FlowBook::is_unused")]
    pub flows: &'a FlowBook,
    /// Issue 53: left out while the defaults, so older states keep their bytes.
    #[serde(skip_serializing_if = "settings_are_default")]
    pub accounting_settings: &'a AccountingSettings,
    pub last_index: u64,
    pub last_ms: u64,
    /// Issue 53: the replica's accounting book (never the state's own document, so the
    /// state hash and size leave it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accounting: Option<&'a AccountingBook>,
}

/// The state as read: every field owned, with the defaults older snapshots rely on.
#[derive(Deserialize)]
pub(super) struct Snapshot {
    pub nodes: BTreeMap<NodeId, Node>,
    pub node_keys: BTreeMap<u64, NodeId>,
    pub jobs: BTreeMap<JobId, Job>,
    pub tasks: BTreeMap<TaskId, Task>,
    pub pending: BTreeSet<TaskId>,
    pub requests: BTreeMap<ClientRequestId, RecentRequest>,
    /// Snapshots written before compact request outcomes existed carry this.
    #[serde(default)]
    pub applied_requests: BTreeMap<ClientRequestId, Outcome>,
    pub bench: BTreeMap<u64, BenchCounter>,
    #[serde(default)]
    pub priority: PriorityConfig,
    #[serde(default)]
    pub awaiting: BTreeMap<TaskId, (NodeId, Vec<TaskRef>)>,
    pub next_job: u64,
    pub next_task: u64,
    pub next_node: u64,
    #[serde(default)]
    pub profiles: BTreeMap<NodeId, NodeProfile>,
    #[serde(default)]
    pub relations: BTreeMap<TaskKind, Vec<EngineTotal>>,
    #[serde(default)]
    pub cpu_history: BTreeMap<TaskClass, u64>,
    #[serde(default)]
    pub batch: BatchBook,
    #[serde(default)]
    pub acl: AclBook,
    #[serde(default)]
    pub flows: FlowBook,
    #[serde(default)]
    pub accounting_settings: AccountingSettings,
    pub last_index: u64,
    pub last_ms: u64,
    #[serde(default)]
    pub accounting: AccountingBook,
}

/// Whether the accounting settings are the defaults (the snapshot leaves them out).
fn settings_are_default(s: &&AccountingSettings) -> bool {
    s.is_default()
}
