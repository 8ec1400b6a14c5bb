//! The input of the planner and the arithmetic of the model (docs/DESIGN.md §S2, "Decisions").
//!
//! A job given `e` cores runs each of them at `speed · g(e)` with `g(e) = 1 − α·(e − 1)`; a
//! core's time is `Σ remote block sizes / s_t + Σ its block sizes / (speed · g(e))`. Sizes are
//! in MB, speeds in MB/s, times in seconds.

use thiserror::Error;

/// The most cores one job may hold (the course problem's bound on `e`).
pub const MAX_CORES_PER_JOB: usize = 10;

/// The most cores a cluster may have: the planner keeps state per core, and a typo such as
/// an extra digit should be an error, not an attempt to allocate gigabytes.
pub const MAX_TOTAL_CORES: usize = 1 << 20;

/// One data block of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Size in MB (> 0).
    pub size: f64,
    /// Hosts holding a replica (0-based, at least one, no repeats).
    pub replicas: Vec<usize>,
}

/// One data-local batch job.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchJob {
    /// Calculation speed of one undecayed core, MB/s (> 0).
    pub speed: f64,
    /// The job's blocks (at least one).
    pub blocks: Vec<Block>,
}

impl BatchJob {
    /// Total data of the job, MB.
    pub fn data(&self) -> f64 {
        self.blocks.iter().map(|b| b.size).sum()
    }

    /// The patent's estimated time: data / speed, ignoring decay and transfers.
    pub fn estimate(&self) -> f64 {
        self.data() / self.speed
    }
}

/// A core of the cluster, as the output names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct CoreRef {
    /// Host id (0-based).
    pub host: usize,
    /// Core index on that host (0-based).
    pub core: usize,
}

/// Why an instance is not a valid input of the model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum InstanceError {
    /// There are no hosts.
    #[error("there are no hosts")]
    NoHosts,
    /// All hosts have zero cores.
    #[error("the hosts have no cores at all")]
    NoCores,
    /// More cores than the planner handles.
    #[error("the hosts have more than {max} cores in all")]
    TooManyCores {
        /// The cap.
        max: usize,
    },
    /// The batch is empty.
    #[error("the batch has no jobs")]
    NoJobs,
    /// The transfer speed is not a positive number.
    #[error("transfer speed must be > 0 MB/s, got {0}")]
    BadTransferSpeed(f64),
    /// The decay coefficient is outside [0, 1).
    #[error("alpha must be in [0, 1), got {0}")]
    BadAlpha(f64),
    /// A job's speed is not a positive finite number.
    #[error("job {job}: speed must be a positive number, got {speed}")]
    BadSpeed {
        /// Job index.
        job: usize,
        /// The speed given.
        speed: f64,
    },
    /// A job has no blocks.
    #[error("job {job} has no blocks")]
    NoBlocks {
        /// Job index.
        job: usize,
    },
    /// A block's size is not a positive finite number.
    #[error("job {job}, block {block}: size must be a positive number, got {size}")]
    BadSize {
        /// Job index.
        job: usize,
        /// Block index within the job.
        block: usize,
        /// The size given.
        size: f64,
    },
    /// A block has no replicas.
    #[error("job {job}, block {block} has no replicas")]
    NoReplicas {
        /// Job index.
        job: usize,
        /// Block index within the job.
        block: usize,
    },
    /// A replica names a host that does not exist.
    #[error(
        "job {job}, block {block}: replica host {host} does not exist ({hosts} hosts, ids from 0)"
    )]
    NoSuchHost {
        /// Job index.
        job: usize,
        /// Block index within the job.
        block: usize,
        /// The host id given.
        host: usize,
        /// Number of hosts.
        hosts: usize,
    },
    /// A replica host is listed twice for one block.
    #[error("job {job}, block {block}: replica host {host} is listed twice")]
    DuplicateReplica {
        /// Job index.
        job: usize,
        /// Block index within the job.
        block: usize,
        /// The repeated host id.
        host: usize,
    },
}

/// A validated planning problem. Construct with [`Instance::new`]; the fields are private so
/// that every instance the planner sees has passed the checks.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    cores_per_host: Vec<usize>,
    transfer_speed: f64,
    alpha: f64,
    jobs: Vec<BatchJob>,
    /// Host of each global core id (cores numbered host by host).
    core_host: Vec<usize>,
    /// First global core id of each host.
    host_first: Vec<usize>,
    max_cores: usize,
}

/// Job `j`: a positive finite speed, and blocks each of a positive size with distinct
/// replicas on hosts that exist.
fn check_job(j: usize, job: &BatchJob, hosts: usize) -> Result<(), InstanceError> {
    if !(job.speed.is_finite() && job.speed > 0.0) {
        return Err(InstanceError::BadSpeed {
            job: j,
            speed: job.speed,
        });
    }
    if job.blocks.is_empty() {
        return Err(InstanceError::NoBlocks { job: j });
    }
    for (b, block) in job.blocks.iter().enumerate() {
        if !(block.size.is_finite() && block.size > 0.0) {
            return Err(InstanceError::BadSize {
                job: j,
                block: b,
                size: block.size,
            });
        }
        if block.replicas.is_empty() {
            return Err(InstanceError::NoReplicas { job: j, block: b });
        }
        for (r, &host) in block.replicas.iter().enumerate() {
            if host >= hosts {
                return Err(InstanceError::NoSuchHost {
                    job: j,
                    block: b,
                    host,
                    hosts,
                });
            }
            if block.replicas[..r].contains(&host) {
                return Err(InstanceError::DuplicateReplica {
                    job: j,
                    block: b,
                    host,
                });
            }
        }
    }
    Ok(())
}

impl Instance {
    /// Checks and builds an instance. `transfer_speed` may be `f64::INFINITY` (the course's
    /// single-host files give none: nothing is ever transferred there).
    pub fn new(
        cores_per_host: Vec<usize>,
        transfer_speed: f64,
        alpha: f64,
        jobs: Vec<BatchJob>,
    ) -> Result<Self, InstanceError> {
        let hosts = cores_per_host.len();
        if hosts == 0 {
            return Err(InstanceError::NoHosts);
        }
        // Saturating: the counts come from the input and may be absurd.
        let total = cores_per_host
            .iter()
            .fold(0usize, |a, &c| a.saturating_add(c));
        if total > MAX_TOTAL_CORES {
            return Err(InstanceError::TooManyCores {
                max: MAX_TOTAL_CORES,
            });
        }
        if total == 0 {
            return Err(InstanceError::NoCores);
        }
        // `!(x > 0)` also rejects NaN.
        if transfer_speed.is_nan() || transfer_speed <= 0.0 {
            return Err(InstanceError::BadTransferSpeed(transfer_speed));
        }
        if !(0.0..1.0).contains(&alpha) {
            return Err(InstanceError::BadAlpha(alpha));
        }
        if jobs.is_empty() {
            return Err(InstanceError::NoJobs);
        }
        for (j, job) in jobs.iter().enumerate() {
            check_job(j, job, hosts)?;
        }
        let mut core_host = Vec::with_capacity(total);
        let mut host_first = Vec::with_capacity(hosts);
        for (h, &n) in cores_per_host.iter().enumerate() {
            host_first.push(core_host.len());
            core_host.extend(std::iter::repeat_n(h, n));
        }
        // g(e) must stay positive, so a large α lowers the cap below ten cores.
        let mut max_cores = 1;
        while max_cores < MAX_CORES_PER_JOB.min(total) && decay(alpha, max_cores + 1) > 0.0 {
            max_cores += 1;
        }
        Ok(Self {
            cores_per_host,
            transfer_speed,
            alpha,
            jobs,
            core_host,
            host_first,
            max_cores,
        })
    }

    /// Cores of each host.
    pub fn cores_per_host(&self) -> &[usize] {
        &self.cores_per_host
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.cores_per_host.len()
    }

    /// Total number of cores T.
    pub fn total_cores(&self) -> usize {
        self.core_host.len()
    }

    /// Transfer speed between hosts s_t, MB/s.
    pub fn transfer_speed(&self) -> f64 {
        self.transfer_speed
    }

    /// Decay coefficient α.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The jobs, in input order.
    pub fn jobs(&self) -> &[BatchJob] {
        &self.jobs
    }

    /// The most cores one job may get here: ten, fewer if the cluster is smaller or g would
    /// reach zero.
    pub fn max_cores(&self) -> usize {
        self.max_cores
    }

    /// g(e) = 1 − α·(e − 1).
    pub fn decay(&self, e: usize) -> f64 {
        decay(self.alpha, e)
    }

    /// Host of a global core id.
    pub(crate) fn host_of(&self, core: usize) -> usize {
        self.core_host[core]
    }

    /// The output name of a global core id.
    pub(crate) fn core_ref(&self, core: usize) -> CoreRef {
        let host = self.core_host[core];
        CoreRef {
            host,
            core: core - self.host_first[host],
        }
    }

    /// The global id of a named core, if it exists.
    pub(crate) fn core_id(&self, c: CoreRef) -> Option<usize> {
        (c.host < self.hosts() && c.core < self.cores_per_host[c.host])
            .then(|| self.host_first[c.host] + c.core)
    }

    /// Time to move `size` MB between hosts (zero when the speed is infinite).
    pub fn transfer_time(&self, size: f64) -> f64 {
        size / self.transfer_speed
    }

    /// Time for one core of `job`, out of `e`, to process `size` MB it holds locally.
    pub fn exec_time(&self, job: usize, size: f64, e: usize) -> f64 {
        size / (self.jobs[job].speed * self.decay(e))
    }

    /// Time for a core on `host` (of a job on `e` cores) to process `block` read from
    /// the replica on `replica`: transfer if remote, then execution.
    pub fn block_time(
        &self,
        job: usize,
        block: usize,
        e: usize,
        host: usize,
        replica: usize,
    ) -> f64 {
        let size = self.jobs[job].blocks[block].size;
        let exec = self.exec_time(job, size, e);
        if replica == host {
            exec
        } else {
            self.transfer_time(size) + exec
        }
    }

    /// The replica a core on `host` should read: the local one if there is one (no
    /// transfer), else the first listed (all remote reads cost the same in the model).
    pub fn best_replica(&self, job: usize, block: usize, host: usize) -> usize {
        let replicas = &self.jobs[job].blocks[block].replicas;
        if replicas.contains(&host) {
            host
        } else {
            replicas[0]
        }
    }
}

/// g(e) = 1 − α·(e − 1).
pub fn decay(alpha: f64, e: usize) -> f64 {
    1.0 - alpha * (e as f64 - 1.0)
}
