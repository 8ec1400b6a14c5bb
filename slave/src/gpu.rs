//! GPU probes: what devices this node offers.
//!
//! [`NvmlProbe`] asks the NVIDIA driver through NVML (the library is loaded at run time, so a
//! host without a driver just reports "unavailable"); [`EmulatedProbe`] makes up `N` devices,
//! marked `emulated: true` wherever they appear. [`detect`] applies the rule of `--gpus N`:
//! no GPUs for 0; otherwise up to N real devices when NVML finds any, else N emulated ones.

use hetsched_common::{GpuDevice, GPU_MILLI_PER_DEVICE};

/// Default model name of emulated devices.
pub const EMULATED_MODEL: &str = "emulated-gpu";

/// Why a probe found nothing.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The probe's backend is not present (no driver, no library).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The backend failed while listing devices.
    #[error("failed: {0}")]
    Failed(String),
}

/// A source of GPU devices.
pub trait GpuProbe {
    /// Short name for logs.
    fn name(&self) -> &'static str;
    /// The devices, in index order, each wholly free.
    fn probe(&self) -> Result<Vec<GpuDevice>, ProbeError>;
}

/// Real devices through NVML.
#[derive(Debug, Default)]
pub struct NvmlProbe;

impl GpuProbe for NvmlProbe {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn probe(&self) -> Result<Vec<GpuDevice>, ProbeError> {
        // The library is foreign code reached through dlopen; a panic inside the wrapper must
        // not take the slave down, so it degrades to "unavailable" like a missing driver.
        std::panic::catch_unwind(|| {
            let nvml =
                nvml_wrapper::Nvml::init().map_err(|e| ProbeError::Unavailable(e.to_string()))?;
            let n = nvml
                .device_count()
                .map_err(|e| ProbeError::Failed(e.to_string()))?;
            (0..n)
                .map(|i| {
                    let d = nvml
                        .device_by_index(i)
                        .map_err(|e| ProbeError::Failed(format!("device {i}: {e}")))?;
                    let model = d
                        .name()
                        .map_err(|e| ProbeError::Failed(format!("device {i} name: {e}")))?;
                    Ok(GpuDevice {
                        model,
                        free_milli: GPU_MILLI_PER_DEVICE,
                        emulated: false,
                    })
                })
                .collect()
        })
        .unwrap_or_else(|_| Err(ProbeError::Unavailable("NVML probe panicked".into())))
    }
}

/// Made-up devices for hosts without accelerators.
#[derive(Debug, Clone)]
pub struct EmulatedProbe {
    /// How many.
    pub count: u32,
    /// Their model name.
    pub model: String,
}

impl GpuProbe for EmulatedProbe {
    fn name(&self) -> &'static str {
        "emulated"
    }

    fn probe(&self) -> Result<Vec<GpuDevice>, ProbeError> {
        Ok((0..self.count)
            .map(|_| GpuDevice {
                model: self.model.clone(),
                free_milli: GPU_MILLI_PER_DEVICE,
                emulated: true,
            })
            .collect())
    }
}

/// The devices to offer for `--gpus wanted`: none for 0; the first `wanted` real devices when
/// `real` finds any; else `wanted` emulated ones. Logs which.
pub fn detect(wanted: u32, real: &dyn GpuProbe, emulated: &dyn GpuProbe) -> Vec<GpuDevice> {
    if wanted == 0 {
        return Vec::new();
    }
    match real.probe() {
        Ok(devs) if !devs.is_empty() => {
            let offered: Vec<GpuDevice> = devs.into_iter().take(wanted as usize).collect();
            if (offered.len() as u32) < wanted {
                tracing::warn!(
                    wanted,
                    found = offered.len(),
                    "fewer real GPUs than --gpus; offering those found"
                );
            }
            tracing::info!(probe = real.name(), count = offered.len(), models = ?offered.iter().map(|d| &d.model).collect::<Vec<_>>(), "offering real GPUs");
            offered
        }
        other => {
            let why = match other {
                Ok(_) => "no devices".to_string(),
                Err(e) => e.to_string(),
            };
            let devs = emulated.probe().unwrap_or_default();
            tracing::info!(probe = real.name(), reason = %why, count = devs.len(), "no real GPUs; offering EMULATED GPUs");
            devs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<Vec<GpuDevice>, ()>);
    impl GpuProbe for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn probe(&self) -> Result<Vec<GpuDevice>, ProbeError> {
            self.0
                .clone()
                .map_err(|_| ProbeError::Unavailable("test".into()))
        }
    }

    fn emu(n: u32) -> EmulatedProbe {
        EmulatedProbe {
            count: n,
            model: "V100M16".into(),
        }
    }

    #[test]
    fn emulated_when_no_real_devices() {
        let d = detect(2, &Fixed(Err(())), &emu(2));
        assert_eq!(d.len(), 2);
        assert!(d
            .iter()
            .all(|g| g.emulated && g.model == "V100M16" && g.free_milli == 1000));
        assert_eq!(detect(2, &Fixed(Ok(vec![])), &emu(2)).len(), 2);
        assert!(detect(0, &Fixed(Err(())), &emu(0)).is_empty());
    }

    #[test]
    fn real_devices_win_and_are_capped() {
        let real = GpuDevice {
            model: "A10".into(),
            free_milli: 1000,
            emulated: false,
        };
        let d = detect(1, &Fixed(Ok(vec![real.clone(), real.clone()])), &emu(1));
        assert_eq!(d, vec![real]);
    }

    #[test]
    fn nvml_probe_never_panics() {
        // On a host without a driver this is Unavailable; with one it lists devices.
        let _ = NvmlProbe.probe();
    }
}
