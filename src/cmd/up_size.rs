//! `hetsched up`'s slave sizing: the host's CPUs, memory and real GPUs split across
//! `--slaves` (pure: [`size`]), unless `--slave-cpus` / `--slave-mem` say otherwise.
//!
//! The rule (also in `up --help`): each slave gets `max(2, host CPUs / slaves)` CPUs and
//! `max(2048, ¾ of host memory / slaves)` MiB (a quarter stays with the masters and the
//! system; the floors are what the demo needs, shared on a small host); the last slave gets every real GPU of the host (a slave offers the first N
//! devices NVML finds, so two slaves cannot split them), or, on a host without GPUs, two
//! emulated ones, and is the demo's GPU-engine slave.

/// What the host has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// CPUs (available parallelism).
    pub cpus: u32,
    /// Memory, MiB (MemTotal).
    pub mem_mib: u64,
    /// Real GPUs (NVML).
    pub gpus: u32,
}

/// One slave's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// CPUs declared.
    pub cpus: u32,
    /// Memory declared, MiB.
    pub mem_mib: u64,
    /// GPUs (`--gpus`).
    pub gpus: u32,
    /// Whether they are the host's real GPUs (else emulated).
    pub real_gpus: bool,
}

/// Emulated GPUs of the last slave on a host without GPUs.
pub const EMULATED_GPUS: u32 = 2;

/// The shares of `slaves` slaves on `host` (the rule above); `cpus` and `mem_mib` override
/// the per-slave CPUs and memory.
pub fn size(host: Host, slaves: u32, cpus: Option<u32>, mem_mib: Option<u64>) -> Vec<Share> {
    let n = slaves.max(1);
    let each_cpus = cpus.unwrap_or_else(|| (host.cpus / n).max(2));
    let each_mem = mem_mib.unwrap_or_else(|| (host.mem_mib * 3 / 4 / u64::from(n)).max(2048));
    (1..=n)
        .map(|i| {
            let last = i == n;
            Share {
                cpus: each_cpus,
                mem_mib: each_mem,
                gpus: match (last, host.gpus) {
                    (false, _) => 0,
                    (true, 0) => EMULATED_GPUS,
                    (true, g) => g,
                },
                real_gpus: last && host.gpus > 0,
            }
        })
        .collect()
}

/// This host: its CPUs, its memory from `/proc/meminfo` (4 GiB when unreadable), its real
/// GPUs by NVML.
pub fn this_host() -> Host {
    use hetsched_slave::gpu::GpuProbe;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mem_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4096, |kib| kib / 1024);
    let gpus = hetsched_slave::gpu::NvmlProbe
        .probe()
        .map_or(0, |d| d.len() as u32);
    Host {
        cpus,
        mem_mib,
        gpus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_16_cpu_host_with_one_gpu_is_split_across_its_slaves() {
        let host = Host {
            cpus: 16,
            mem_mib: 65536,
            gpus: 1,
        };
        let s = size(host, 2, None, None);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].cpus, s[0].mem_mib, s[0].gpus), (8, 24576, 0));
        assert_eq!((s[1].cpus, s[1].mem_mib, s[1].gpus), (8, 24576, 1));
        assert!(s[1].real_gpus && !s[0].real_gpus);
        // Overrides are taken as given.
        let s = size(host, 2, Some(3), Some(3072));
        assert!(s.iter().all(|x| (x.cpus, x.mem_mib) == (3, 3072)), "{s:?}");
        // A small host still gives each slave 2 CPUs and 2 GiB; no GPU: two emulated.
        let tiny = Host {
            cpus: 2,
            mem_mib: 1024,
            gpus: 0,
        };
        let s = size(tiny, 4, None, None);
        assert!(s.iter().all(|x| (x.cpus, x.mem_mib) == (2, 2048)), "{s:?}");
        assert_eq!((s[3].gpus, s[3].real_gpus), (EMULATED_GPUS, false));
        assert_eq!(s[0].gpus, 0);
    }
}
