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
//!
//! **What is kept.** What each shape sees of a node's devices depends on the devices alone,
//! so the placer keeps it per device state ([`GroupSees`]) across decisions and new mixes;
//! a delta then applies the placement to the few devices the task takes instead of walking
//! every device twice, and a shape whose classes all fit (or none does) beside the GPUs
//! costs no walk of its classes. On a trace that barely queues, where every plan follows
//! one arrival and so meets a new mix, that took a third of `pipeline-frag`'s instructions
//! away (docs/perf-log/2026-11-22.md#frag-cost-where-the-trace-barely-queues).

use super::frag::DemandShape;
use hetsched_common::{allocate_gpus, GpuAlloc, GpuDevice, NodeResources, ResourceRequest};

/// What a GPU shape (devices, share, models) sees of a node's devices whose free
/// thousandths are `free`.
fn shape_sees(shape: &DemandShape, devices: &[GpuDevice], free: &[u32]) -> ShapeSees {
    let need = shape.gpu_milli.max(1);
    let mut sees = ShapeSees::default();
    for (d, f) in devices.iter().zip(free) {
        if shape.accepts(&d.model) {
            sees.add(*f, need);
        }
    }
    sees
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
    let sees = shape_sees(class, devices, free);
    if cpu_milli < class.cpu_milli || mem_mib < class.mem_mib {
        return sees.total;
    }
    sees.unusable(class).unwrap_or(sees.total)
}

/// Writes into `scratch` each device's free thousandths after `req` is placed on a node with
/// `free`, and returns the devices `allocate_gpus` gives it; `None` when it does not fit.
fn free_after(
    free: &NodeResources,
    req: &ResourceRequest,
    scratch: &mut Vec<u32>,
) -> Option<GpuAlloc> {
    if free.cpu_milli < req.cpu_milli || free.mem_mib < req.mem_mib {
        return None;
    }
    let alloc = allocate_gpus(&free.gpus, &req.gpu)?;
    scratch.clear();
    scratch.extend(free.gpus.iter().map(|d| d.free_milli));
    for (dev, milli) in &alloc {
        if let Some(f) = scratch.get_mut(*dev as usize) {
            *f = f.saturating_sub(*milli);
        }
    }
    Some(alloc)
}

/// What one shape sees of a node's devices, summed device by device (kept as numbers so
/// that a placement's change to a few devices can be applied).
#[derive(Clone, Copy, Debug, Default)]
struct ShapeSees {
    /// Free thousandths of the accepted devices.
    total: u64,
    /// Accepted devices with at least the shape's share free, and their thousandths.
    usable: u32,
    usable_milli: u64,
}

impl ShapeSees {
    #[inline]
    fn add(&mut self, free: u32, need: u32) {
        self.total += free as u64;
        if free >= need {
            self.usable += 1;
            self.usable_milli += free as u64;
        }
    }

    /// The same after one device of `free` thousandths free keeps `after` of them.
    #[inline]
    fn changed(mut self, free: u32, after: u32, need: u32) -> Self {
        self.total -= (free - after.min(free)) as u64;
        if free >= need {
            self.usable -= 1;
            self.usable_milli -= free as u64;
        }
        if after >= need {
            self.usable += 1;
            self.usable_milli += after as u64;
        }
        self
    }

    /// Of `total`, the part a task of `shape` cannot use; `None` when one cannot run on these
    /// devices at all (then all of it is a fragment).
    fn unusable(&self, shape: &DemandShape) -> Option<u64> {
        let enough = if shape.is_fraction() {
            self.usable >= 1
        } else {
            self.usable >= shape.gpu_count
        };
        enough.then(|| self.total - self.usable_milli)
    }
}

/// What one shape group sees of a node's devices: it depends on the devices alone (their
/// models and free thousandths), not on the node's CPU and memory nor on the weights, so the
/// `frag` placer keeps it per distinct device state across decisions and mixes (see
/// [`MixByShape::delta_seen`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GroupSees {
    sees: ShapeSees,
    /// Which devices the shape accepts (bit `i` for device `i` < 64; past that the model is
    /// compared again).
    accepted: u64,
    /// Whether it accepts any.
    any: bool,
}

impl GroupSees {
    /// Devices a task of the shape could use: accepted, with at least its share free.
    pub(crate) fn usable(&self) -> u32 {
        self.sees.usable
    }
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
    /// The most CPU and memory a class of it asks, and the least: a node with at least the
    /// most has room for all of them, one with less than the least for none, and neither
    /// needs the classes walked (most nodes of a mostly free cluster are the first kind).
    most: (u64, u64),
    least: (u64, u64),
}

impl ShapeGroup {
    /// The weight of the classes with room beside the GPUs on a node with `cpu_milli` and
    /// `mem_mib`.
    #[inline]
    fn fitting(&self, cpu_milli: u64, mem_mib: u64) -> u128 {
        if cpu_milli >= self.most.0 && mem_mib >= self.most.1 {
            return self.weight;
        }
        if cpu_milli < self.least.0 || mem_mib < self.least.1 {
            return 0;
        }
        self.classes
            .iter()
            .filter(|(cpu, mem, _)| cpu_milli >= *cpu && mem_mib >= *mem)
            .map(|(_, _, w)| *w as u128)
            .sum()
    }

    /// `Σ weight · F(n, class)` over this shape's classes, for a node with `cpu_milli`,
    /// `mem_mib` and devices `devices` whose free thousandths are `free`: every class loses
    /// all the free capacity of the devices the shape accepts (`weight · total`), except
    /// what [`lost`](Self::lost) takes back.
    fn fragmentation(
        &self,
        cpu_milli: u64,
        mem_mib: u64,
        devices: &[GpuDevice],
        free: &[u32],
    ) -> u128 {
        let sees = shape_sees(&self.shape, devices, free);
        self.weight * sees.total as u128 - self.lost(&sees, cpu_milli, mem_mib)
    }

    /// What the group's term loses below `weight · total` on a node with `cpu_milli` and
    /// `mem_mib` whose devices it sees as `sees`: the usable thousandths, for the classes with
    /// room beside the GPUs, when a task of the shape could run there (those lose only what
    /// the shape cannot use, the others all of it).
    #[inline]
    fn lost(&self, sees: &ShapeSees, cpu_milli: u64, mem_mib: u64) -> u128 {
        self.lost_of(self.counted(sees), cpu_milli, mem_mib)
    }

    /// [`lost`](Self::lost) from the usable thousandths that count ([`counted`](Self::counted)).
    #[inline]
    fn lost_of(&self, counted: u64, cpu_milli: u64, mem_mib: u64) -> u128 {
        match counted {
            0 => 0,
            u => self.fitting(cpu_milli, mem_mib) * u as u128,
        }
    }

    /// The usable thousandths that count toward [`lost`](Self::lost), given what the shape
    /// sees: 0 where a task of the shape could not run on the devices.
    #[inline]
    fn counted(&self, sees: &ShapeSees) -> u64 {
        if sees.unusable(&self.shape).is_none() {
            return 0;
        }
        sees.usable_milli
    }

    /// The change of this group's term (see [`change`](Self::change)) under its weights, on
    /// a node with free CPU and memory `before` that a placement leaves with `after`.
    #[inline]
    fn weigh(&self, c: GroupChange, before: (u64, u64), after: (u64, u64)) -> i128 {
        self.lost_of(c.usable_was, before.0, before.1) as i128
            - self.lost_of(c.usable_is, after.0, after.1) as i128
            - (self.weight * c.took as u128) as i128
    }

    /// What placing a task that takes `taken` (devices and thousandths; `after` holds each
    /// device's free thousandths after it) does to this group's term on a node with `free`,
    /// whose devices the shape sees as `seen`: the state after differs only in the devices
    /// taken, so no device is walked again.
    #[inline]
    fn change(
        &self,
        seen: &GroupSees,
        free: &NodeResources,
        taken: &GpuAlloc,
        after: &[u32],
    ) -> GroupChange {
        let need = self.shape.gpu_milli.max(1);
        let was = seen.sees;
        let mut is = was;
        for (dev, _) in taken {
            let i = *dev as usize;
            let (Some(d), Some(f_after)) = (free.gpus.get(i), after.get(i)) else {
                continue;
            };
            let accepted = if i < 64 {
                seen.accepted >> i & 1 == 1
            } else {
                self.shape.accepts(&d.model)
            };
            if accepted {
                is = is.changed(d.free_milli, *f_after, need);
            }
        }
        GroupChange {
            usable_was: self.counted(&was),
            usable_is: self.counted(&is),
            took: was.total - is.total,
        }
    }
}

/// What placing a task does to one shape group's term on a node, before any weight: the
/// usable thousandths that count when a class of the shape has room beside the GPUs, before
/// and after (0 where a task of the shape could not run on the devices), and the free
/// thousandths the task took from the devices the shape accepts. The group's term changes by
/// `fitting_before · usable_was − fitting_after · usable_is − weight · took`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GroupChange {
    pub(crate) usable_was: u64,
    pub(crate) usable_is: u64,
    pub(crate) took: u64,
}

/// A delta normalised by the weight of the classes that accept one of the node's models
/// (`here`) against the whole mix's (`all`); unchanged when every class does or none.
pub(crate) fn normalised(delta: i128, here: u128, all: u128) -> i128 {
    if here == 0 || here == all {
        return delta;
    }
    delta.saturating_mul(all as i128) / here as i128
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
        self.clear_weights();
        for (class, w) in mix {
            let g = self.group_for(class);
            self.add_class(g, class.cpu_milli, class.mem_mib, w);
        }
        self.groups.retain(|g| !g.classes.is_empty());
    }

    /// The number of the group of `class`'s GPU shape, made (with no classes) when new.
    /// Numbers stay until [`set`](Self::set) drops empty groups: the `frag` placer keeps
    /// each class's number and never calls `set`, so a new mix costs no search of shapes.
    pub(crate) fn group_for(&mut self, class: &DemandShape) -> usize {
        let same = |g: &ShapeGroup| {
            g.shape.gpu_count == class.gpu_count
                && g.shape.gpu_milli == class.gpu_milli
                && g.shape.models == class.models
        };
        if let Some(i) = self.groups.iter().position(same) {
            return i;
        }
        self.groups.push(ShapeGroup {
            shape: DemandShape {
                cpu_milli: 0,
                mem_mib: 0,
                ..class.clone()
            },
            classes: Vec::new(),
            weight: 0,
            most: (0, 0),
            least: (u64::MAX, u64::MAX),
        });
        self.groups.len() - 1
    }

    /// Empties every group, keeping the groups and their numbers.
    pub(crate) fn clear_weights(&mut self) {
        for g in &mut self.groups {
            g.classes.clear();
            g.weight = 0;
            g.most = (0, 0);
            g.least = (u64::MAX, u64::MAX);
        }
        self.all = 0;
    }

    /// Adds a class of group `group` (from [`group_for`](Self::group_for)) with its CPU,
    /// memory and weight.
    pub(crate) fn add_class(&mut self, group: usize, cpu_milli: u64, mem_mib: u64, weight: u64) {
        if let Some(g) = self.groups.get_mut(group) {
            g.classes.push((cpu_milli, mem_mib, weight));
            g.weight += weight as u128;
            g.most = (g.most.0.max(cpu_milli), g.most.1.max(mem_mib));
            g.least = (g.least.0.min(cpu_milli), g.least.1.min(mem_mib));
            self.all += weight as u128;
        }
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
        // Groups emptied by a new mix keep their numbers (see `group_for`): they add nothing.
        self.groups
            .iter()
            .filter(|g| !g.classes.is_empty())
            .map(|g| g.fragmentation(cpu_milli, mem_mib, devices, free))
            .sum()
    }

    /// How much placing `req` on a node with `free` grows its expected fragmentation, or
    /// `None` when it does not fit. Signed: a placement can also turn fragments into used
    /// capacity. `scratch` is a reusable buffer.
    ///
    /// One pass over the mix: what each shape sees of the devices is taken once
    /// ([`see`](Self::see)) and the state after the placement differs from it only in the
    /// devices the task takes ([`delta_seen`](Self::delta_seen)); the weights of each group's
    /// classes are summed once for both states. The `frag` placer keeps what the shapes see
    /// per device state, so a decision walks no device of a state met before.
    pub fn delta(
        &self,
        free: &NodeResources,
        req: &ResourceRequest,
        scratch: &mut Vec<u32>,
    ) -> Option<i128> {
        let mut seen = Vec::with_capacity(self.groups.len());
        self.see(&free.gpus, &mut seen);
        self.delta_seen(free, req, &seen, scratch)
    }

    /// Extends `out` (one entry per group, by number) to every group of the mix: what each
    /// group's shape sees of `devices`. Entries already there are kept (groups keep their numbers
    /// and only new shapes are added, until [`set`](Self::set) or a new `MixByShape`).
    pub(crate) fn see(&self, devices: &[GpuDevice], out: &mut Vec<GroupSees>) {
        self.see_each(
            || devices.iter().map(|d| (d.model.as_str(), d.free_milli)),
            out,
        );
    }

    /// [`see`](Self::see) from each device's model and free thousandths, in device order
    /// (`devices` gives a fresh walk for each new group).
    pub(crate) fn see_each<'a, I>(&self, devices: impl Fn() -> I, out: &mut Vec<GroupSees>)
    where
        I: Iterator<Item = (&'a str, u32)>,
    {
        for g in self.groups.iter().skip(out.len()) {
            let need = g.shape.gpu_milli.max(1);
            let mut seen = GroupSees::default();
            for (i, (model, free)) in devices().enumerate() {
                if g.shape.accepts(model) {
                    seen.sees.add(free, need);
                    seen.any = true;
                    if i < 64 {
                        seen.accepted |= 1 << i;
                    }
                }
            }
            out.push(seen);
        }
    }

    /// [`delta`](Self::delta) from what each group sees of the node's devices before the
    /// placement (`seen`, from [`see`](Self::see) on `free.gpus`): the state after it
    /// differs only in the devices the task takes, so no device is walked again.
    pub(crate) fn delta_seen(
        &self,
        free: &NodeResources,
        req: &ResourceRequest,
        seen: &[GroupSees],
        scratch: &mut Vec<u32>,
    ) -> Option<i128> {
        let taken = free_after(free, req, scratch)?;
        let (cpu_before, mem_before) = (free.cpu_milli, free.mem_mib);
        let (cpu_after, mem_after) = (cpu_before - req.cpu_milli, mem_before - req.mem_mib);
        // A group's term is `W·total − lost`, `lost` = the fitting classes' weight times the
        // usable thousandths when a task of the shape could run on the devices, else 0 (see
        // `ShapeGroup::fragmentation`); so its change is `lost_was − lost_is − W·(what the task
        // took from the devices the shape accepts)`, with no whole term evaluated twice.
        let (mut delta, mut here) = (0i128, 0u128);
        for (g, sees) in self.groups.iter().zip(seen) {
            if g.classes.is_empty() || !sees.any {
                continue;
            }
            here += g.weight; // the mix as this node's models see it (see below)
            let c = g.change(sees, free, &taken, scratch);
            delta += g.weigh(c, (cpu_before, mem_before), (cpu_after, mem_after));
        }
        // The mix as this node's models see it: normalised by the weight of the classes that
        // accept one of them (all of the mix when no class names a model).
        Some(normalised(delta, here, self.all))
    }

    /// Placing `req` on a node with `free`, group by group, before any weight: into `out`,
    /// each group that accepts one of the node's devices, by number, with its
    /// [`GroupChange`]. `false` when it does not fit. The `frag` placer keeps them per node
    /// state and request and weighs them under each new mix ([`delta_of`](Self::delta_of)).
    pub(crate) fn changes_seen(
        &self,
        free: &NodeResources,
        req: &ResourceRequest,
        seen: &[GroupSees],
        scratch: &mut Vec<u32>,
        out: &mut Vec<(usize, GroupChange)>,
    ) -> bool {
        out.clear();
        let Some(taken) = free_after(free, req, scratch) else {
            return false;
        };
        for (i, (g, sees)) in self.groups.iter().zip(seen).enumerate() {
            if sees.any {
                out.push((i, g.change(sees, free, &taken, scratch)));
            }
        }
        true
    }

    /// The delta [`delta_seen`](Self::delta_seen) gives, from the changes
    /// [`changes_seen`](Self::changes_seen) gave for the same node (free CPU and memory
    /// `before`) and request (leaving `after`), under the current weights.
    pub(crate) fn delta_of(
        &self,
        changes: impl Iterator<Item = (usize, GroupChange)>,
        before: (u64, u64),
        after: (u64, u64),
    ) -> i128 {
        let (mut delta, mut here) = (0i128, 0u128);
        for (i, c) in changes {
            let Some(g) = self.groups.get(i).filter(|g| !g.classes.is_empty()) else {
                continue;
            };
            here += g.weight;
            delta += g.weigh(c, before, after);
        }
        normalised(delta, here, self.all)
    }

    /// Shape groups there are (numbered from 0; see [`group_for`](Self::group_for)).
    pub(crate) fn groups(&self) -> usize {
        self.groups.len()
    }

    /// [`delta`](Self::delta) as two whole evaluations of the mix and a third walk for the
    /// normalisation: the reference the one-pass form is tested against.
    #[cfg(test)]
    pub(crate) fn delta_reference(
        &self,
        free: &NodeResources,
        req: &ResourceRequest,
        scratch: &mut Vec<u32>,
    ) -> Option<i128> {
        let was: Vec<u32> = free.gpus.iter().map(|d| d.free_milli).collect();
        free_after(free, req, scratch)?;
        let before = self.fragmentation(free.cpu_milli, free.mem_mib, &free.gpus, &was);
        let after = self.fragmentation(
            free.cpu_milli - req.cpu_milli,
            free.mem_mib - req.mem_mib,
            &free.gpus,
            scratch,
        );
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
