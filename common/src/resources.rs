//! Resource vectors. CPU in millicores, memory in MiB, GPUs as *devices* (each with its own
//! free share in thousandths), other engines (NPU, DSP, FPGA, IP) as counts.
//!
//! A GPU request is `{count, milli, models}`: `count` devices each with at least `milli`
//! thousandths free, of one of `models` (any model when empty). So whole GPUs
//! (`{2, 1000, []}`), a shared fraction (`{1, 460, []}`) and model-constrained asks
//! (`{1, 1000, ["V100M16", "V100M32"]}`) share one shape — the production trace in
//! the Alibaba GPU trace (cluster-trace-gpu-v2023) has all three.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Capacity of one GPU device in thousandths.
pub const GPU_MILLI_PER_DEVICE: u32 = 1000;

// Limits of one task's request (docs/CONTRACT.md, "Resources"). No node holds more; a request
// above them is a mistake (a unit slip, a `1e308`), refused as bad input rather than queued
// for ever. They are generous on purpose: a large real machine stays far below each. They are
// checked at the edge ([`ResourceRequest::check_limits`]: spec files, the CLI, the leader
// before proposing), never in `validate`, which the replicated state runs in `apply`: an
// entry an older build accepted must apply the same (docs/DESIGN.md, "How old entries stay
// decodable").

/// Most cores one task may ask for.
pub const MAX_CPUS_PER_TASK: u64 = 100_000;
/// [`MAX_CPUS_PER_TASK`] in millicores (the unit of [`ResourceRequest::cpu_milli`]).
pub const MAX_CPU_MILLI_PER_TASK: u64 = MAX_CPUS_PER_TASK * 1000;
/// Most memory one task may ask for, MiB: 1 PiB.
pub const MAX_MEM_MIB_PER_TASK: u64 = 1 << 30;
/// Most GPU devices one task may ask for.
pub const MAX_GPUS_PER_TASK: u32 = 1024;
/// Most engines of one other kind (NPU, DSP, FPGA, IP) one task may ask for.
pub const MAX_ENGINES_PER_TASK: u32 = 1024;

/// Kinds of processing engine a node may hold (S0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// General-purpose cores (accounted as `cpu_milli`, never in `engines`).
    Cpu,
    /// GPUs (accounted as devices in `gpus`, never in `engines`).
    Gpu,
    /// Neural processing units.
    Npu,
    /// Digital signal processors.
    Dsp,
    /// FPGAs.
    Fpga,
    /// Image processors.
    Ip,
}

impl EngineKind {
    /// Every kind, in a fixed order.
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Cpu,
        EngineKind::Gpu,
        EngineKind::Npu,
        EngineKind::Dsp,
        EngineKind::Fpga,
        EngineKind::Ip,
    ];
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            EngineKind::Cpu => "cpu",
            EngineKind::Gpu => "gpu",
            EngineKind::Npu => "npu",
            EngineKind::Dsp => "dsp",
            EngineKind::Fpga => "fpga",
            EngineKind::Ip => "ip",
        };
        f.write_str(s)
    }
}

impl std::str::FromStr for EngineKind {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.to_string().eq_ignore_ascii_case(s))
            .ok_or_else(|| crate::Error::Invalid {
                what: "engine kind",
                why: format!("{s:?} is not one of cpu, gpu, npu, dsp, fpga, ip"),
            })
    }
}

/// One GPU device on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// Model name as the trace and NVML spell it (`V100M16`, `A10`, `NVIDIA H100 80GB HBM3`).
    pub model: String,
    /// Free thousandths of this device (1000 = wholly free).
    pub free_milli: u32,
    /// True when the device is emulated (no real GPU was detected); shown to users as such.
    #[serde(default)]
    pub emulated: bool,
}

/// What a task asks of GPUs: `count` devices, each with `milli` thousandths free.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuRequest {
    /// Number of devices (0 = no GPU).
    pub count: u32,
    /// Thousandths needed on each device (1000 = whole device).
    #[serde(default)]
    pub milli: u32,
    /// Acceptable models; empty means any.
    #[serde(default)]
    pub models: Vec<String>,
}

impl GpuRequest {
    /// No GPU.
    pub fn none() -> Self {
        Self::default()
    }

    /// `count` whole devices of any model.
    pub fn whole(count: u32) -> Self {
        Self {
            count,
            milli: GPU_MILLI_PER_DEVICE,
            models: Vec::new(),
        }
    }

    /// A fraction of one device.
    pub fn fraction(milli: u32) -> Self {
        Self {
            count: 1,
            milli,
            models: Vec::new(),
        }
    }

    /// True when the task needs no GPU.
    pub fn is_none(&self) -> bool {
        self.count == 0 || self.milli == 0
    }

    /// Total thousandths asked for.
    pub fn total_milli(&self) -> u64 {
        if self.is_none() {
            0
        } else {
            self.count as u64 * self.milli as u64
        }
    }

    /// Whether `model` is acceptable.
    pub fn accepts_model(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    /// Checks the request is well formed.
    pub fn validate(&self) -> crate::Result<()> {
        if self.milli > GPU_MILLI_PER_DEVICE {
            return Err(crate::Error::Invalid {
                what: "gpu request",
                why: format!(
                    "milli {} exceeds one device ({GPU_MILLI_PER_DEVICE})",
                    self.milli
                ),
            });
        }
        if self.count > 1 && self.milli != 0 && self.milli < GPU_MILLI_PER_DEVICE {
            return Err(crate::Error::Invalid {
                what: "gpu request",
                why: "a fraction of a GPU can only be asked of one device".into(),
            });
        }
        Ok(())
    }
}

/// A task's demand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceRequest {
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub mem_mib: u64,
    /// GPUs.
    #[serde(default)]
    pub gpu: GpuRequest,
    /// Other engines by kind (NPU, DSP, FPGA, IP).
    #[serde(default)]
    pub engines: BTreeMap<EngineKind, u32>,
}

impl ResourceRequest {
    /// Checks the request is well formed. Part of the replicated state's `apply` (through
    /// [`JobSpec::validate`](crate::JobSpec::validate)): what it accepts must never shrink.
    pub fn validate(&self) -> crate::Result<()> {
        self.gpu.validate()?;
        for k in self.engines.keys() {
            if matches!(k, EngineKind::Cpu | EngineKind::Gpu) {
                return Err(crate::Error::Invalid {
                    what: "resource request",
                    why: format!("{k} is accounted by cpu_milli / gpu, not as an engine count"),
                });
            }
        }
        Ok(())
    }

    /// Checks the request stays within the per-task limits ([`MAX_CPU_MILLI_PER_TASK`],
    /// [`MAX_MEM_MIB_PER_TASK`], [`MAX_GPUS_PER_TASK`], [`MAX_ENGINES_PER_TASK`]). At the
    /// edge only (spec files, the CLI, the leader before proposing), never in `apply`.
    pub fn check_limits(&self) -> crate::Result<()> {
        let bad = |why: String| crate::Error::Invalid {
            what: "resource request",
            why,
        };
        if self.cpu_milli > MAX_CPU_MILLI_PER_TASK {
            return Err(bad(format!(
                "cpus {} is above the limit of {MAX_CPUS_PER_TASK} cores per task",
                self.cpu_milli as f64 / 1000.0
            )));
        }
        if self.mem_mib > MAX_MEM_MIB_PER_TASK {
            return Err(bad(format!(
                "mem {} MiB is above the limit of {MAX_MEM_MIB_PER_TASK} MiB (1 PiB) per task",
                self.mem_mib
            )));
        }
        if self.gpu.count > MAX_GPUS_PER_TASK {
            return Err(bad(format!(
                "gpus {} is above the limit of {MAX_GPUS_PER_TASK} per task",
                self.gpu.count
            )));
        }
        for (k, n) in &self.engines {
            if *n > MAX_ENGINES_PER_TASK {
                return Err(bad(format!(
                    "{k} {n} is above the limit of {MAX_ENGINES_PER_TASK} per task"
                )));
            }
        }
        Ok(())
    }
}

/// A node's resources: used both for capacity and for what is currently free.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeResources {
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub mem_mib: u64,
    /// GPU devices, in device-index order.
    #[serde(default)]
    pub gpus: Vec<GpuDevice>,
    /// Other engines by kind.
    #[serde(default)]
    pub engines: BTreeMap<EngineKind, u32>,
}

/// Which devices (by index) and how many thousandths of each an assignment holds.
pub type GpuAlloc = Vec<(u32, u32)>;

impl NodeResources {
    /// Whether `req` fits in these (free) resources, GPUs device by device.
    pub fn fits(&self, req: &ResourceRequest) -> bool {
        self.cpu_milli >= req.cpu_milli
            && self.mem_mib >= req.mem_mib
            && req
                .engines
                .iter()
                .all(|(k, n)| self.engines.get(k).copied().unwrap_or(0) >= *n)
            && allocate_gpus(&self.gpus, &req.gpu).is_some()
    }

    /// Takes `req` out of these free resources; returns the GPU devices used, or `None` (and
    /// changes nothing) when it does not fit.
    pub fn take(&mut self, req: &ResourceRequest) -> Option<GpuAlloc> {
        if !self.fits(req) {
            return None;
        }
        let alloc = allocate_gpus(&self.gpus, &req.gpu)?;
        self.cpu_milli -= req.cpu_milli;
        self.mem_mib -= req.mem_mib;
        for (k, n) in &req.engines {
            if let Some(have) = self.engines.get_mut(k) {
                *have -= n;
            }
        }
        for (dev, milli) in &alloc {
            if let Some(d) = self.gpus.get_mut(*dev as usize) {
                d.free_milli -= milli;
            }
        }
        Some(alloc)
    }

    /// Gives back what [`take`](Self::take) took, capped at `capacity`.
    pub fn give_back(&mut self, req: &ResourceRequest, alloc: &GpuAlloc, capacity: &NodeResources) {
        self.cpu_milli = (self.cpu_milli + req.cpu_milli).min(capacity.cpu_milli);
        self.mem_mib = (self.mem_mib + req.mem_mib).min(capacity.mem_mib);
        for (k, n) in &req.engines {
            let cap = capacity.engines.get(k).copied().unwrap_or(0);
            let e = self.engines.entry(*k).or_insert(0);
            *e = (*e + n).min(cap);
        }
        for (dev, milli) in alloc {
            let i = *dev as usize;
            if let (Some(d), Some(c)) = (self.gpus.get_mut(i), capacity.gpus.get(i)) {
                d.free_milli = (d.free_milli + milli).min(c.free_milli);
            }
        }
    }

    /// Number of GPU devices.
    pub fn gpu_count(&self) -> u32 {
        self.gpus.len() as u32
    }

    /// Sum of free GPU thousandths.
    pub fn gpu_free_milli(&self) -> u64 {
        self.gpus.iter().map(|d| d.free_milli as u64).sum()
    }
}

/// Chooses devices for a GPU request, deterministically: whole-device asks take the
/// lowest-indexed wholly free devices; a fraction takes the device with the *least* free
/// share that still fits (best fit, ties to the lowest index), which keeps whole devices free
/// for whole-device asks — the fragmentation the trace's paper measures. Returns `None` when
/// the request cannot be met; an empty allocation for a request of no GPU.
pub fn allocate_gpus(devices: &[GpuDevice], req: &GpuRequest) -> Option<GpuAlloc> {
    if req.is_none() {
        return Some(Vec::new());
    }
    let usable = |d: &GpuDevice| d.free_milli >= req.milli && req.accepts_model(&d.model);
    if req.count == 1 && req.milli < GPU_MILLI_PER_DEVICE {
        let (i, _) = devices
            .iter()
            .enumerate()
            .filter(|(_, d)| usable(d))
            .min_by_key(|(i, d)| (d.free_milli, *i))?;
        return Some(vec![(i as u32, req.milli)]);
    }
    let picked: GpuAlloc = devices
        .iter()
        .enumerate()
        .filter(|(_, d)| usable(d))
        .take(req.count as usize)
        .map(|(i, _)| (i as u32, req.milli))
        .collect();
    (picked.len() == req.count as usize).then_some(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(free: &[u32]) -> Vec<GpuDevice> {
        free.iter()
            .map(|f| GpuDevice {
                model: "V100M16".into(),
                free_milli: *f,
                emulated: true,
            })
            .collect()
    }

    #[test]
    fn fraction_goes_to_tightest_device() {
        let d = gpus(&[1000, 500, 300]);
        assert_eq!(
            allocate_gpus(&d, &GpuRequest::fraction(300)),
            Some(vec![(2, 300)])
        );
        assert_eq!(
            allocate_gpus(&d, &GpuRequest::fraction(400)),
            Some(vec![(1, 400)])
        );
        assert_eq!(
            allocate_gpus(&d, &GpuRequest::fraction(600)),
            Some(vec![(0, 600)])
        );
    }

    #[test]
    fn whole_devices_need_whole_free_devices() {
        let d = gpus(&[1000, 999, 1000]);
        assert_eq!(
            allocate_gpus(&d, &GpuRequest::whole(2)),
            Some(vec![(0, 1000), (2, 1000)])
        );
        assert_eq!(allocate_gpus(&d, &GpuRequest::whole(3)), None);
    }

    #[test]
    fn model_constraint_filters_devices() {
        let mut d = gpus(&[1000, 1000]);
        d[1].model = "A10".into();
        let req = GpuRequest {
            count: 1,
            milli: 1000,
            models: vec!["A10".into()],
        };
        assert_eq!(allocate_gpus(&d, &req), Some(vec![(1, 1000)]));
    }

    #[test]
    fn take_and_give_back_round_trip() {
        let cap = NodeResources {
            cpu_milli: 4000,
            mem_mib: 8192,
            gpus: gpus(&[1000, 1000]),
            engines: BTreeMap::from([(EngineKind::Npu, 2)]),
        };
        let mut free = cap.clone();
        let req = ResourceRequest {
            cpu_milli: 1500,
            mem_mib: 1024,
            gpu: GpuRequest::fraction(250),
            engines: BTreeMap::from([(EngineKind::Npu, 1)]),
        };
        let alloc = free.take(&req).expect("fits");
        assert_eq!(free.cpu_milli, 2500);
        assert_eq!(free.gpu_free_milli(), 1750);
        assert_eq!(free.engines[&EngineKind::Npu], 1);
        free.give_back(&req, &alloc, &cap);
        assert_eq!(free, cap);
    }

    #[test]
    fn take_of_misfit_changes_nothing() {
        let cap = NodeResources {
            cpu_milli: 1000,
            mem_mib: 100,
            ..Default::default()
        };
        let mut free = cap.clone();
        let req = ResourceRequest {
            cpu_milli: 2000,
            mem_mib: 1,
            ..Default::default()
        };
        assert!(free.take(&req).is_none());
        assert_eq!(free, cap);
    }

    #[test]
    fn fraction_of_many_devices_is_rejected() {
        let r = GpuRequest {
            count: 2,
            milli: 500,
            models: vec![],
        };
        assert!(r.validate().is_err());
        assert!(GpuRequest::fraction(1001).validate().is_err());
    }

    #[test]
    fn requests_above_the_per_task_limits_are_refused() {
        let at_limits = ResourceRequest {
            cpu_milli: MAX_CPU_MILLI_PER_TASK,
            mem_mib: MAX_MEM_MIB_PER_TASK,
            gpu: GpuRequest::whole(MAX_GPUS_PER_TASK),
            engines: BTreeMap::from([(EngineKind::Npu, MAX_ENGINES_PER_TASK)]),
        };
        assert!(at_limits.check_limits().is_ok());
        let over = |f: &dyn Fn(&mut ResourceRequest)| {
            let mut r = at_limits.clone();
            f(&mut r);
            // Well formed all the same: what `apply` checks accepts it, as it always did.
            assert!(r.validate().is_ok());
            r.check_limits().expect_err("over a limit").to_string()
        };
        let e = over(&|r| r.cpu_milli = u64::MAX);
        assert!(e.contains("cpus") && e.contains("100000 cores"), "{e}");
        let e = over(&|r| r.mem_mib = MAX_MEM_MIB_PER_TASK + 1);
        assert!(e.contains("mem 1073741825 MiB"), "{e}");
        let e = over(&|r| r.gpu = GpuRequest::whole(MAX_GPUS_PER_TASK + 1));
        assert!(e.contains("gpus 1025"), "{e}");
        let e = over(&|r| {
            r.engines.insert(EngineKind::Dsp, MAX_ENGINES_PER_TASK + 1);
        });
        assert!(e.contains("dsp 1025"), "{e}");
    }
}
