//! Whether any registered node could ever hold one task of a request: the leader's advisory
//! check at submit (docs/CONTRACT.md, "Resources"), so that `--cpus 1000` on a cluster of
//! 2-core nodes is refused with why instead of waiting for ever.
//!
//! "Ever" means on a node's whole capacity, with nothing else running: free resources come
//! and go, capacity does not. Every registered node counts, down and draining ones too (they
//! may come back), whatever its partitions. With no node registered at all nothing is
//! refused: the cluster is still forming. The check is pure and reads node capacities only;
//! the leader runs it before proposing, never in `apply`, whose outcome it must not change.

use hetsched_common::{
    allocate_gpus, EngineKind, GpuRequest, NodeResources, ResourceRequest, GPU_MILLI_PER_DEVICE,
};
use std::fmt;

/// Why no registered node could hold a request: the first dimension no node has enough of,
/// in the order cpus, mem, gpu model, gpus, other engines; else that no node has them all at
/// once. Shown as `cpus 1000: no node has more than 2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unplaceable {
    /// More cores than any node has.
    Cpus {
        /// Asked, millicores.
        asked_milli: u64,
        /// Largest node capacity, millicores.
        most_milli: u64,
    },
    /// More memory than any node has.
    Mem {
        /// Asked, MiB.
        asked_mib: u64,
        /// Largest node capacity, MiB.
        most_mib: u64,
    },
    /// No node has a GPU of an accepted model.
    GpuModel {
        /// The accepted models.
        models: Vec<String>,
        /// The models the registered nodes have (sorted, distinct).
        seen: Vec<String>,
    },
    /// More GPU than any node has (of the accepted models).
    Gpus {
        /// The GPU request.
        asked: GpuRequest,
        /// For whole devices: the most usable devices on one node; for a fraction: the
        /// largest share of one device, in thousandths.
        most: u64,
    },
    /// More engines of a kind than any node has.
    Engine {
        /// The kind.
        kind: EngineKind,
        /// Asked.
        asked: u32,
        /// Largest node count of the kind.
        most: u32,
    },
    /// Each part fits some node, but no node has them all.
    Together(ResourceRequest),
}

/// Cores as users write them: `2`, `0.5`.
fn cores(milli: u64) -> String {
    format!("{}", milli as f64 / 1000.0)
}

/// A GPU amount as users write it: whole devices, or a fraction of one.
fn gpus_shown(milli: u32, count: u64) -> String {
    if milli >= GPU_MILLI_PER_DEVICE {
        count.to_string()
    } else {
        format!("{}", f64::from(milli) / f64::from(GPU_MILLI_PER_DEVICE))
    }
}

impl fmt::Display for Unplaceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unplaceable::Cpus {
                asked_milli,
                most_milli,
            } => write!(
                f,
                "cpus {}: no node has more than {}",
                cores(*asked_milli),
                cores(*most_milli)
            ),
            Unplaceable::Mem {
                asked_mib,
                most_mib,
            } => write!(f, "mem {asked_mib}: no node has more than {most_mib}"),
            Unplaceable::GpuModel { models, seen } => {
                write!(f, "gpu model {}: no node has one", models.join(" or "))?;
                if seen.is_empty() {
                    write!(f, " (no node has a GPU)")
                } else {
                    write!(f, " (nodes have {})", seen.join(", "))
                }
            }
            Unplaceable::Gpus { asked, most } => {
                let whole = asked.milli >= GPU_MILLI_PER_DEVICE;
                let most = if whole {
                    most.to_string()
                } else {
                    format!("{}", *most as f64 / f64::from(GPU_MILLI_PER_DEVICE))
                };
                write!(
                    f,
                    "gpus {}: no node has more than {most}",
                    gpus_shown(asked.milli, u64::from(asked.count))
                )?;
                if !asked.models.is_empty() {
                    write!(f, " of model {}", asked.models.join(" or "))?;
                }
                Ok(())
            }
            Unplaceable::Engine { kind, asked, most } => {
                write!(f, "{kind} {asked}: no node has more than {most}")
            }
            Unplaceable::Together(r) => {
                let mut parts = vec![
                    format!("cpus {}", cores(r.cpu_milli)),
                    format!("mem {}", r.mem_mib),
                ];
                if !r.gpu.is_none() {
                    parts.push(format!(
                        "gpus {}",
                        gpus_shown(r.gpu.milli, u64::from(r.gpu.count))
                    ));
                }
                parts.extend(r.engines.iter().map(|(k, n)| format!("{k} {n}")));
                write!(f, "{}: no node has all of them at once", parts.join(", "))
            }
        }
    }
}

/// Why none of `capacities` (every registered node's) could ever hold one task asking
/// `req`, or `None` when one could, or when there is no node at all.
pub fn unplaceable<'a>(
    req: &ResourceRequest,
    capacities: impl IntoIterator<Item = &'a NodeResources>,
) -> Option<Unplaceable> {
    let caps: Vec<&NodeResources> = capacities.into_iter().collect();
    if caps.is_empty() || caps.iter().any(|c| c.fits(req)) {
        return None;
    }
    let largest = |f: &dyn Fn(&NodeResources) -> u64| caps.iter().map(|c| f(c)).max().unwrap_or(0);
    let most_milli = largest(&|c| c.cpu_milli);
    if req.cpu_milli > most_milli {
        return Some(Unplaceable::Cpus {
            asked_milli: req.cpu_milli,
            most_milli,
        });
    }
    let most_mib = largest(&|c| c.mem_mib);
    if req.mem_mib > most_mib {
        return Some(Unplaceable::Mem {
            asked_mib: req.mem_mib,
            most_mib,
        });
    }
    let gpu = &req.gpu;
    if !gpu.is_none() {
        let of_model = |c: &NodeResources| {
            c.gpus
                .iter()
                .filter(|d| gpu.accepts_model(&d.model))
                .map(|d| d.free_milli)
                .collect::<Vec<u32>>()
        };
        if !gpu.models.is_empty() && caps.iter().all(|c| of_model(c).is_empty()) {
            let mut seen: Vec<String> = caps
                .iter()
                .flat_map(|c| c.gpus.iter().map(|d| d.model.clone()))
                .collect();
            seen.sort();
            seen.dedup();
            return Some(Unplaceable::GpuModel {
                models: gpu.models.clone(),
                seen,
            });
        }
        let fits_somewhere = caps.iter().any(|c| allocate_gpus(&c.gpus, gpu).is_some());
        if !fits_somewhere {
            let most = if gpu.milli >= GPU_MILLI_PER_DEVICE {
                largest(&|c| of_model(c).into_iter().filter(|m| *m >= gpu.milli).count() as u64)
            } else {
                largest(&|c| of_model(c).into_iter().max().map_or(0, u64::from))
            };
            return Some(Unplaceable::Gpus {
                asked: gpu.clone(),
                most,
            });
        }
    }
    for (kind, asked) in &req.engines {
        let most = caps
            .iter()
            .map(|c| c.engines.get(kind).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        if *asked > most {
            return Some(Unplaceable::Engine {
                kind: *kind,
                asked: *asked,
                most,
            });
        }
    }
    Some(Unplaceable::Together(req.clone()))
}

#[cfg(test)]
#[path = "placeable_tests.rs"]
mod tests;
