//! A seeded random cluster and task stream for the placement benchmark (pure: the timing is
//! the CLI's). The shapes follow the production GPU trace (cluster-trace-gpu-v2023) — CPU-only and
//! GPU nodes of several models; tasks asking for no GPU, a share of one, or whole ones —
//! with quantised amounts so that coordinates repeat, as they do in real clusters.

use super::query::Candidates;
use hetsched_common::rng::SplitMix64;
use hetsched_common::{GpuDevice, GpuRequest, NodeId, NodeResources, ResourceRequest};

/// One step of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Place task `task` asking `requests[request]`, within `candidate_sets[c]` if given.
    Place {
        /// Task number (0-based, dense).
        task: u32,
        /// Index into [`Workload::requests`].
        request: u32,
        /// Index into [`Workload::candidate_sets`].
        candidates: Option<u32>,
    },
    /// Release task `task` (a no-op when it was not placed).
    Release {
        /// Task number.
        task: u32,
    },
}

/// A cluster and a stream over it.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Nodes with their capacities (all free at the start), ids 1..=N.
    pub nodes: Vec<(NodeId, NodeResources)>,
    /// The distinct requests the stream uses.
    pub requests: Vec<ResourceRequest>,
    /// Locality constraints some tasks carry.
    pub candidate_sets: Vec<Candidates>,
    /// The stream.
    pub events: Vec<Event>,
}

impl Workload {
    /// Number of placements in the stream.
    pub fn placements(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::Place { .. }))
            .count()
    }
}

/// (cores, GiB, GPUs, model, weight): the trace's common node shapes.
const NODE_SHAPES: [(u64, u64, u32, &str, u64); 7] = [
    (32, 256, 0, "", 15),
    (96, 512, 0, "", 8),
    (96, 384, 8, "G2", 36),
    (104, 512, 2, "T4", 25),
    (16, 120, 2, "P100", 7),
    (96, 384, 8, "V100M32", 5),
    (128, 768, 8, "A10", 4),
];

const MODELS: [&str; 5] = ["G2", "T4", "P100", "V100M32", "A10"];
const SHARES: [u32; 8] = [110, 230, 320, 460, 470, 550, 650, 810];

/// Tasks running at once per node in steady state: the stream releases a random running
/// task before each placement once this many are out, so the cluster stays busy but not
/// full (a full cluster would make every search a failing one).
pub const RUNNING_PER_NODE: usize = 6;

/// A random cluster of `nodes` nodes and a stream of `tasks` placements, from `seed`.
pub fn random(nodes: usize, tasks: usize, seed: u64) -> Workload {
    let mut rng = SplitMix64::new(seed);
    let total_weight: u64 = NODE_SHAPES.iter().map(|s| s.4).sum();
    let cluster = (0..nodes)
        .map(|i| {
            let mut pick = rng.below(total_weight);
            let shape = NODE_SHAPES
                .iter()
                .find(|s| {
                    if pick < s.4 {
                        true
                    } else {
                        pick -= s.4;
                        false
                    }
                })
                .unwrap_or(&NODE_SHAPES[0]);
            let (cores, gib, gpus, model, _) = *shape;
            let r = NodeResources {
                cpu_milli: cores * 1000,
                mem_mib: gib * 1024,
                gpus: (0..gpus)
                    .map(|_| GpuDevice {
                        model: model.into(),
                        free_milli: 1000,
                        emulated: true,
                    })
                    .collect(),
                ..NodeResources::default()
            };
            (NodeId(i as u64 + 1), r)
        })
        .collect();
    let requests: Vec<ResourceRequest> = (0..512).map(|_| random_request(&mut rng)).collect();
    let candidate_sets: Vec<Candidates> = (0..256)
        .map(|_| {
            (0..8)
                .map(|_| NodeId(rng.range(1, nodes.max(1) as u64)))
                .collect()
        })
        .collect();
    let cap = nodes * RUNNING_PER_NODE;
    let mut running: Vec<u32> = Vec::with_capacity(cap + 1);
    let mut events = Vec::with_capacity(tasks * 2);
    for task in 0..tasks as u32 {
        if running.len() >= cap {
            let i = rng.below(running.len() as u64) as usize;
            events.push(Event::Release {
                task: running.swap_remove(i),
            });
        }
        // 2% of tasks carry a locality constraint.
        let candidates = (rng.below(50) == 0).then(|| rng.below(256) as u32);
        events.push(Event::Place {
            task,
            request: rng.below(requests.len() as u64) as u32,
            candidates,
        });
        running.push(task);
    }
    Workload {
        nodes: cluster,
        requests,
        candidate_sets,
        events,
    }
}

fn random_request(rng: &mut SplitMix64) -> ResourceRequest {
    let mut gpu = match rng.below(20) {
        0..=11 => GpuRequest::none(),
        12..=16 => GpuRequest::fraction(SHARES[rng.below(SHARES.len() as u64) as usize]),
        17..=18 => GpuRequest::whole(1),
        _ => GpuRequest::whole([2, 4, 8][rng.below(3) as usize]),
    };
    // One GPU task in ten names the models it accepts.
    if !gpu.is_none() && rng.below(10) == 0 {
        gpu.models = (0..rng.range(1, 2))
            .map(|_| MODELS[rng.below(MODELS.len() as u64) as usize].to_string())
            .collect();
        gpu.models.sort();
        gpu.models.dedup();
    }
    ResourceRequest {
        cpu_milli: rng.range(1, 32) * 250,
        mem_mib: rng.range(1, 64) * 512,
        gpu,
        ..ResourceRequest::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload() {
        let a = random(50, 500, 3);
        let b = random(50, 500, 3);
        assert_eq!(a.events, b.events);
        assert_eq!(a.nodes, b.nodes);
        assert_eq!(a.placements(), 500);
        assert!(a.requests.iter().all(|r| r.validate().is_ok()));
        assert!(a.events.iter().any(|e| matches!(e, Event::Release { .. })));
    }
}
