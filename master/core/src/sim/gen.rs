//! Seeded trace variants after the FGD paper's recipes (§6: more GPU sharing, more multi-GPU
//! pods, more GPU-model constraints, more CPU-only pods): each output pod is a copy of a pod
//! of the base list, drawn so that the chosen kind makes up `level` % of the pods it is
//! measured against, the rest keeping the base proportions. Pure: text in, text out.

use super::SimError;
use crate::sched::index::trace::TracePod;
use hetsched_common::rng::SplitMix64;

/// What a variant changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantKind {
    /// `gpushare`: `level` % of the GPU pods ask a fraction of one device.
    GpuShare,
    /// `multigpu`: `level` % of the GPU pods ask two or more devices.
    MultiGpu,
    /// `gpuspec`: `level` % of the GPU pods accept one GPU model only.
    GpuSpec,
    /// `cpu`: `level` % of all pods ask no GPU.
    Cpu,
}

impl std::str::FromStr for VariantKind {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "gpushare" => Ok(Self::GpuShare),
            "multigpu" => Ok(Self::MultiGpu),
            "gpuspec" => Ok(Self::GpuSpec),
            "cpu" => Ok(Self::Cpu),
            _ => Err(SimError::Invalid(format!(
                "unknown kind {s:?}: expected gpushare, multigpu, gpuspec or cpu"
            ))),
        }
    }
}

/// Node shapes of a cluster as `gpuspec` sees them: (model, devices, CPU, memory) per
/// distinct shape, with how many devices of that model the cluster has in all.
#[derive(Clone, Debug, Default)]
pub struct ModelShapes {
    shapes: Vec<(String, u32, u64, u64)>,
    devices: std::collections::BTreeMap<String, u64>,
}

impl ModelShapes {
    /// The shapes of `nodes` (capacities).
    pub fn of(nodes: &[hetsched_common::NodeResources]) -> Self {
        let mut m = Self::default();
        for n in nodes {
            let Some(model) = n.gpus.first().map(|d| d.model.clone()) else {
                continue;
            };
            *m.devices.entry(model.clone()).or_insert(0) += n.gpus.len() as u64;
            let shape = (model, n.gpus.len() as u32, n.cpu_milli, n.mem_mib);
            if !m.shapes.contains(&shape) {
                m.shapes.push(shape);
            }
        }
        m
    }

    /// Pins a GPU pod to one model (`in_kind`) drawn in proportion to the devices of the
    /// models with a node able to hold it, or to none.
    fn pin(&self, p: &mut TracePod, in_kind: bool, rng: &mut SplitMix64) {
        p.request.gpu.models.clear();
        let fitting = self.for_pod(p);
        let total: u64 = fitting.iter().map(|m| m.1).sum();
        if !in_kind || total == 0 {
            return;
        }
        let mut w = rng.below(total);
        let m = fitting
            .iter()
            .find(|m| {
                if w < m.1 {
                    true
                } else {
                    w -= m.1;
                    false
                }
            })
            .map(|m| m.0.to_string())
            .unwrap_or_default();
        p.request.gpu.models = vec![m];
    }

    /// Models with a node that could hold `pod` alone, weighted by their devices.
    fn for_pod(&self, pod: &TracePod) -> Vec<(&str, u64)> {
        let r = &pod.request;
        self.devices
            .iter()
            .filter(|(model, _)| {
                self.shapes.iter().any(|(m, n, cpu, mem)| {
                    m == *model && *n >= r.gpu.count && *cpu >= r.cpu_milli && *mem >= r.mem_mib
                })
            })
            .map(|(m, n)| (m.as_str(), *n))
            .collect()
    }
}

/// `count` pods drawn from `base` for `kind` at `level` % (0–100), seeded. A `gpuspec` pod
/// is pinned to a model of `models` that has a node able to hold it, drawn in proportion to
/// the model's devices.
pub fn variant(
    base: &[TracePod],
    kind: VariantKind,
    level: u32,
    count: usize,
    seed: u64,
    models: &ModelShapes,
) -> Result<Vec<TracePod>, SimError> {
    if level > 100 {
        return Err(SimError::Invalid(format!(
            "--level {level}: a percentage, 0 to 100"
        )));
    }
    let is_gpu = |p: &&TracePod| !p.request.gpu.is_none();
    let cpu: Vec<&TracePod> = base.iter().filter(|p| p.request.gpu.is_none()).collect();
    let gpu: Vec<&TracePod> = base.iter().filter(is_gpu).collect();
    let (chosen, other): (Vec<&TracePod>, Vec<&TracePod>) = match kind {
        VariantKind::Cpu => (cpu.clone(), gpu.clone()),
        VariantKind::GpuShare => gpu
            .iter()
            .partition(|p| p.request.gpu.count == 1 && p.request.gpu.milli < 1000),
        VariantKind::MultiGpu => gpu.iter().partition(|p| p.request.gpu.count >= 2),
        VariantKind::GpuSpec => (gpu.clone(), gpu.clone()),
    };
    if chosen.is_empty() && level > 0 {
        return Err(SimError::Invalid(
            "the base pod list has no pod of that kind to draw from".into(),
        ));
    }
    if kind == VariantKind::GpuSpec && models.devices.is_empty() && level > 0 {
        return Err(SimError::Invalid("no GPU models to pin pods to".into()));
    }
    let mut rng = SplitMix64::new(seed);
    let base_cpu_share = cpu.len() as f64 / base.len().max(1) as f64;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        // Which population this pod is measured against: all pods for `cpu`, the GPU pods
        // (with the base CPU-only share kept beside them) for the others.
        let pick = |rng: &mut SplitMix64, v: &[&TracePod]| -> Option<TracePod> {
            (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
        };
        let in_kind = rng.below(100) < level as u64;
        let mut pod = match kind {
            VariantKind::Cpu => {
                if in_kind {
                    pick(&mut rng, &chosen)
                } else {
                    pick(&mut rng, &other)
                }
            }
            _ => {
                if rng.unit() < base_cpu_share {
                    pick(&mut rng, &cpu)
                } else if in_kind || other.is_empty() {
                    pick(&mut rng, &chosen)
                } else {
                    pick(&mut rng, &other)
                }
            }
        };
        if let Some(p) = &mut pod {
            p.name = format!("gen-pod-{i:05}");
            if kind == VariantKind::GpuSpec && !p.request.gpu.is_none() {
                models.pin(p, in_kind, &mut rng);
            }
            p.created = 0;
            p.deleted = None;
            p.scheduled = None;
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// A pod list without time columns (replayed in file order, arrival-only).
pub fn to_csv(pods: &[TracePod]) -> String {
    let mut s = String::from("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n");
    for p in pods {
        let g = &p.request.gpu;
        let (n, m) = if g.is_none() {
            (0, 0)
        } else {
            (g.count, g.milli)
        };
        s.push_str(&format!(
            "{},{},{},{},{},{}\n",
            p.name,
            p.request.cpu_milli,
            p.request.mem_mib,
            n,
            m,
            g.models.join("|")
        ));
    }
    s
}
