//! S0.2 — engines as a booked resource (docs/DESIGN.md, S0.2): a program task granted an
//! engine kind holds one unit of it on its node for its attempt, in the replicated state, so
//! that the engine-choice stage, the placement of command tasks and the slave agree on which
//! units are taken.
//!
//! - A **GPU** unit is a whole device taken from the node's free GPUs (it travels in the
//!   task's GPU allocation), so a GPU granted to a command task is a busy GPU engine for
//!   program tasks and the other way round.
//! - Another **non-CPU** kind (NPU, DSP, FPGA, IP) is one unit of the node's free `engines`.
//! - A **CPU** unit is one of the node's cores; the task's own CPU request holds the time,
//!   and the booking counts it, so no more program tasks book CPUs than the node has cores.
//!
//! A task whose job already asks for a unit of the kind (a GPU, an NPU count) books that
//! one and takes nothing more. Queued assignments (S0.3) book nothing: units are granted at
//! assignment, like GPU devices. Every node's booked units per kind stay at most its engines
//! of that kind (the model check holds it).

use super::model::{Booking, Node};
use hetsched_common::{
    EngineKind, GpuAlloc, GpuRequest, NodeResources, ResourceRequest, GPU_MILLI_PER_DEVICE,
};

/// How many engines of `kind` a node with these resources has: CPU = whole cores, GPU =
/// devices, other kinds as declared.
pub fn engine_count(res: &NodeResources, kind: EngineKind) -> u32 {
    match kind {
        EngineKind::Cpu => (res.cpu_milli / 1000) as u32,
        EngineKind::Gpu => res.gpu_count(),
        k => res.engines.get(&k).copied().unwrap_or(0),
    }
}

/// Free units of `kind` on a node: whole free GPU devices, free other engines, and for the
/// CPU the whole free cores not already booked.
pub fn free_units(node: &Node, kind: EngineKind) -> u32 {
    let booked = node.booked.get(&kind).copied().unwrap_or(0);
    match kind {
        EngineKind::Cpu => {
            let cores = engine_count(&node.capacity, kind).saturating_sub(booked);
            cores.min((node.free.cpu_milli / 1000) as u32)
        }
        EngineKind::Gpu => node
            .free
            .gpus
            .iter()
            .filter(|g| g.free_milli >= GPU_MILLI_PER_DEVICE)
            .count() as u32,
        k => node.free.engines.get(&k).copied().unwrap_or(0),
    }
}

/// The request a program task granted `kind` takes from its node: the job's, plus one unit
/// of the kind when the job asks for none (a whole GPU device, one other engine). The
/// second value says whether a unit was added.
pub fn with_unit(req: &ResourceRequest, kind: EngineKind) -> (ResourceRequest, bool) {
    let mut r = req.clone();
    let extra = match kind {
        EngineKind::Cpu => false,
        EngineKind::Gpu if r.gpu.is_none() => {
            r.gpu = GpuRequest::whole(1);
            true
        }
        EngineKind::Gpu => false,
        k if r.engines.get(&k).copied().unwrap_or(0) == 0 => {
            r.engines.insert(k, 1);
            true
        }
        _ => false,
    };
    (r, extra)
}

/// The device a GPU booking names: the first whole device of the allocation, else its first.
fn device_of(gpus: &GpuAlloc) -> Option<u32> {
    gpus.iter()
        .find(|(_, m)| *m >= GPU_MILLI_PER_DEVICE)
        .or(gpus.first())
        .map(|(d, _)| *d)
}

impl Node {
    /// Takes `req` (with a unit of `kind` when `kind` is given) from the node's free
    /// resources and counts the booking; `None` (nothing changed) when it does not fit or
    /// the node's units of the kind are all booked. Given back by
    /// [`NodeBook::unbook`](super::NodeBook::unbook).
    pub(super) fn take_booked(
        &mut self,
        req: &ResourceRequest,
        kind: Option<EngineKind>,
    ) -> Option<(GpuAlloc, Option<Booking>)> {
        let Some(kind) = kind else {
            return self.free.take(req).map(|g| (g, None));
        };
        let booked = self.booked.get(&kind).copied().unwrap_or(0);
        if booked >= engine_count(&self.capacity, kind) {
            return None;
        }
        let (eff, extra) = with_unit(req, kind);
        let gpus = self.free.take(&eff)?;
        *self.booked.entry(kind).or_insert(0) += 1;
        let device = (kind == EngineKind::Gpu)
            .then(|| device_of(&gpus))
            .flatten();
        Some((
            gpus,
            Some(Booking {
                kind,
                device,
                extra,
            }),
        ))
    }
}

#[cfg(test)]
#[path = "booking_tests.rs"]
mod tests;
