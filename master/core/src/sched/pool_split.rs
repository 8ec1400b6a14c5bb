//! S3.4 — which GPU pool each GPU node is in, from the workload (docs/DESIGN.md §S3.4).
//!
//! A node whose slave says `--gpu-pool single|multi` stays where it says. The others
//! (`auto`) are split by demand: the multi-GPU pool gets the share of the cluster's GPUs
//! that multi-GPU tasks asked of all GPU thousandths submitted so far ([`PoolDemand`],
//! learnt like the CPU reserve), filled with the largest nodes first (only nodes with at
//! least [`MULTI_GPU_THRESHOLD`] GPUs can hold a multi-GPU task); the rest serve the
//! single-GPU pool. Splitting by GPU count alone put every 8-GPU node in the multi pool,
//! which held the single-GPU tasks of the Alibaba trace (99 % of its GPU demand) to a
//! fifth of the GPUs (BENCHMARKS.md). Before any GPU task is seen, nodes are pooled by
//! GPU count ([`GpuPool::of_node`]).
//!
//! Pure and deterministic: the same nodes and demand give the same split. The demand is
//! scheduler-side derived data, learnt from the submissions in the log.

use super::multiqueue::{QueueKind, MULTI_GPU_THRESHOLD};
use hetsched_common::protocol::GpuPool;
use hetsched_common::{NodeId, ResourceRequest};
use std::collections::BTreeMap;

/// GPU thousandths asked by the single- and multi-GPU tasks submitted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolDemand {
    single_milli: u64,
    multi_milli: u64,
}

impl PoolDemand {
    /// Learns one submitted task's request (CPU tasks teach nothing).
    pub fn observe(&mut self, req: &ResourceRequest) {
        let milli = req.gpu.total_milli();
        match QueueKind::of(req) {
            QueueKind::GpuMulti => self.multi_milli = self.multi_milli.saturating_add(milli),
            QueueKind::GpuSingle => self.single_milli = self.single_milli.saturating_add(milli),
            QueueKind::Cpu => {}
        }
    }

    /// GPUs of `total` the multi pool should hold (rounded up); `u64::MAX` before any GPU
    /// task is seen (meaning: pool by GPU count).
    pub fn multi_target(&self, total: u64) -> u64 {
        let all = self.single_milli as u128 + self.multi_milli as u128;
        if all == 0 {
            return u64::MAX;
        }
        (total as u128 * self.multi_milli as u128)
            .div_ceil(all)
            .min(u64::MAX as u128 - 1) as u64
    }
}

/// The pool of each GPU node in `nodes` (id, GPUs, announced pool), the multi pool filled
/// to `multi_target` GPUs (`u64::MAX`: by GPU count) with the largest unannounced nodes
/// first (ties: the lower id).
pub fn split(
    nodes: &[(NodeId, usize, Option<GpuPool>)],
    multi_target: u64,
) -> BTreeMap<NodeId, GpuPool> {
    let mut out = BTreeMap::new();
    if multi_target == u64::MAX {
        for (id, gpus, announced) in nodes {
            if let Some(p) = GpuPool::of_node(*gpus, *announced) {
                out.insert(*id, p);
            }
        }
        return out;
    }
    let mut multi: u64 = 0;
    let mut open: Vec<(NodeId, usize)> = Vec::new();
    for (id, gpus, announced) in nodes {
        match announced {
            Some(p) => {
                if *p == GpuPool::Multi {
                    multi += *gpus as u64;
                }
                out.insert(*id, *p);
            }
            None => open.push((*id, *gpus)),
        }
    }
    open.sort_by_key(|(id, gpus)| (std::cmp::Reverse(*gpus), *id));
    for (id, gpus) in open {
        let pool = if multi < multi_target && gpus >= MULTI_GPU_THRESHOLD as usize {
            multi += gpus as u64;
            GpuPool::Multi
        } else {
            GpuPool::Single
        };
        out.insert(id, pool);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::GpuRequest;

    fn req(count: u32, milli: u32) -> ResourceRequest {
        ResourceRequest {
            cpu_milli: 1000,
            gpu: GpuRequest {
                count,
                milli,
                models: vec![],
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_multi_pool_follows_the_demand_not_the_gpu_count() {
        // Six 8-GPU nodes and four 2-GPU nodes: by count all 48 GPUs of the big nodes
        // would be multi.
        let nodes: Vec<(NodeId, usize, Option<GpuPool>)> = (1..=10)
            .map(|i| (NodeId(i), if i <= 6 { 8 } else { 2 }, None))
            .collect();
        let mut d = PoolDemand::default();
        assert_eq!(d.multi_target(56), u64::MAX, "nothing seen: by count");
        let by_count = split(&nodes, d.multi_target(56));
        assert_eq!(by_count[&NodeId(1)], GpuPool::Multi);
        assert_eq!(by_count[&NodeId(7)], GpuPool::Single);
        // 9 one-GPU tasks and one 8-GPU task: the multi pool gets ~8/17 of 56 GPUs.
        for _ in 0..9 {
            d.observe(&req(1, 1000));
        }
        d.observe(&req(8, 1000));
        d.observe(&ResourceRequest::default()); // CPU tasks teach nothing
        assert_eq!(d.multi_target(56), 27);
        let s = split(&nodes, d.multi_target(56));
        let multi: Vec<NodeId> = s
            .iter()
            .filter(|(_, p)| **p == GpuPool::Multi)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(multi, vec![NodeId(1), NodeId(2), NodeId(3), NodeId(4)]);
        // Single-GPU demand only: no multi pool at all.
        let mut only_single = PoolDemand::default();
        only_single.observe(&req(1, 500));
        let s = split(&nodes, only_single.multi_target(56));
        assert!(s.values().all(|p| *p == GpuPool::Single));
    }

    #[test]
    fn announced_pools_stay_and_count_toward_the_target() {
        let nodes = vec![
            (NodeId(1), 8, Some(GpuPool::Single)),
            (NodeId(2), 4, Some(GpuPool::Multi)),
            (NodeId(3), 8, None),
            (NodeId(4), 2, None),
        ];
        let s = split(&nodes, 4);
        assert_eq!(s[&NodeId(1)], GpuPool::Single);
        assert_eq!(s[&NodeId(2)], GpuPool::Multi);
        assert_eq!(s[&NodeId(3)], GpuPool::Single, "the target is met already");
        let s = split(&nodes, 10);
        assert_eq!(s[&NodeId(3)], GpuPool::Multi);
        assert_eq!(
            s[&NodeId(4)],
            GpuPool::Single,
            "too small for a multi-GPU task"
        );
    }
}
