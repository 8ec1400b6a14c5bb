//! Engine profiles (S0.5 selection tables) recorded per node, the task–engine relation (S0.1)
//! derived from them, and per-call records of API programs.

use super::command::Outcome;
use super::model::Node;
use super::model::NodeProfile;
use super::ClusterState;
use hetsched_common::program::{CallSummary, EngineDecl, SelectionTable};
use hetsched_common::protocol::EngineInfo;
use hetsched_common::{Attempt, EngineKind, NodeId, TaskId};

impl ClusterState {
    pub(super) fn record_profile(
        &mut self,
        node: NodeId,
        engines: Vec<EngineDecl>,
        table: SelectionTable,
    ) -> Outcome {
        if !self.nodes.contains_key(&node) {
            return Outcome::Rejected(format!("unknown {node}"));
        }
        self.profiles.record(node, NodeProfile { engines, table });
        Outcome::Ignored(String::new())
    }

    pub(super) fn record_calls(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: Attempt,
        summary: CallSummary,
    ) -> Outcome {
        if let Err(o) = self.current(node, task, attempt) {
            return o;
        }
        match self.tasks.get_mut(&task) {
            Some(t) => {
                t.calls = Some(summary);
                Outcome::TaskUpdated
            }
            None => Outcome::Rejected(format!("unknown {task}")),
        }
    }

    /// The engines of a node as listed: CPU (whole cores) and GPU (devices) from its
    /// resources, the other kinds from its capacity; emulation as its slave declared it.
    pub fn engine_info(&self, n: &Node) -> Vec<EngineInfo> {
        let declared_emulated = |k: EngineKind| {
            self.profiles
                .profiles()
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
}
