//! `--scenario FILE`: what the trace cannot express — node shapes (GPU models, engines) and
//! arrivals with time, user, resources, duration and kind. The CLI parses the TOML into
//! [`Scenario`] (serde) and this module turns it into the simulator's nodes and tasks.
//!
//! ```toml
//! [[nodes]]
//! name = "gpu"          # numbered gpu-0, gpu-1, … when count > 1
//! count = 4
//! cpus = 32.0
//! mem = 131072          # MiB
//! gpus = 4
//! gpu_model = "A100"
//! engines = { npu = 2 }
//!
//! [[arrivals]]
//! at_s = 0.0            # first arrival, seconds of virtual time
//! count = 10            # repeated every `every_s`
//! every_s = 5.0
//! user = "alice"
//! kind = "training"     # a label, kept in the task name
//! cpus = 4.0
//! mem = 8192
//! gpus = 0.5            # a fraction of one GPU, or whole GPUs
//! gpu_models = ["A100"]
//! duration_s = 600.0    # omitted: runs to the end
//! ```
//!
//!
//! S1 too: nodes may serve `partitions = ["gpu"]`, arrivals name a `partition = "gpu"`, and
//! `priorities` holds a priority configuration in the `config apply` format (TOML text),
//! applied before the first arrival, so `sim --compare P,P-nopreempt` shows what
//! preemption does:
//!
//! ```toml
//! priorities = """
//! base_priority = 0
//! [[users]]
//! name = "prod"
//! priority = 100
//! """
//! ```

use super::{SimError, SimNode, SimTask};
use hetsched_common::{EngineKind, GpuDevice, GpuRequest, NodeResources, ResourceRequest};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A scenario file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Node groups.
    #[serde(default)]
    pub nodes: Vec<NodeGroup>,
    /// Arrival groups.
    #[serde(default)]
    pub arrivals: Vec<ArrivalGroup>,
    /// S1 priority configuration, `config apply` format (TOML text).
    #[serde(default)]
    pub priorities: Option<String>,
}

/// `count` identical nodes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// Name (numbered when `count` > 1).
    pub name: String,
    /// How many.
    #[serde(default = "one")]
    pub count: u32,
    /// Cores.
    pub cpus: f64,
    /// Memory, MiB.
    pub mem: u64,
    /// GPU devices.
    #[serde(default)]
    pub gpus: u32,
    /// Their model.
    #[serde(default)]
    pub gpu_model: String,
    /// Other engines by kind (`npu`, `dsp`, `fpga`, `ip`).
    #[serde(default)]
    pub engines: BTreeMap<String, u32>,
    /// S1 partitions served (none: `default`).
    #[serde(default)]
    pub partitions: Vec<String>,
}

/// `count` identical tasks arriving `every_s` apart from `at_s`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalGroup {
    /// First arrival, seconds.
    #[serde(default)]
    pub at_s: f64,
    /// How many.
    #[serde(default = "one")]
    pub count: u32,
    /// Spacing, seconds.
    #[serde(default)]
    pub every_s: f64,
    /// Submitting user.
    #[serde(default = "default_user")]
    pub user: String,
    /// A label (e.g. `training`, `inference`, `batch`).
    #[serde(default)]
    pub kind: String,
    /// Cores.
    pub cpus: f64,
    /// Memory, MiB.
    #[serde(default)]
    pub mem: u64,
    /// GPUs: a fraction of one or whole devices.
    #[serde(default)]
    pub gpus: f64,
    /// Accepted GPU models; empty: any.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// Other engines by kind.
    #[serde(default)]
    pub engines: BTreeMap<String, u32>,
    /// Run time; omitted: until the end.
    pub duration_s: Option<f64>,
    /// S1 partition (omitted: `default`).
    #[serde(default)]
    pub partition: String,
}

fn one() -> u32 {
    1
}

fn default_user() -> String {
    "default".into()
}

fn cores(what: &str, cpus: f64) -> Result<u64, SimError> {
    if !(cpus.is_finite() && cpus >= 0.0) {
        return Err(SimError::Invalid(format!(
            "{what}: cpus {cpus} is not a non-negative number"
        )));
    }
    Ok((cpus * 1000.0).round() as u64)
}

fn seconds(what: &str, field: &str, s: f64) -> Result<u64, SimError> {
    if !(s.is_finite() && s >= 0.0) {
        return Err(SimError::Invalid(format!(
            "{what}: {field} {s} is not a non-negative number of seconds"
        )));
    }
    Ok((s * 1000.0).round() as u64)
}

fn engines(what: &str, m: &BTreeMap<String, u32>) -> Result<BTreeMap<EngineKind, u32>, SimError> {
    m.iter()
        .map(|(k, n)| {
            let kind: EngineKind = k
                .parse()
                .map_err(|e| SimError::Invalid(format!("{what}: {e}")))?;
            if matches!(kind, EngineKind::Cpu | EngineKind::Gpu) {
                return Err(SimError::Invalid(format!(
                    "{what}: {k} is given by cpus / gpus, not as an engine"
                )));
            }
            Ok((kind, *n))
        })
        .collect()
}

fn gpu_request(what: &str, gpus: f64, models: &[String]) -> Result<GpuRequest, SimError> {
    if !(gpus.is_finite() && gpus >= 0.0) {
        return Err(SimError::Invalid(format!(
            "{what}: gpus {gpus} is not a non-negative number"
        )));
    }
    let mut g = if gpus == 0.0 {
        GpuRequest::none()
    } else if gpus < 1.0 {
        GpuRequest::fraction((gpus * 1000.0).round().max(1.0) as u32)
    } else if gpus.fract() == 0.0 {
        GpuRequest::whole(gpus as u32)
    } else {
        return Err(SimError::Invalid(format!(
            "{what}: gpus {gpus}: a fraction of one GPU or a whole number"
        )));
    };
    g.models = models.to_vec();
    Ok(g)
}

impl Scenario {
    /// The run's setup: the priority configuration, parsed.
    pub fn setup(&self) -> Result<super::Setup, SimError> {
        let priorities = self
            .priorities
            .as_deref()
            .map(hetsched_common::priority::parse_priority_toml)
            .transpose()
            .map_err(|e| SimError::Invalid(format!("priorities: {e}")))?;
        Ok(super::Setup {
            priorities,
            ..Default::default()
        })
    }

    /// The nodes and the tasks (in arrival order; ties in file order).
    pub fn build(&self) -> Result<(Vec<SimNode>, Vec<SimTask>), SimError> {
        let mut nodes = Vec::new();
        for (i, g) in self.nodes.iter().enumerate() {
            let what = format!("nodes[{i}] ({})", g.name);
            if g.gpus > 0 && g.gpu_model.is_empty() {
                return Err(SimError::Invalid(format!("{what}: gpus without gpu_model")));
            }
            let resources = NodeResources {
                cpu_milli: cores(&what, g.cpus)?,
                mem_mib: g.mem,
                gpus: (0..g.gpus)
                    .map(|_| GpuDevice {
                        model: g.gpu_model.clone(),
                        free_milli: hetsched_common::GPU_MILLI_PER_DEVICE,
                        emulated: true,
                    })
                    .collect(),
                engines: engines(&what, &g.engines)?,
            };
            for k in 0..g.count {
                nodes.push(SimNode {
                    name: if g.count > 1 {
                        format!("{}-{k}", g.name)
                    } else {
                        g.name.clone()
                    },
                    resources: resources.clone(),
                    partitions: g.partitions.clone(),
                });
            }
        }
        let mut tasks = Vec::new();
        for (i, a) in self.arrivals.iter().enumerate() {
            let what = format!("arrivals[{i}]");
            let request = ResourceRequest {
                cpu_milli: cores(&what, a.cpus)?,
                mem_mib: a.mem,
                gpu: gpu_request(&what, a.gpus, &a.gpu_models)?,
                engines: engines(&what, &a.engines)?,
            };
            request
                .validate()
                .map_err(|e| SimError::Invalid(format!("{what}: {e}")))?;
            let (at, every) = (
                seconds(&what, "at_s", a.at_s)?,
                seconds(&what, "every_s", a.every_s)?,
            );
            let duration = a
                .duration_s
                .map(|d| seconds(&what, "duration_s", d))
                .transpose()?;
            let label = if a.kind.is_empty() { "task" } else { &a.kind };
            for k in 0..a.count as u64 {
                tasks.push(SimTask {
                    name: format!("{label}-{i}-{k}"),
                    user: a.user.clone(),
                    request: request.clone(),
                    arrival_ms: at + k * every,
                    duration_ms: duration,
                    partition: a.partition.clone(),
                });
            }
        }
        // Stable: equal times keep file order.
        tasks.sort_by_key(|t| t.arrival_ms);
        Ok((nodes, tasks))
    }
}
