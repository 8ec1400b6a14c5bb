//! Blocked tasks wait for a change (scheduling cost that follows changes, not the backlog).
//!
//! A task that no stage could place, queue or make room for is *blocked* under a key of
//! what it needs: its request (CPU, memory, GPUs and their models, engines), its priority
//! and where it may go (its partition, or its job's locality). Within a plan, a key is
//! probed once: every later task with the same key is passed over at once. Across plans a
//! key stays blocked until something that could make it fit changes:
//! - resources freed on a node, a node joining the index or leaving drain (the index's free
//!   vector of a node grew, [`grew`]);
//! - a preemption or take-back ending (its victims' resources are freed: the same);
//! - the pools' terms: what waits in each queue (lending and the hidden reserve depend on
//!   it), the reserve's size, the GPU pools' split;
//! - a reservation for a preemptor released; the priority configuration changed;
//! - new possible victims: a placement of a lower priority than a blocked key's, or on a
//!   borrowed reserve (a take-back could stop it).
//!
//! Any of these clears the whole set (keys are few; a finer match would save little).
//! Passing a blocked task over never changes the queue's order: it keeps its place, and
//! the next plan after a change probes it there. Program tasks (engine choice) and slave
//! queues (S0.3) are never blocked across plans: their chances change with engine load
//! and queue lengths, which this does not follow.
//!
//! Leader-side derived data, like the index: deterministic from the applied log and
//! cleared on a rebuild, so it can only make a plan skip work, never decide differently
//! from a fresh scheduler after the same change.

use super::stage::PendingTask;
use crate::state::partition_of;

/// The partition of a job that names none (`partition_of`).
const DEFAULT_PARTITION: &str = "default";
use hetsched_common::priority::PriorityConfig;
use hetsched_common::{EngineKind, JobId, NodeResources};
use std::collections::BTreeSet;

/// Where a blocked task may go.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ScopeKey {
    /// Any node of the default partition (no string built per task for the common case:
    /// every plan builds the key of every waiting task it reaches).
    Default,
    /// Any node of this partition.
    Partition(String),
    /// Its job's locality.
    Job(JobId),
}

/// What a blocked task needs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct BlockKey {
    priority: i64,
    cpu_milli: u64,
    mem_mib: u64,
    gpu_count: u32,
    gpu_milli: u32,
    models: Vec<String>,
    engines: Vec<(EngineKind, u32)>,
    scope: ScopeKey,
}

impl BlockKey {
    /// The key of `head`.
    pub fn of(head: &PendingTask<'_>) -> Self {
        let r = head.req;
        let mut models = r.gpu.models.clone();
        models.sort();
        Self {
            priority: head.t.priority,
            cpu_milli: r.cpu_milli,
            mem_mib: r.mem_mib,
            gpu_count: r.gpu.count,
            gpu_milli: r.gpu.milli,
            models,
            engines: r.engines.iter().map(|(k, n)| (*k, *n)).collect(),
            scope: if head.job.candidates.is_empty() {
                match partition_of(&head.job.spec) {
                    DEFAULT_PARTITION => ScopeKey::Default,
                    p => ScopeKey::Partition(p.to_string()),
                }
            } else {
                ScopeKey::Job(head.job.id)
            },
        }
    }
}

/// Whether a node's free resources grew from `old` (`None`: not in the index) to `new`.
pub(super) fn grew(old: Option<&NodeResources>, new: &NodeResources) -> bool {
    let Some(old) = old else { return true };
    new.cpu_milli > old.cpu_milli
        || new.mem_mib > old.mem_mib
        || new.gpus.len() != old.gpus.len()
        || new
            .gpus
            .iter()
            .zip(&old.gpus)
            .any(|(n, o)| n.free_milli > o.free_milli || n.model != o.model)
        || new
            .engines
            .iter()
            .any(|(k, n)| old.engines.get(k).is_none_or(|o| n > o))
}

/// The blocked set, and what the pools' terms were when it was last checked.
#[derive(Debug, Default)]
pub(super) struct Blocked {
    /// Keys blocked since the last change.
    keys: BTreeSet<BlockKey>,
    /// The pools' terms at the last plan (what lending and hiding depend on).
    terms: Vec<u64>,
    /// The terms being compared with `terms` (reused: a plan follows nearly every arrival).
    next_terms: Vec<u64>,
    /// The priority configuration at the last plan.
    priority: Option<PriorityConfig>,
    /// Distinct keys probed (for tests and benches).
    probes: u64,
    /// Bumped by every [`changed`](Self::changed): a plan that found everything blocked
    /// is repeated only after a change (`quiet.rs`).
    generation: u64,
}

impl Blocked {
    /// Something that could make a blocked key fit changed: every key is probed again.
    pub fn changed(&mut self) {
        self.keys.clear();
        self.generation += 1;
    }

    /// Changes so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// At a plan's start: the pools' terms now, as `fill` writes them into an empty buffer;
    /// a change clears the set.
    pub fn check_terms(&mut self, fill: impl FnOnce(&mut Vec<u64>)) {
        self.next_terms.clear();
        fill(&mut self.next_terms);
        if self.next_terms != self.terms {
            std::mem::swap(&mut self.terms, &mut self.next_terms);
            self.changed();
        }
    }

    /// At a plan's start: a changed priority configuration clears the set.
    pub fn check_priority(&mut self, now: &PriorityConfig) {
        if self.priority.as_ref() != Some(now) {
            self.priority = Some(now.clone());
            self.changed();
        }
    }

    /// Whether `key` is blocked.
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.keys.contains(key)
    }

    /// `key` found no place; it stays blocked until a change.
    pub fn insert(&mut self, key: BlockKey) {
        self.keys.insert(key);
    }

    /// A probe of a key (a task that went through the stages).
    pub fn probed(&mut self) {
        self.probes += 1;
    }

    /// Keys blocked now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Tasks that went through the stages since the scheduler started.
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// The highest priority of a blocked key.
    pub fn top_priority(&self) -> Option<i64> {
        self.keys.iter().map(|k| k.priority).max()
    }
}
