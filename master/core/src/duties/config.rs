//! The leader duties' timing and retention knobs, with their defaults (the master's
//! command-line flags fill them in).

/// Timing and retention knobs of the leader duties.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DutiesConfig {
    /// Silence after which a node is declared down.
    pub node_timeout_ms: u64,
    /// How long a dispatch may stay unanswered before it counts as failed.
    pub dispatch_timeout_ms: u64,
    /// First retry delay of a failed dispatch; doubles per failure up to `retry_max_ms`.
    pub retry_min_ms: u64,
    /// Largest retry delay of a dispatch.
    pub retry_max_ms: u64,
    /// How long a started task may be missing from its slave's reports before it is lost.
    pub lost_after_ms: u64,
    /// Finished jobs are collected this long after they finished (`None`: never).
    pub job_gc_after_ms: Option<u64>,
    /// Client request outcomes are kept this long (at least the client retry window).
    pub request_retention_ms: u64,
    /// Issue 55: outcomes of requests made from a user's idempotency key are kept this
    /// long (`--idempotency-retention`, 24 h).
    pub idempotency_retention_ms: u64,
    /// How often garbage collection looks for work.
    pub gc_period_ms: u64,
    /// Time a preempted task gets between SIGTERM and SIGKILL (`--preempt-grace`).
    pub preempt_grace_ms: u64,
    /// S3.2: how long each CPU count of a GPU task's search is measured (`--probe-period`).
    pub probe_period_ms: u64,
    /// S3.2: utilisation must improve by more than this many points for a step to count
    /// (`--util-epsilon`).
    pub util_epsilon: f64,
    /// Issue 53: the accounting settings this master's barrier carries when it takes the
    /// lead (`--accounting-retention`, `--fairshare-half-life`); `None`: it leaves them as
    /// they are.
    pub accounting: Option<crate::state::AccountingSettings>,
}

impl Default for DutiesConfig {
    fn default() -> Self {
        Self {
            node_timeout_ms: 5_000,
            dispatch_timeout_ms: 3_000,
            retry_min_ms: 200,
            retry_max_ms: 5_000,
            lost_after_ms: 3_000,
            job_gc_after_ms: Some(3_600_000),
            request_retention_ms: 600_000,
            idempotency_retention_ms: 86_400_000,
            gc_period_ms: 1_000,
            preempt_grace_ms: 10_000,
            probe_period_ms: 90_000,
            util_epsilon: 1.0,
            accounting: None,
        }
    }
}
