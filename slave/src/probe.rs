//! Per-task probes, sampled once a second (S3): GPU utilisation ([`GpuUtilProbe`]) and
//! memory bandwidth ([`BandwidthProbe`]), each with a real and an emulated implementation.
//!
//! - [`NvmlUtilProbe`]: NVML per-process utilisation (`nvmlDeviceGetProcessUtilization`) of
//!   the task's processes on its devices, where the NVIDIA library is present.
//! - [`EmulatedGpuUtilProbe`]: the task writes its utilisation (0–100) to the file named
//!   by `HETSCHED_GPU_UTIL_FILE`.
//! - [`ResctrlProbe`]: Intel RDT/MBM through resctrl — a monitoring group per task under
//!   `ROOT/mon_groups/`, its processes written to the group's `tasks`, and the deltas of
//!   `mon_data/*/mbm_total_bytes` (summed over L3 domains) per second.
//! - [`EmulatedBandwidthProbe`]: the task writes its bandwidth (MB/s) to the file named by
//!   `HETSCHED_MEMBW_FILE`.
//!
//! Samples from emulated probes are labelled `emulated` in the samples sent to the masters
//! and in the logs. [`run_sampler`] is the slave's sampling loop: it feeds the contention
//! rule ([`crate::contention`]), applies its compressions live and reports them, and hands
//! the samples to the link, which sends them with the next heartbeat.

use crate::attempt::{GPU_UTIL_FILE, MEMBW_FILE};
use crate::contention::{Compression, Contention, TaskSample};
use hetsched_common::protocol::ProbeSample;
use hetsched_common::{Attempt, TaskId};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Probes and contention elimination (S3): `slave --membw-total --membw-threshold
/// --util-drop --resctrl-root`.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Where resctrl is mounted (normally `/sys/fs/resctrl`); without monitoring there the
    /// bandwidth probe is the emulated one.
    pub resctrl_root: PathBuf,
    /// The contention rule's thresholds.
    pub contention: crate::contention::ContentionConfig,
    /// How often every running task is sampled.
    pub period: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            resctrl_root: PathBuf::from("/sys/fs/resctrl"),
            contention: crate::contention::ContentionConfig::default(),
            period: Duration::from_secs(1),
        }
    }
}

/// What a probe needs to know of one running attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// `task-<id>-<attempt>` (also its resctrl group's name).
    pub name: String,
    /// Its attempt directory (where the emulated probes' files are).
    pub dir: PathBuf,
    /// Its processes.
    pub pids: BTreeSet<i32>,
    /// The GPU devices it holds.
    pub gpus: Vec<u32>,
}

/// A source of per-task GPU utilisation.
pub trait GpuUtilProbe: Send {
    /// `nvml` or `emulated` (`nodes --json` `"probes"."gpu"`).
    fn name(&self) -> &'static str;
    /// Whether its values are made up by the task itself.
    fn emulated(&self) -> bool;
    /// The task's GPU utilisation now, 0–100; `None` when there is no reading.
    fn sample(&mut self, t: &ProbeTarget) -> Option<f64>;
    /// The task ended: drop what is kept for it.
    fn forget(&mut self, _name: &str) {}
}

/// A source of per-task memory bandwidth.
pub trait BandwidthProbe: Send {
    /// `resctrl` or `emulated` (`nodes --json` `"probes"."membw"`).
    fn name(&self) -> &'static str;
    /// Whether its values are made up by the task itself.
    fn emulated(&self) -> bool;
    /// The task's bandwidth, MB/s, since the previous sample at `now`; `None` before a
    /// second sample or when there is no reading.
    fn sample(&mut self, t: &ProbeTarget, now: Instant) -> Option<f64>;
    /// The task ended: drop what is kept for it.
    fn forget(&mut self, name: &str);
}

/// A number written by a task into a file (whitespace allowed); `None` if missing or bad.
fn read_number(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// GPU utilisation the task writes to `HETSCHED_GPU_UTIL_FILE`.
#[derive(Debug, Default)]
pub struct EmulatedGpuUtilProbe;

impl GpuUtilProbe for EmulatedGpuUtilProbe {
    fn name(&self) -> &'static str {
        "emulated"
    }
    fn emulated(&self) -> bool {
        true
    }
    fn sample(&mut self, t: &ProbeTarget) -> Option<f64> {
        read_number(&t.dir.join(GPU_UTIL_FILE)).map(|u| u.clamp(0.0, 100.0))
    }
}

/// NVML per-process utilisation (SM utilisation of the task's processes on its devices,
/// the highest over its devices).
pub struct NvmlUtilProbe {
    nvml: nvml_wrapper::Nvml,
    cursor: UtilCursor,
}

impl std::fmt::Debug for NvmlUtilProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlUtilProbe").finish_non_exhaustive()
    }
}

impl NvmlUtilProbe {
    /// Loads NVML; `None` where the library or driver is missing.
    pub fn open() -> Option<Self> {
        // Foreign code behind dlopen: a panic in the wrapper means "not available".
        std::panic::catch_unwind(|| nvml_wrapper::Nvml::init().ok())
            .ok()
            .flatten()
            .map(|nvml| Self {
                nvml,
                cursor: UtilCursor::default(),
            })
    }
}

impl GpuUtilProbe for NvmlUtilProbe {
    fn name(&self) -> &'static str {
        "nvml"
    }
    fn emulated(&self) -> bool {
        false
    }
    fn sample(&mut self, t: &ProbeTarget) -> Option<f64> {
        let nvml = &self.nvml;
        self.cursor.sample(t, |dev, since| {
            let samples = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                nvml.device_by_index(dev)
                    .and_then(|d| d.process_utilization_stats(since))
            }));
            let Ok(Ok(samples)) = samples else {
                return None;
            };
            Some(
                samples
                    .iter()
                    .map(|s| ProcessUtil {
                        pid: s.pid,
                        timestamp: s.timestamp,
                        sm_util: s.sm_util,
                    })
                    .collect(),
            )
        })
    }
    fn forget(&mut self, name: &str) {
        self.cursor.forget(name);
    }
}

/// One process's utilisation sample as NVML returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProcessUtil {
    pid: u32,
    /// When the sample was taken (NVML's clock, microseconds).
    timestamp: u64,
    /// SM utilisation, percent.
    sm_util: u32,
}

/// Where each task stands in each device's sample buffer.
///
/// NVML returns the samples newer than a timestamp the caller gives. The cursor is kept per
/// task and device, not per device: tasks sharing a device (fractional GPUs) are sampled one
/// after the other in a round, and a per-device cursor moved by the first would leave the
/// second only samples newer than that read, usually none.
#[derive(Debug, Default)]
struct UtilCursor {
    last_seen: BTreeMap<(String, u32), u64>,
}

impl UtilCursor {
    /// The task's utilisation over the samples `read(device, since)` returns for its devices
    /// (the highest among its processes and devices); `None` with no sample of its processes.
    fn sample(
        &mut self,
        t: &ProbeTarget,
        mut read: impl FnMut(u32, u64) -> Option<Vec<ProcessUtil>>,
    ) -> Option<f64> {
        let mut best: Option<f64> = None;
        for &dev in &t.gpus {
            let key = (t.name.clone(), dev);
            let since = self.last_seen.get(&key).copied().unwrap_or(0);
            let Some(samples) = read(dev, since) else {
                continue;
            };
            if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
                self.last_seen.insert(key, newest);
            }
            let util = samples
                .iter()
                .filter(|s| i32::try_from(s.pid).is_ok_and(|p| t.pids.contains(&p)))
                .map(|s| f64::from(s.sm_util))
                .fold(None, |m: Option<f64>, u| Some(m.map_or(u, |m| m.max(u))));
            if let Some(u) = util {
                best = Some(best.map_or(u, |b| b.max(u)));
            }
        }
        best.map(|u| u.clamp(0.0, 100.0))
    }

    /// The task ended: drop its cursors.
    fn forget(&mut self, name: &str) {
        self.last_seen.retain(|(task, _), _| task != name);
    }
}

/// Memory bandwidth the task writes to `HETSCHED_MEMBW_FILE`, MB/s.
#[derive(Debug, Default)]
pub struct EmulatedBandwidthProbe;

impl BandwidthProbe for EmulatedBandwidthProbe {
    fn name(&self) -> &'static str {
        "emulated"
    }
    fn emulated(&self) -> bool {
        true
    }
    fn sample(&mut self, t: &ProbeTarget, _now: Instant) -> Option<f64> {
        read_number(&t.dir.join(MEMBW_FILE)).map(|b| b.max(0.0))
    }
    fn forget(&mut self, _name: &str) {}
}

/// Intel RDT memory-bandwidth monitoring through resctrl.
#[derive(Debug)]
pub struct ResctrlProbe {
    root: PathBuf,
    /// Per group: total bytes and when read.
    last: BTreeMap<String, (u64, Instant)>,
}

impl ResctrlProbe {
    /// The probe over the resctrl filesystem at `root` (normally `/sys/fs/resctrl`), if it
    /// is mounted with monitoring (`mon_groups` and `info/L3_MON` exist).
    pub fn detect(root: &Path) -> Option<Self> {
        (root.join("mon_groups").is_dir() && root.join("info/L3_MON").is_dir()).then(|| Self {
            root: root.to_path_buf(),
            last: BTreeMap::new(),
        })
    }

    fn group(&self, name: &str) -> PathBuf {
        self.root
            .join("mon_groups")
            .join(format!("hetsched-{name}"))
    }

    /// Sum of `mon_data/*/mbm_total_bytes` of a group.
    fn total_bytes(group: &Path) -> Option<u64> {
        let mut total = 0u64;
        let mut any = false;
        for d in std::fs::read_dir(group.join("mon_data")).ok()?.flatten() {
            let Ok(text) = std::fs::read_to_string(d.path().join("mbm_total_bytes")) else {
                continue;
            };
            // "Unavailable" is what the kernel answers for a domain without a reading.
            if let Ok(v) = text.trim().parse::<u64>() {
                total = total.saturating_add(v);
                any = true;
            }
        }
        any.then_some(total)
    }
}

impl BandwidthProbe for ResctrlProbe {
    fn name(&self) -> &'static str {
        "resctrl"
    }
    fn emulated(&self) -> bool {
        false
    }
    fn sample(&mut self, t: &ProbeTarget, now: Instant) -> Option<f64> {
        let group = self.group(&t.name);
        if !group.is_dir() {
            if let Err(e) = std::fs::create_dir(&group) {
                tracing::debug!(group = %group.display(), error = %e, "cannot create a resctrl monitoring group");
                return None;
            }
        }
        // Processes the task started since the last sample join its group (one pid per
        // write, as resctrl wants).
        for pid in &t.pids {
            let _ = std::fs::write(group.join("tasks"), pid.to_string());
        }
        let bytes = Self::total_bytes(&group)?;
        let prev = self.last.insert(t.name.clone(), (bytes, now));
        let (before, at) = prev?;
        let secs = now.saturating_duration_since(at).as_secs_f64();
        if secs <= 0.0 {
            return None;
        }
        Some(bytes.saturating_sub(before) as f64 / secs / 1_000_000.0)
    }
    fn forget(&mut self, name: &str) {
        self.last.remove(name);
        let group = self.group(name);
        if group.is_dir() {
            // A monitoring group is removed with rmdir (its files are not real files).
            let _ = std::fs::remove_dir(&group);
        }
    }
}

/// The probes a slave uses, chosen at start.
pub struct Probes {
    /// GPU utilisation.
    pub gpu: Box<dyn GpuUtilProbe>,
    /// Memory bandwidth.
    pub membw: Box<dyn BandwidthProbe>,
}

impl Probes {
    /// NVML when the node offers real GPUs and the library loads, else emulated; resctrl
    /// when mounted at `resctrl_root` with monitoring, else emulated.
    pub fn detect(real_gpus: bool, resctrl_root: &Path) -> Self {
        let gpu: Box<dyn GpuUtilProbe> = match real_gpus.then(NvmlUtilProbe::open).flatten() {
            Some(p) => Box::new(p),
            None => Box::new(EmulatedGpuUtilProbe),
        };
        let membw: Box<dyn BandwidthProbe> = match ResctrlProbe::detect(resctrl_root) {
            Some(p) => Box::new(p),
            None => Box::new(EmulatedBandwidthProbe),
        };
        Self { gpu, membw }
    }
}

/// A running attempt as the probes see it (the agent lists them, [`SamplerPort::running`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningAttempt {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// Its CPU allocation now, millicores.
    pub cpu_milli: u64,
    /// Its name, directory, processes and GPUs.
    pub target: ProbeTarget,
}

/// What the sampling loop asks of the agent and hands to the masters: kept behind this trait
/// so that the probes know nothing of the agent's mailbox or its reports (the agent
/// implements it, `crate::agent::SamplerLink`). Each call answers `None` once the agent is
/// gone, which ends the loop.
pub trait SamplerPort: Send + 'static {
    /// The attempts running now, with their processes when `with_pids`.
    fn running(&self, with_pids: bool) -> Option<oneshot::Receiver<Vec<RunningAttempt>>>;
    /// Changes a running attempt's CPUs live; the answer says whether it ran and changed.
    fn set_cpus(&self, c: &Compression) -> Option<oneshot::Receiver<bool>>;
    /// A compression was applied: the masters hear of it.
    fn compressed(&self, c: &Compression);
}

/// Most samples kept for the next heartbeat (older ones are dropped while no master is
/// reachable).
pub const MAX_PENDING_SAMPLES: usize = 4096;

/// The sampling loop: every `period`, sample every running attempt, run the contention
/// rule, apply and report its compressions, and pass the samples to the link.
pub async fn run_sampler(
    mut probes: Probes,
    mut rule: Contention,
    period: Duration,
    agent: impl SamplerPort,
    samples: mpsc::UnboundedSender<ProbeSample>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known: BTreeSet<String> = BTreeSet::new();
    loop {
        tick.tick().await;
        let with_pids = !(probes.gpu.emulated() && probes.membw.emulated());
        let Some(rx) = agent.running(with_pids) else {
            return;
        };
        let Ok(running) = rx.await else {
            return;
        };
        let now = Instant::now();
        let mut round = Vec::with_capacity(running.len());
        let mut live = BTreeSet::new();
        for r in &running {
            let s = sample_one(&mut probes, r, now);
            live.insert(r.target.name.clone());
            round.push(TaskSample {
                task: r.task,
                attempt: r.attempt,
                cpu_milli: r.cpu_milli,
                gpu_task: !r.target.gpus.is_empty(),
                gpu_util: s.gpu_util,
                membw_mbps: s.membw_mbps,
            });
            if samples.send(s).is_err() {
                return;
            }
        }
        for gone in known.difference(&live) {
            probes.gpu.forget(gone);
            probes.membw.forget(gone);
        }
        known = live;
        for c in rule.round(&round) {
            tracing::warn!(
                task = %c.task, attempt = c.attempt, gpu_task = %c.gpu_task, cpu_milli = c.cpu_milli,
                membw = probes.membw.name(), gpu = probes.gpu.name(),
                "memory-bandwidth contention with a GPU task: halving the CPU task's cores"
            );
            let Some(rx) = agent.set_cpus(&c) else {
                return;
            };
            if let Ok(true) = rx.await {
                metrics::counter!("hetsched_slave_compressions_total").increment(1);
                agent.compressed(&c);
            }
        }
    }
}

fn sample_one(probes: &mut Probes, r: &RunningAttempt, now: Instant) -> ProbeSample {
    let gpu_util = if r.target.gpus.is_empty() {
        None
    } else {
        probes.gpu.sample(&r.target)
    };
    let membw_mbps = probes.membw.sample(&r.target, now);
    let s = ProbeSample {
        task: r.task,
        attempt: r.attempt,
        cpu_milli: r.cpu_milli,
        gpu_util,
        gpu_emulated: gpu_util.is_some() && probes.gpu.emulated(),
        membw_mbps,
        membw_emulated: membw_mbps.is_some() && probes.membw.emulated(),
    };
    tracing::debug!(
        task = %r.task, attempt = r.attempt, cpu_milli = r.cpu_milli,
        gpu_util = ?gpu_util, gpu_probe = if s.gpu_emulated { "EMULATED" } else { probes.gpu.name() },
        membw_mbps = ?membw_mbps, membw_probe = if s.membw_emulated { "EMULATED" } else { probes.membw.name() },
        "probe sample"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(dir: &Path, name: &str) -> ProbeTarget {
        ProbeTarget {
            name: name.into(),
            dir: dir.to_path_buf(),
            pids: BTreeSet::from([4242, 4243]),
            gpus: vec![0],
        }
    }

    /// A fake resctrl tree: `info/L3_MON`, and for a group the kernel would create
    /// `mon_data/mon_L3_0{0,1}/mbm_total_bytes` when it is made; here the test writes them.
    fn fake_resctrl() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("info/L3_MON")).expect("info");
        std::fs::create_dir_all(root.path().join("mon_groups")).expect("mon_groups");
        root
    }

    fn set_bytes(group: &Path, domain0: u64, domain1: &str) {
        for (d, v) in [
            ("mon_L3_00", domain0.to_string()),
            ("mon_L3_01", domain1.into()),
        ] {
            let dir = group.join("mon_data").join(d);
            std::fs::create_dir_all(&dir).expect("mon_data");
            std::fs::write(dir.join("mbm_total_bytes"), format!("{v}\n")).expect("write");
        }
    }

    #[test]
    fn resctrl_probe_measures_byte_deltas_per_second() {
        let root = fake_resctrl();
        let mut p = ResctrlProbe::detect(root.path()).expect("detected");
        assert_eq!(p.name(), "resctrl");
        assert!(!p.emulated());
        let t = target(root.path(), "task-7-1");
        let group = root.path().join("mon_groups/hetsched-task-7-1");
        let t0 = Instant::now();
        // First sample creates the group and puts the task's pids in it; no rate yet.
        assert_eq!(p.sample(&t, t0), None);
        assert!(group.is_dir());
        // resctrl takes one pid per write; the fake file keeps the last one written.
        let pid = std::fs::read_to_string(group.join("tasks")).expect("tasks");
        assert!(t.pids.contains(&pid.parse::<i32>().expect("pid")));
        set_bytes(&group, 1_000_000_000, "Unavailable");
        assert_eq!(p.sample(&t, t0 + Duration::from_secs(1)), None);
        // 3 GB more over 2 s in two domains: 1500 MB/s.
        set_bytes(&group, 2_000_000_000, "2000000000");
        let bw = p.sample(&t, t0 + Duration::from_secs(3)).expect("a rate");
        assert!((bw - 1500.0).abs() < 1e-6, "{bw}");
        p.forget("task-7-1");
        // The fake tree's group has real files, so rmdir fails there; the state is gone.
        assert!(p.last.is_empty());
    }

    #[test]
    fn resctrl_is_not_detected_without_monitoring() {
        let root = tempfile::tempdir().expect("tempdir");
        assert!(ResctrlProbe::detect(root.path()).is_none());
        assert!(ResctrlProbe::detect(Path::new("/nonexistent/resctrl")).is_none());
        let p = Probes::detect(false, root.path());
        assert_eq!((p.gpu.name(), p.membw.name()), ("emulated", "emulated"));
    }

    #[test]
    fn emulated_probes_read_what_the_task_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = target(dir.path(), "task-1-1");
        let mut g = EmulatedGpuUtilProbe;
        let mut b = EmulatedBandwidthProbe;
        assert!(g.emulated() && b.emulated());
        assert_eq!(g.sample(&t), None);
        assert_eq!(b.sample(&t, Instant::now()), None);
        std::fs::write(dir.path().join(GPU_UTIL_FILE), "64.5\n").expect("write");
        std::fs::write(dir.path().join(MEMBW_FILE), " 9000 ").expect("write");
        assert_eq!(g.sample(&t), Some(64.5));
        assert_eq!(b.sample(&t, Instant::now()), Some(9000.0));
        // Out of range is clamped; garbage is no reading, never a panic.
        std::fs::write(dir.path().join(GPU_UTIL_FILE), "250").expect("write");
        assert_eq!(g.sample(&t), Some(100.0));
        std::fs::write(dir.path().join(GPU_UTIL_FILE), "lots").expect("write");
        assert_eq!(g.sample(&t), None);
        std::fs::write(dir.path().join(MEMBW_FILE), "NaN").expect("write");
        assert_eq!(b.sample(&t, Instant::now()), None);
    }

    #[test]
    fn tasks_sharing_a_device_each_read_their_own_samples() {
        // Two half-GPU tasks on device 0, sampled one after the other in each round: each
        // must see the samples its processes left since its own last read.
        let mut buffer = vec![
            ProcessUtil {
                pid: 4242,
                timestamp: 10,
                sm_util: 80,
            },
            ProcessUtil {
                pid: 5000,
                timestamp: 11,
                sm_util: 30,
            },
        ];
        let read = |buffer: &[ProcessUtil]| {
            let buffer = buffer.to_vec();
            move |dev: u32, since: u64| {
                (dev == 0).then(|| {
                    buffer
                        .iter()
                        .copied()
                        .filter(|s| s.timestamp > since)
                        .collect()
                })
            }
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let a = target(dir.path(), "task-1-1");
        let mut b = target(dir.path(), "task-2-1");
        b.pids = BTreeSet::from([5000]);
        let mut cursor = UtilCursor::default();
        assert_eq!(cursor.sample(&a, read(&buffer)), Some(80.0));
        assert_eq!(cursor.sample(&b, read(&buffer)), Some(30.0));
        // Next round: only what is newer counts, for each task.
        buffer.push(ProcessUtil {
            pid: 4242,
            timestamp: 20,
            sm_util: 60,
        });
        buffer.push(ProcessUtil {
            pid: 5000,
            timestamp: 21,
            sm_util: 40,
        });
        assert_eq!(cursor.sample(&a, read(&buffer)), Some(60.0));
        assert_eq!(cursor.sample(&b, read(&buffer)), Some(40.0));
        // Nothing new: no reading, not the old one again.
        assert_eq!(cursor.sample(&a, read(&buffer)), None);
        // A task that ended leaves no cursor behind; the other keeps its own.
        cursor.forget("task-1-1");
        assert_eq!(cursor.last_seen.len(), 1);
        assert_eq!(cursor.sample(&b, read(&buffer)), None);
        // A device whose read fails gives no reading.
        let mut c = target(dir.path(), "task-3-1");
        c.gpus = vec![1];
        assert_eq!(cursor.sample(&c, read(&buffer)), None);
    }

    #[test]
    fn nvml_util_probe_never_panics() {
        // Without a driver this is None; with one it samples (nothing for made-up pids).
        if let Some(mut p) = NvmlUtilProbe::open() {
            let dir = tempfile::tempdir().expect("tempdir");
            let _ = p.sample(&target(dir.path(), "task-1-1"));
        }
    }
}
