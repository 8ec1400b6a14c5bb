//! S0.2 on the slave: a GPU granted to a command task (`CUDA_VISIBLE_DEVICES`) is a busy GPU
//! engine for program calls here, as it is in the masters' books (docs/DESIGN.md, S0.2): its
//! devices leave the engine pool while the process runs, so neither an unbooked call nor a
//! peer's forwarded call runs on them.

use super::Agent;
use crate::engine::held::HeldUnits;
use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, EngineKind, TaskId};
use std::collections::BTreeSet;

impl Agent {
    /// Takes the GPU units of a command task's granted devices out of the pool.
    pub(super) fn hold_gpus(&mut self, a: &Assignment) {
        let Some(hooks) = &self.programs else { return };
        let devices: BTreeSet<u32> = a.gpus.iter().map(|(d, _)| *d).collect();
        if devices.is_empty() || hooks.runtime.engines.get(EngineKind::Gpu).is_none() {
            return;
        }
        let held = HeldUnits::take(
            &hooks.runtime.engines,
            EngineKind::Gpu,
            devices.len() as u32,
        );
        self.gpu_holds.insert((a.task, a.attempt), held);
    }

    /// Gives them back when the attempt has ended.
    pub(super) fn release_gpus(&mut self, task: TaskId, attempt: Attempt) {
        self.gpu_holds.remove(&(task, attempt));
    }
}
