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
    /// Issue 54: the most heartbeats a second the leader asks of the whole cluster
    /// (`--max-heartbeats-per-sec`; 0: no limit). Past `limit × SLAVE_PERIOD` slaves, each
    /// slave is asked to beat less often, and the silences the leader tolerates grow with
    /// the period (Nomad's `max_heartbeats_per_second` does the same).
    pub max_heartbeats_per_sec: u32,
}

/// The slaves' default heartbeat period (`slave`'s `Tuning`): the defaults of
/// `node_timeout_ms` (12.5 periods) and `lost_after_ms` (7.5) are set against it.
pub const SLAVE_PERIOD_MS: u64 = 400;

impl DutiesConfig {
    /// Issue 54: the shortest heartbeat period the leader asks of each slave when `nodes`
    /// are registered, so that all of them together beat at most `max_heartbeats_per_sec`
    /// times a second; 0 while the slaves' own period keeps under that (small clusters).
    pub fn heartbeat_floor_ms(&self, nodes: usize) -> u64 {
        if self.max_heartbeats_per_sec == 0 {
            return 0;
        }
        let floor = (nodes as u64 * 1000).div_ceil(u64::from(self.max_heartbeats_per_sec));
        if floor <= SLAVE_PERIOD_MS {
            0
        } else {
            // Slaves beat at most this seldom whatever they are asked: the timeouts count
            // on the period they really use.
            floor.min(hetsched_common::protocol::MAX_HEARTBEAT_MS)
        }
    }

    /// The silence after which a node is declared down with `nodes` registered: the
    /// configured timeout, or as many of the asked period as the default allows of the
    /// slaves' own (12.5), whichever is longer.
    pub fn node_timeout_for(&self, nodes: usize) -> u64 {
        self.node_timeout_ms
            .max(self.heartbeat_floor_ms(nodes) * 25 / 2)
    }

    /// How long a node whose attached link closed may stay silent after the close (issue
    /// 54): the configured node timeout, or two asked periods where that is longer (a slave
    /// whose connection merely broke reconnects and beats within one period). Under the
    /// heartbeat limit this is the node timeout itself, and a closed link changes nothing.
    pub fn closed_link_timeout_for(&self, nodes: usize) -> u64 {
        self.node_timeout_ms.max(self.heartbeat_floor_ms(nodes) * 2)
    }

    /// How long a started task may be missing from its slave's reports with `nodes`
    /// registered: the configured time, or 7.5 asked periods, whichever is longer.
    pub fn lost_after_for(&self, nodes: usize) -> u64 {
        self.lost_after_ms
            .max(self.heartbeat_floor_ms(nodes) * 15 / 2)
    }
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
            max_heartbeats_per_sec: 2_500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_grows_past_the_limit_and_the_timeouts_with_it() {
        let c = DutiesConfig::default();
        // 2,500 a second: 1,000 slaves at their own 400 ms are within it.
        for n in [0, 1, 999, 1_000] {
            assert_eq!(c.heartbeat_floor_ms(n), 0, "{n} nodes");
            assert_eq!(c.node_timeout_for(n), 5_000);
            assert_eq!(c.lost_after_for(n), 3_000);
        }
        assert_eq!(c.heartbeat_floor_ms(1_001), 401);
        assert_eq!(c.heartbeat_floor_ms(2_000), 800);
        assert_eq!(c.node_timeout_for(2_000), 10_000);
        assert_eq!(c.lost_after_for(2_000), 6_000);
        assert_eq!(c.heartbeat_floor_ms(10_000), 4_000);
        assert_eq!(c.node_timeout_for(10_000), 50_000);
        assert_eq!(c.lost_after_for(10_000), 30_000);
        assert_eq!(c.closed_link_timeout_for(1_000), 5_000);
        assert_eq!(c.closed_link_timeout_for(10_000), 8_000);
        // Past 150,000 slaves the period stops at the slaves' own cap.
        assert_eq!(c.heartbeat_floor_ms(1_000_000), 60_000);
        // A longer configured timeout stands; 0 turns the limit off.
        let long = DutiesConfig {
            node_timeout_ms: 60_000,
            ..c
        };
        assert_eq!(long.node_timeout_for(10_000), 60_000);
        let off = DutiesConfig {
            max_heartbeats_per_sec: 0,
            ..c
        };
        assert_eq!(off.heartbeat_floor_ms(1_000_000), 0);
        assert_eq!(off.node_timeout_for(1_000_000), 5_000);
    }
}
