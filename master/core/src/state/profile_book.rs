//! The profile book: what the masters learned of how fast things run where. It owns the
//! slaves' engine profiles (S0.5 selection tables, per node), the task–engine relation
//! derived from them (S0.1, per task kind of every program submitted) and the CPU-count
//! history of GPU task classes (S3.2). Kept together because they are measurements the
//! placement stages read, never job or node life-cycle: a profile changes no task.

use super::model::{Node, NodeProfile};
use hetsched_common::program::{relation, EngineTotal, TaskKind};
use hetsched_common::protocol::EngineInfo;
use hetsched_common::{EngineKind, NodeId, TaskClass};
use std::collections::BTreeMap;

/// Profiles, the task–engine relation and the CPU-count history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileBook {
    /// Engines and selection tables by node (S0.5).
    profiles: BTreeMap<NodeId, NodeProfile>,
    /// Per task kind of every program submitted, engines by total time ascending, built
    /// from all slaves' tables.
    relations: BTreeMap<TaskKind, Vec<EngineTotal>>,
    /// Each GPU task class's best CPU count as last recorded, millicores.
    cpu_history: BTreeMap<TaskClass, u64>,
}

impl ProfileBook {
    /// The book a snapshot describes.
    pub(super) fn from_snapshot(
        profiles: BTreeMap<NodeId, NodeProfile>,
        relations: BTreeMap<TaskKind, Vec<EngineTotal>>,
        cpu_history: BTreeMap<TaskClass, u64>,
    ) -> Self {
        Self {
            profiles,
            relations,
            cpu_history,
        }
    }

    /// Engines and selection tables by node.
    pub fn profiles(&self) -> &BTreeMap<NodeId, NodeProfile> {
        &self.profiles
    }

    /// The task–engine relation by task kind: engines by total time ascending.
    pub fn relations(&self) -> &BTreeMap<TaskKind, Vec<EngineTotal>> {
        &self.relations
    }

    /// Each class's best CPU count as last recorded, millicores.
    pub fn cpu_history(&self) -> &BTreeMap<TaskClass, u64> {
        &self.cpu_history
    }

    /// Records `node`'s profile (replacing the one before) and recomputes the relation of
    /// every known task kind, since each is built from all tables.
    pub(super) fn record(&mut self, node: NodeId, profile: NodeProfile) {
        self.profiles.insert(node, profile);
        let kinds: Vec<TaskKind> = self.relations.keys().cloned().collect();
        for k in kinds {
            let r = relation(&k, self.profiles.values().map(|p| &p.table));
            self.relations.insert(k, r);
        }
    }

    /// Computes (again) the relation of `kind` from the tables known now: a program's kind
    /// is learned when a job of it is submitted.
    pub(super) fn learn_kind(&mut self, kind: TaskKind) {
        let r = relation(&kind, self.profiles.values().map(|p| &p.table));
        self.relations.insert(kind, r);
    }

    /// The engines of node `n` as listed: CPU (whole cores) and GPU (devices) from its
    /// resources, the other kinds from its capacity; emulation as its slave declared it.
    pub fn engine_info(&self, n: &Node) -> Vec<EngineInfo> {
        let declared_emulated = |k: EngineKind| {
            self.profiles
                .get(&n.id)
                .is_some_and(|p| p.engines.iter().any(|e| e.kind == k && e.emulated))
        };
        let mut out = vec![EngineInfo {
            kind: EngineKind::Cpu,
            count: (n.capacity.cpu_milli / 1000) as u32,
            free: (n.free.cpu_milli / 1000) as u32,
            emulated: false,
        }];
        if !n.capacity.gpus.is_empty() {
            out.push(EngineInfo {
                kind: EngineKind::Gpu,
                count: n.capacity.gpus.len() as u32,
                free: n
                    .free
                    .gpus
                    .iter()
                    .filter(|g| g.free_milli >= hetsched_common::GPU_MILLI_PER_DEVICE)
                    .count() as u32,
                emulated: n.gpus_emulated(),
            });
        }
        for (k, count) in &n.capacity.engines {
            if *count == 0 || matches!(k, EngineKind::Cpu | EngineKind::Gpu) {
                continue;
            }
            out.push(EngineInfo {
                kind: *k,
                count: *count,
                free: n.free.engines.get(k).copied().unwrap_or(0),
                emulated: declared_emulated(*k),
            });
        }
        out
    }

    /// Records `class`'s best CPU count.
    pub(super) fn record_cpu(&mut self, class: TaskClass, cpu_milli: u64) {
        self.cpu_history.insert(class, cpu_milli);
    }
}

#[cfg(test)]
#[path = "profile_book_tests.rs"]
mod tests;
