//! Seeded random instances for the benchmark and the tests: heterogeneous hosts, replicated
//! blocks, job speeds that differ. Deterministic in the seed.

use super::model::{BatchJob, Block, Instance, InstanceError};
use hetsched_common::rng::SplitMix64;

/// Shape of a generated instance.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Number of jobs.
    pub jobs: usize,
    /// Number of hosts.
    pub hosts: usize,
    /// Cores per host, drawn uniformly from this range (inclusive).
    pub cores: (usize, usize),
    /// Blocks per job, uniformly from this range (inclusive).
    pub blocks: (usize, usize),
    /// Replicas per block (capped at the number of hosts).
    pub replicas: usize,
    /// Block sizes in MB, uniformly from this range (inclusive).
    pub size: (u64, u64),
    /// Job speeds in MB/s, uniformly from this range (inclusive).
    pub speed: (u64, u64),
    /// Transfer speed, MB/s (125 = 1 Gb/s, as in the patent's example).
    pub transfer_speed: f64,
    /// Decay coefficient.
    pub alpha: f64,
    /// Seed.
    pub seed: u64,
}

impl GenParams {
    /// The benchmark's defaults for `jobs` jobs on `hosts` hosts: 2–8 cores per host,
    /// 4–40 blocks of 32–256 MB with 3 replicas, speeds 20–80 MB/s, 1 Gb/s, α = 0.05.
    pub fn new(jobs: usize, hosts: usize, seed: u64) -> Self {
        Self {
            jobs,
            hosts,
            cores: (2, 8),
            blocks: (4, 40),
            replicas: 3,
            size: (32, 256),
            speed: (20, 80),
            transfer_speed: 125.0,
            alpha: 0.05,
            seed,
        }
    }
}

/// A random instance of the given shape.
pub fn generate(p: &GenParams) -> Result<Instance, InstanceError> {
    let mut rng = SplitMix64::new(p.seed);
    let mut pick = |(lo, hi): (usize, usize)| rng.range(lo as u64, hi as u64) as usize;
    let cores: Vec<usize> = (0..p.hosts).map(|_| pick(p.cores)).collect();
    let mut rng = SplitMix64::new(p.seed ^ 0x9E37_79B9_7F4A_7C15);
    let replicas = p.replicas.clamp(1, p.hosts.max(1));
    let jobs = (0..p.jobs)
        .map(|_| {
            let n = rng.range(p.blocks.0 as u64, p.blocks.1 as u64) as usize;
            let speed = rng.range(p.speed.0, p.speed.1) as f64;
            let blocks = (0..n)
                .map(|_| {
                    let size = rng.range(p.size.0, p.size.1) as f64;
                    let mut hosts: Vec<usize> = Vec::with_capacity(replicas);
                    while hosts.len() < replicas {
                        let h = rng.below(p.hosts as u64) as usize;
                        if !hosts.contains(&h) {
                            hosts.push(h);
                        }
                    }
                    Block {
                        size,
                        replicas: hosts,
                    }
                })
                .collect();
            BatchJob { speed, blocks }
        })
        .collect();
    Instance::new(cores, p.transfer_speed, p.alpha, jobs)
}
