//! Coordinates (docs/DESIGN.md §S4.1): what a node offers and what a task asks, as integer vectors
//! over the index's dimensions, divided by the granularity θ and rounded **up** on both
//! sides so that a node that fits is never outside the task's fit region.
//!
//! GPUs are indexed by what one task can actually get from a node, not by a total: the
//! number of wholly free devices (what a whole-device ask needs) and the largest free
//! fraction on any one device (what a shared ask needs). A sum of free thousandths would
//! put a node with 4 × 250 free in the fit region of a 500 ask that it cannot serve.

use super::error::IndexError;
use hetsched_common::{NodeResources, ResourceRequest, GPU_MILLI_PER_DEVICE};

/// Number of resource dimensions the index orders by.
pub const DIMS: usize = 4;

/// A coordinate vector: one integer per dimension, in some [`DimOrder`].
pub type Key = [u64; DIMS];

/// One resource dimension of the coordinate space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    /// CPU in millicores.
    Cpu = 0,
    /// Memory in MiB.
    Mem = 1,
    /// Number of wholly free GPU devices.
    GpuWhole = 2,
    /// Largest free share of one GPU device, in thousandths.
    GpuShare = 3,
}

impl Dim {
    /// Every dimension, in canonical order.
    pub const ALL: [Dim; DIMS] = [Dim::Cpu, Dim::Mem, Dim::GpuWhole, Dim::GpuShare];
}

/// The order in which a search compares dimensions (lexicographic, most significant first).
/// A task may prefer memory before CPU (docs/DESIGN.md §S4.3); each order in use gets its own
/// bucket tree, because a tree can only enumerate the order its levels were built in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DimOrder([Dim; DIMS]);

impl Default for DimOrder {
    fn default() -> Self {
        Self::CANONICAL
    }
}

impl DimOrder {
    /// CPU, memory, whole GPUs, GPU share.
    pub const CANONICAL: DimOrder = DimOrder(Dim::ALL);

    /// An order from a full permutation of the dimensions.
    pub fn new(dims: [Dim; DIMS]) -> Result<Self, IndexError> {
        let mut seen = [false; DIMS];
        for d in dims {
            if std::mem::replace(&mut seen[d as usize], true) {
                return Err(IndexError::BadOrder(dims.to_vec()));
            }
        }
        Ok(Self(dims))
    }

    /// `first` (most significant first), then the other dimensions in canonical order; e.g.
    /// `DimOrder::preferring(&[Dim::Mem])` for a task that cares about memory before CPU.
    pub fn preferring(first: &[Dim]) -> Result<Self, IndexError> {
        let mut dims = Vec::with_capacity(DIMS);
        for d in first {
            if dims.contains(d) {
                return Err(IndexError::BadOrder(first.to_vec()));
            }
            dims.push(*d);
        }
        for d in Dim::ALL {
            if !dims.contains(&d) {
                dims.push(d);
            }
        }
        let mut arr = Dim::ALL;
        arr.copy_from_slice(&dims);
        Ok(Self(arr))
    }

    /// The dimensions, most significant first.
    pub fn dims(&self) -> [Dim; DIMS] {
        self.0
    }

    /// A canonical-order vector rearranged into this order.
    #[inline]
    pub fn permute(&self, canonical: &Key) -> Key {
        let o = &self.0;
        [
            canonical[o[0] as usize],
            canonical[o[1] as usize],
            canonical[o[2] as usize],
            canonical[o[3] as usize],
        ]
    }

    /// The inverse of [`permute`](Self::permute).
    pub fn unpermute(&self, ordered: &Key) -> Key {
        let mut out = [0; DIMS];
        for (level, d) in self.0.iter().enumerate() {
            out[*d as usize] = ordered[level];
        }
        out
    }
}

/// Granularity θ per dimension (canonical order), each at least 1. θ = 1 everywhere makes
/// the index exact: it returns what the linear scan returns. Larger θ means fewer buckets
/// and faster searches, at the price that the first hit may not be the best node
/// (docs/DESIGN.md §S4.6) — never a node that does not fit, because the leaf check is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granularity([u64; DIMS]);

impl Default for Granularity {
    fn default() -> Self {
        Self::EXACT
    }
}

impl Granularity {
    /// θ = 1 in every dimension.
    pub const EXACT: Granularity = Granularity([1; DIMS]);

    /// θ per dimension in canonical order (cpu, mem, whole GPUs, GPU share).
    pub fn new(theta: [u64; DIMS]) -> Result<Self, IndexError> {
        if let Some(i) = theta.iter().position(|t| *t == 0) {
            return Err(IndexError::ZeroGranularity { dim: Dim::ALL[i] });
        }
        Ok(Self(theta))
    }

    /// θ of one dimension.
    pub fn get(&self, d: Dim) -> u64 {
        self.0[d as usize]
    }

    /// A raw vector divided by θ, rounded up.
    #[inline]
    pub fn coarse(&self, raw: &Key) -> Key {
        if self.0 == [1; DIMS] {
            // θ = 1 (the exact index): no division.
            return *raw;
        }
        [
            raw[0].div_ceil(self.0[0]),
            raw[1].div_ceil(self.0[1]),
            raw[2].div_ceil(self.0[2]),
            raw[3].div_ceil(self.0[3]),
        ]
    }
}

/// What a node offers, in canonical order, before θ.
pub fn node_vector(free: &NodeResources) -> Key {
    let mut whole = 0u64;
    let mut share = 0u64;
    for d in &free.gpus {
        if d.free_milli >= GPU_MILLI_PER_DEVICE {
            whole += 1;
        }
        share = share.max(d.free_milli as u64);
    }
    [free.cpu_milli, free.mem_mib, whole, share]
}

/// What a task needs, in canonical order, before θ: the least coordinate of a node that can
/// possibly serve it. Mirrors `allocate_gpus`: a whole-device ask needs `count` wholly free
/// devices; any other ask needs at least one device with `milli` free.
pub fn task_vector(req: &ResourceRequest) -> Key {
    let g = &req.gpu;
    let (whole, share) = if g.is_none() {
        (0, 0)
    } else if g.milli >= GPU_MILLI_PER_DEVICE {
        (g.count as u64, g.milli as u64)
    } else {
        (0, g.milli as u64)
    };
    [req.cpu_milli, req.mem_mib, whole, share]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_permute_and_invert() {
        let o = DimOrder::preferring(&[Dim::Mem]).unwrap();
        assert_eq!(o.dims(), [Dim::Mem, Dim::Cpu, Dim::GpuWhole, Dim::GpuShare]);
        let k = [1, 2, 3, 4];
        assert_eq!(o.permute(&k), [2, 1, 3, 4]);
        assert_eq!(o.unpermute(&o.permute(&k)), k);
        assert!(DimOrder::new([Dim::Cpu, Dim::Cpu, Dim::Mem, Dim::GpuShare]).is_err());
        assert!(DimOrder::preferring(&[Dim::Mem, Dim::Mem]).is_err());
    }

    #[test]
    fn granularity_rounds_up_and_rejects_zero() {
        let g = Granularity::new([2, 3, 1, 1]).unwrap();
        assert_eq!(g.coarse(&[4, 2, 0, 0]), [2, 1, 0, 0]);
        assert_eq!(g.coarse(&[3, 5, 0, 0]), [2, 2, 0, 0]);
        assert!(Granularity::new([1, 0, 1, 1]).is_err());
    }
}
