//! S3.6 contention elimination, as a pure rule: when a CPU task uses at least
//! `membw_threshold` of the node's memory bandwidth (`--membw-total`) while a co-located GPU
//! task's utilisation is at least `util_drop` below its baseline (the mean of its first
//! [`BASELINE_SAMPLES`] samples), the CPU task's cores are halved (never below one core).
//! Each CPU attempt is compressed at most once; the freed cores are then held by the master
//! for the GPU task until it ends.
//!
//! The drop is relative: with `util_drop` 0.10 a GPU task whose baseline is 80 % suffers
//! once it is at or below 72 %.

use hetsched_common::{Attempt, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// Samples that make a GPU task's baseline.
pub const BASELINE_SAMPLES: usize = 5;

/// The rule's thresholds (`slave --membw-threshold --util-drop --membw-total`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContentionConfig {
    /// Share of the node's bandwidth a CPU task must use, 0–1 (default 0.75).
    pub membw_threshold: f64,
    /// Relative drop of a GPU task's utilisation below its baseline, 0–1 (default 0.10).
    pub util_drop: f64,
    /// The node's memory bandwidth, MB/s (`None`: the rule never fires).
    pub membw_total_mbps: Option<f64>,
}

impl Default for ContentionConfig {
    fn default() -> Self {
        Self {
            membw_threshold: 0.75,
            util_drop: 0.10,
            membw_total_mbps: None,
        }
    }
}

/// One running attempt as the rule sees it in one sampling round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskSample {
    /// Task.
    pub task: TaskId,
    /// Attempt.
    pub attempt: Attempt,
    /// Its CPU allocation now, millicores.
    pub cpu_milli: u64,
    /// Whether it holds GPUs (a GPU task) or not (a CPU task).
    pub gpu_task: bool,
    /// GPU utilisation, 0–100 (GPU tasks).
    pub gpu_util: Option<f64>,
    /// Memory bandwidth, MB/s.
    pub membw_mbps: Option<f64>,
}

/// A decision: halve `task`'s cores to `cpu_milli` for `gpu_task`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compression {
    /// The CPU task.
    pub task: TaskId,
    /// Its attempt.
    pub attempt: Attempt,
    /// Its new allocation, millicores.
    pub cpu_milli: u64,
    /// The GPU task that suffers.
    pub gpu_task: TaskId,
}

/// Half of `cpu_milli` in whole cores, at least one core; `None` when that is no smaller.
pub fn halved(cpu_milli: u64) -> Option<u64> {
    let half = (cpu_milli / 2 / 1000 * 1000).max(1000);
    (half < cpu_milli).then_some(half)
}

/// The rule's memory: baselines of GPU tasks and the CPU attempts already compressed.
#[derive(Clone, Debug, Default)]
pub struct Contention {
    cfg: ContentionConfig,
    /// First samples of each GPU attempt until the baseline is complete.
    first: BTreeMap<(TaskId, Attempt), Vec<f64>>,
    compressed: BTreeSet<(TaskId, Attempt)>,
}

impl Contention {
    /// A rule with these thresholds.
    pub fn new(cfg: ContentionConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// A GPU attempt's baseline, once it has [`BASELINE_SAMPLES`] samples.
    pub fn baseline(&self, task: TaskId, attempt: Attempt) -> Option<f64> {
        let s = self.first.get(&(task, attempt))?;
        (s.len() >= BASELINE_SAMPLES).then(|| s.iter().sum::<f64>() / s.len() as f64)
    }

    /// One sampling round over every running attempt: updates baselines (a round's sample
    /// of a GPU task that completes its baseline is part of it, not compared with it) and
    /// returns the compressions to make. Attempts no longer running are forgotten.
    pub fn round(&mut self, tasks: &[TaskSample]) -> Vec<Compression> {
        let live: BTreeSet<(TaskId, Attempt)> = tasks.iter().map(|t| (t.task, t.attempt)).collect();
        self.first.retain(|k, _| live.contains(k));
        self.compressed.retain(|k| live.contains(k));
        // The GPU tasks suffering now, worst (largest relative drop) first.
        let mut suffering: Vec<(f64, TaskId)> = Vec::new();
        for t in tasks.iter().filter(|t| t.gpu_task) {
            let Some(u) = t.gpu_util.filter(|u| u.is_finite()) else {
                continue;
            };
            let key = (t.task, t.attempt);
            let first = self.first.entry(key).or_default();
            if first.len() < BASELINE_SAMPLES {
                first.push(u);
                continue;
            }
            let Some(base) = self.baseline(t.task, t.attempt) else {
                continue;
            };
            if base > 0.0 && u <= base * (1.0 - self.cfg.util_drop) {
                suffering.push(((base - u) / base, t.task));
            }
        }
        let Some(total) = self.cfg.membw_total_mbps.filter(|t| *t > 0.0) else {
            return Vec::new();
        };
        let Some(&(_, gpu_task)) = suffering.iter().max_by(|a, b| a.0.total_cmp(&b.0)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for t in tasks.iter().filter(|t| !t.gpu_task) {
            let key = (t.task, t.attempt);
            if self.compressed.contains(&key) {
                continue;
            }
            let Some(bw) = t.membw_mbps.filter(|b| b.is_finite()) else {
                continue;
            };
            if bw < self.cfg.membw_threshold * total {
                continue;
            }
            if let Some(cpu_milli) = halved(t.cpu_milli) {
                self.compressed.insert(key);
                out.push(Compression {
                    task: t.task,
                    attempt: t.attempt,
                    cpu_milli,
                    gpu_task,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ContentionConfig {
        ContentionConfig {
            membw_threshold: 0.75,
            util_drop: 0.10,
            membw_total_mbps: Some(10_000.0),
        }
    }

    fn gpu(util: f64) -> TaskSample {
        TaskSample {
            task: TaskId(1),
            attempt: 1,
            cpu_milli: 2000,
            gpu_task: true,
            gpu_util: Some(util),
            membw_mbps: None,
        }
    }

    fn cpu(cpu_milli: u64, bw: f64) -> TaskSample {
        TaskSample {
            task: TaskId(2),
            attempt: 1,
            cpu_milli,
            gpu_task: false,
            gpu_util: None,
            membw_mbps: Some(bw),
        }
    }

    /// A rule whose GPU task has a baseline of 80 (five samples at 80).
    fn warmed(cfg: ContentionConfig, cpu_task: TaskSample) -> Contention {
        let mut c = Contention::new(cfg);
        for _ in 0..BASELINE_SAMPLES {
            assert!(c.round(&[gpu(80.0), cpu_task]).is_empty());
        }
        assert_eq!(c.baseline(TaskId(1), 1), Some(80.0));
        c
    }

    #[test]
    fn fires_when_both_thresholds_are_met() {
        let mut c = warmed(cfg(), cpu(8000, 9000.0));
        // 70 is 12.5 % below 80; 9000 MB/s is 90 % of 10000.
        let out = c.round(&[gpu(70.0), cpu(8000, 9000.0)]);
        assert_eq!(
            out,
            vec![Compression {
                task: TaskId(2),
                attempt: 1,
                cpu_milli: 4000,
                gpu_task: TaskId(1),
            }]
        );
        // Once per attempt.
        assert!(c.round(&[gpu(60.0), cpu(4000, 9000.0)]).is_empty());
    }

    #[test]
    fn does_not_fire_below_the_bandwidth_threshold() {
        let mut c = warmed(cfg(), cpu(8000, 7000.0));
        assert!(c.round(&[gpu(50.0), cpu(8000, 7400.0)]).is_empty());
        // At the threshold exactly it fires.
        assert_eq!(c.round(&[gpu(50.0), cpu(8000, 7500.0)]).len(), 1);
    }

    #[test]
    fn does_not_fire_below_the_utilisation_drop() {
        let mut c = warmed(cfg(), cpu(8000, 9500.0));
        // 73 is 8.75 % below 80: not enough.
        assert!(c.round(&[gpu(73.0), cpu(8000, 9500.0)]).is_empty());
        assert_eq!(c.round(&[gpu(72.0), cpu(8000, 9500.0)]).len(), 1);
    }

    #[test]
    fn does_not_fire_before_the_baseline_or_without_a_total() {
        let mut c = Contention::new(cfg());
        for u in [80.0, 80.0, 80.0, 80.0] {
            assert!(c.round(&[gpu(u), cpu(8000, 9900.0)]).is_empty());
        }
        // The fifth sample completes the baseline; it is not compared with it.
        assert!(c.round(&[gpu(10.0), cpu(8000, 9900.0)]).is_empty());
        let mut c = warmed(
            ContentionConfig {
                membw_total_mbps: None,
                ..cfg()
            },
            cpu(8000, 9900.0),
        );
        assert!(c.round(&[gpu(10.0), cpu(8000, 9900.0)]).is_empty());
    }

    #[test]
    fn never_below_one_core() {
        assert_eq!(halved(8000), Some(4000));
        assert_eq!(halved(3000), Some(1000));
        assert_eq!(halved(2000), Some(1000));
        assert_eq!(halved(1500), Some(1000));
        assert_eq!(halved(1000), None);
        assert_eq!(halved(500), None);
        let mut c = warmed(cfg(), cpu(1000, 9900.0));
        assert!(c.round(&[gpu(10.0), cpu(1000, 9900.0)]).is_empty());
    }

    #[test]
    fn forgets_attempts_that_ended() {
        let mut c = warmed(cfg(), cpu(8000, 9000.0));
        assert!(c.round(&[cpu(8000, 9000.0)]).is_empty());
        assert_eq!(c.baseline(TaskId(1), 1), None);
    }
}
