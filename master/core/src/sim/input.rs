//! The simulator's inputs: emulated nodes and tasks, and the tasks of a trace's pods in a
//! chosen order (kept apart from the driver in `mod.rs`).

use super::SimError;
use crate::sched::index::trace::TracePod;
use hetsched_common::rng::SplitMix64;
use hetsched_common::{NodeResources, ResourceRequest};

/// Orders of the pod list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// By (creation_time, name).
    Creation,
    /// As in the file.
    File,
    /// A permutation seeded by `--seed` (FGD samples its workloads so).
    Shuffle,
}

impl std::str::FromStr for Order {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "creation" => Ok(Order::Creation),
            "file" => Ok(Order::File),
            "shuffle" => Ok(Order::Shuffle),
            _ => Err(SimError::Invalid(format!(
                "unknown order {s:?}: expected creation, file or shuffle"
            ))),
        }
    }
}

/// The pods' indexes in `order`.
pub fn ordered(pods: &[TracePod], order: Order, seed: u64) -> Vec<usize> {
    match order {
        Order::Creation => crate::sched::index::trace::arrival_order(pods),
        Order::File => (0..pods.len()).collect(),
        Order::Shuffle => {
            let mut v: Vec<usize> = (0..pods.len()).collect();
            let mut rng = SplitMix64::new(seed);
            for i in (1..v.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                v.swap(i, j);
            }
            v
        }
    }
}

/// One emulated node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNode {
    /// Name.
    pub name: String,
    /// Capacity (all free at the start).
    pub resources: NodeResources,
    /// S1 partitions it serves (empty: `default`).
    pub partitions: Vec<String>,
}

impl From<crate::sched::index::trace::TraceNode> for SimNode {
    /// A node of a trace's node list, serving the `default` partition.
    fn from(n: crate::sched::index::trace::TraceNode) -> Self {
        Self {
            name: n.name,
            resources: n.resources,
            partitions: Vec::new(),
        }
    }
}

/// One task to simulate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTask {
    /// Name.
    pub name: String,
    /// Submitting user.
    pub user: String,
    /// What it asks.
    pub request: ResourceRequest,
    /// Arrival, ms of virtual time (timed mode).
    pub arrival_ms: u64,
    /// Run time from its actual start; `None`: until the end of the trace.
    pub duration_ms: Option<u64>,
    /// S1 partition (empty: `default`).
    pub partition: String,
}

/// Tasks from trace pods in `order`: arrival times divided by `time_scale`, durations
/// (`deletion − scheduled`, else `deletion − creation`) kept; users `user-0..N` round-robin
/// when `users > 1`, else one user `trace`.
pub fn tasks_from_trace(
    pods: &[TracePod],
    order: &[usize],
    time_scale: f64,
    users: u32,
) -> Vec<SimTask> {
    let scale = if time_scale.is_finite() && time_scale > 0.0 {
        time_scale
    } else {
        1.0
    };
    order
        .iter()
        .enumerate()
        .filter_map(|(rank, i)| pods.get(*i).map(|p| (rank, p)))
        .map(|(rank, p)| {
            let start = p.scheduled.unwrap_or(p.created).max(p.created);
            SimTask {
                name: p.name.clone(),
                user: if users > 1 {
                    format!("user-{}", rank as u64 % users as u64)
                } else {
                    "trace".into()
                },
                request: p.request.clone(),
                arrival_ms: (p.created as f64 * 1000.0 / scale).round() as u64,
                duration_ms: p.deleted.map(|d| d.saturating_sub(start) * 1000),
                partition: String::new(),
            }
        })
        .collect()
}
