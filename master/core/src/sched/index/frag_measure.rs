//! `frag`'s measure (see `frag.rs` for what it means): the fragment of one class, and the
//! expected fragmentation of a node over the whole mix, computed by GPU shape.
//!
//! **Why by shape.** The classes of the mix (≈ 70 on the Alibaba trace) differ mostly in CPU
//! and memory, not in what they ask of GPUs (a dozen shapes: one whole device, a few shares,
//! 2, 4 or 8 devices, the models some name). A class's fragment on a node is either all the
//! free capacity of its accepted devices (it cannot run there: too little CPU or memory, too
//! few usable devices) or the part of it that devices of its share cannot use, and both
//! depend on the GPU shape alone; CPU and memory only decide *which* of the two applies. So
//! the devices are walked once per shape, and each class costs two comparisons: the
//! weighted sum is the same integer as `Σ weight · class_fragment` over the classes, which
//! `frag` evaluated before placing every task on every distinct node state — most of a
//! `frag` decision's time while the cluster is mostly free (every node fits).

use super::frag::DemandShape;
use hetsched_common::{allocate_gpus, GpuDevice, NodeResources, ResourceRequest};

/// What a GPU shape (devices, share, models) sees of a node's devices: the free thousandths
/// of the devices it accepts, and of those the part it cannot use when one task of the shape
/// could run on the devices (`None`: it could not, so all of it is a fragment).
fn shape_sees(shape: &DemandShape, devices: &[GpuDevice], free: &[u32]) -> (u64, Option<u64>) {
    let need = shape.gpu_milli.max(1);
    let (mut total, mut usable, mut usable_milli) = (0u64, 0u32, 0u64);
    for (d, f) in devices.iter().zip(free) {
        if !shape.accepts(&d.model) {
            continue;
        }
        total += *f as u64;
        if *f >= need {
            usable += 1;
            usable_milli += *f as u64;
        }
    }
    let enough = if shape.is_fraction() {
        usable >= 1
    } else {
        usable >= shape.gpu_count
    };
    (total, enough.then(|| total - usable_milli))
}

/// The fragment `F(n, m)` of one node for one class, in GPU thousandths: see `frag.rs`.
/// `free` gives each device's free thousandths (it may differ from `devices[i].free_milli`:
/// a hypothetical state), `devices` their models.
pub fn class_fragment(
    cpu_milli: u64,
    mem_mib: u64,
    devices: &[GpuDevice],
    free: &[u32],
    class: &DemandShape,
) -> u64 {
    let (total, unusable) = shape_sees(class, devices, free);
    if cpu_milli < class.cpu_milli || mem_mib < class.mem_mib {
        return total;
    }
    unusable.unwrap_or(total)
}

/// The classes of the mix that ask the same of GPUs (devices, share, models).
#[derive(Clone, Debug)]
struct ShapeGroup {
    /// The shape, as a class of it with no CPU or memory.
    shape: DemandShape,
    /// CPU, memory and weight of each class of the shape.
    classes: Vec<(u64, u64, u64)>,
    /// Their weights together.
    weight: u128,
}

impl ShapeGroup {
    /// `Σ weight · F(n, class)` over this shape's classes, for a node with `cpu_milli`,
    /// `mem_mib` and devices `devices` whose free thousandths are `free`.
    fn fragmentation(
        &self,
        cpu_milli: u64,
        mem_mib: u64,
        devices: &[GpuDevice],
        free: &[u32],
    ) -> u128 {
        let (total, unusable) = shape_sees(&self.shape, devices, free);
        let Some(unusable) = unusable.filter(|_| total > 0) else {
            return self.weight * total as u128;
        };
        // Classes with room beside the GPUs lose only what the shape cannot use; the others
        // all of it.
        let fitting: u128 = self
            .classes
            .iter()
            .filter(|(cpu, mem, _)| cpu_milli >= *cpu && mem_mib >= *mem)
            .map(|(_, _, w)| *w as u128)
            .sum();
        fitting * unusable as u128 + (self.weight - fitting) * total as u128
    }
}

/// A weighted mix of classes grouped by GPU shape: evaluates `Σ weight · F(n, m)` walking a
/// node's devices once per shape rather than once per class (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct MixByShape {
    groups: Vec<ShapeGroup>,
    /// Every class's weight together.
    all: u128,
}

impl MixByShape {
    /// The mix `mix` (classes with their weights), grouped.
    pub fn new(mix: &[(DemandShape, u64)]) -> Self {
        let mut m = Self::default();
        m.set(mix.iter().map(|(c, w)| (c, *w)));
        m
    }

    /// Replaces the mix, keeping the groups' buffers (a new mix follows every arrival).
    pub fn set<'a>(&mut self, mix: impl IntoIterator<Item = (&'a DemandShape, u64)>) {
        for g in &mut self.groups {
            g.classes.clear();
            g.weight = 0;
        }
        self.all = 0;
        for (class, w) in mix {
            let same = |g: &&mut ShapeGroup| {
                g.shape.gpu_count == class.gpu_count
                    && g.shape.gpu_milli == class.gpu_milli
                    && g.shape.models == class.models
            };
            let g = match self.groups.iter_mut().position(|g| same(&g)) {
                Some(i) => &mut self.groups[i],
                None => {
                    self.groups.push(ShapeGroup {
                        shape: DemandShape {
                            cpu_milli: 0,
                            mem_mib: 0,
                            ..class.clone()
                        },
                        classes: Vec::new(),
                        weight: 0,
                    });
                    let last = self.groups.len() - 1;
                    &mut self.groups[last]
                }
            };
            g.classes.push((class.cpu_milli, class.mem_mib, w));
            g.weight += w as u128;
            self.all += w as u128;
        }
        self.groups.retain(|g| !g.classes.is_empty());
    }

    /// A node's expected fragmentation: `Σ weight · F(n, m)` over the mix, for a node with
    /// `cpu_milli`, `mem_mib` and `devices` whose free thousandths are `free`.
    pub fn fragmentation(
        &self,
        cpu_milli: u64,
        mem_mib: u64,
        devices: &[GpuDevice],
        free: &[u32],
    ) -> u128 {
        if free.iter().all(|f| *f == 0) {
            return 0;
        }
        self.groups
            .iter()
            .map(|g| g.fragmentation(cpu_milli, mem_mib, devices, free))
            .sum()
    }

    /// How much placing `req` on a node with `free` grows its expected fragmentation, or
    /// `None` when it does not fit. Signed: a placement can also turn fragments into used
    /// capacity. `scratch` is a reusable buffer.
    pub fn delta(
        &self,
        free: &NodeResources,
        req: &ResourceRequest,
        scratch: &mut Vec<u32>,
    ) -> Option<i128> {
        if free.cpu_milli < req.cpu_milli || free.mem_mib < req.mem_mib {
            return None;
        }
        let alloc = allocate_gpus(&free.gpus, &req.gpu)?;
        scratch.clear();
        scratch.extend(free.gpus.iter().map(|d| d.free_milli));
        let before = self.fragmentation(free.cpu_milli, free.mem_mib, &free.gpus, scratch);
        for (dev, milli) in &alloc {
            if let Some(f) = scratch.get_mut(*dev as usize) {
                *f = f.saturating_sub(*milli);
            }
        }
        let after = self.fragmentation(
            free.cpu_milli - req.cpu_milli,
            free.mem_mib - req.mem_mib,
            &free.gpus,
            scratch,
        );
        // The mix as this node's models see it: normalised by the weight of the classes that
        // accept one of them (all of the mix when no class names a model).
        let here: u128 = self
            .groups
            .iter()
            .filter(|g| free.gpus.iter().any(|d| g.shape.accepts(&d.model)))
            .map(|g| g.weight)
            .sum();
        let delta = (after as i128).saturating_sub(before as i128);
        if here == 0 || here == self.all {
            return Some(delta);
        }
        Some(delta.saturating_mul(self.all as i128) / here as i128)
    }
}
