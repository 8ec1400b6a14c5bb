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

/// The generated input shapes the planner is measured on (docs/DESIGN.md §S2,
/// BENCHMARKS.md#planner-vs-uniform-lpt). 20 jobs each, blocks as [`GenParams::new`] (4–40 per job,
/// 32–256 MB, job speeds 20–80 MB/s), α = 0.05, s_t = 500 MB/s, one replica per block on a
/// random host unless said otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 4 hosts of 1–4 cores: the course's second task.
    Course,
    /// 1 host of 2–8 cores.
    OneHost,
    /// 10 hosts of 8 cores.
    TenByEight,
    /// As `Course`, but one block in ten is 16 times larger (512–4096 MB).
    Skewed,
    /// As `Course`, but every block's only replica is on host 0.
    OneHolder,
}

impl Shape {
    /// Every shape, in the order reports list them.
    pub const ALL: [Shape; 5] = [
        Shape::Course,
        Shape::OneHost,
        Shape::TenByEight,
        Shape::Skewed,
        Shape::OneHolder,
    ];

    /// The shape's name in reports: `course`, `one-host`, `10x8`, `skewed`, `one-holder`.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Course => "course",
            Shape::OneHost => "one-host",
            Shape::TenByEight => "10x8",
            Shape::Skewed => "skewed",
            Shape::OneHolder => "one-holder",
        }
    }

    /// The instance of this shape for `seed`.
    pub fn instance(self, seed: u64) -> Result<Instance, InstanceError> {
        let course = GenParams {
            cores: (1, 4),
            replicas: 1,
            transfer_speed: 500.0,
            alpha: 0.05,
            ..GenParams::new(20, 4, seed)
        };
        match self {
            Shape::Course => generate(&course),
            Shape::OneHost => generate(&GenParams {
                hosts: 1,
                cores: (2, 8),
                ..course
            }),
            Shape::TenByEight => generate(&GenParams {
                hosts: 10,
                cores: (8, 8),
                ..course
            }),
            Shape::Skewed => {
                let base = generate(&course)?;
                let mut rng = SplitMix64::new(seed ^ 0x5EED);
                rebuild(&base, |b| Block {
                    size: if rng.below(10) == 0 {
                        b.size * 16.0
                    } else {
                        b.size
                    },
                    replicas: b.replicas.clone(),
                })
            }
            Shape::OneHolder => {
                let base = generate(&course)?;
                rebuild(&base, |b| Block {
                    size: b.size,
                    replicas: vec![0],
                })
            }
        }
    }
}

/// `base` with every block mapped by `f`.
fn rebuild(base: &Instance, mut f: impl FnMut(&Block) -> Block) -> Result<Instance, InstanceError> {
    let jobs = base
        .jobs()
        .iter()
        .map(|j| BatchJob {
            speed: j.speed,
            blocks: j.blocks.iter().map(&mut f).collect(),
        })
        .collect();
    Instance::new(
        base.cores_per_host().to_vec(),
        base.transfer_speed(),
        base.alpha(),
        jobs,
    )
}
