//! Accounting (issue 53): one record per ended attempt, kept by every master, and the
//! questions asked of them — `hetsched history` (sacct-like, one line per attempt) and
//! `hetsched usage` (sreport-like totals). docs/guide/accounting.md describes the columns.

use crate::{Attempt, JobId, NodeId, TaskId, TaskReason};
use serde::{Deserialize, Serialize};

/// One ended attempt: who ran it where, what it asked, what it used (as its slave measured
/// it; `None` where nothing was measured, never a zero standing for "unknown") and how it
/// ended. Times are the committed log entries' `at_ms` (the leader's clock).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Job.
    pub job: JobId,
    /// Task.
    pub task: TaskId,
    /// Index of the task within its job.
    pub index: u32,
    /// Attempt.
    pub attempt: Attempt,
    /// The job's user.
    pub user: String,
    /// The job's partition.
    pub partition: String,
    /// Where it ran.
    pub node: NodeId,
    /// When it was reported started (`None`: never reported started).
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// When its end was committed.
    pub ended_ms: u64,
    /// Wall time, seconds, on the slave's monotonic clock.
    #[serde(default)]
    pub elapsed_s: Option<f64>,
    /// CPUs asked (cores, fractions allowed).
    pub cpus: f64,
    /// Memory asked, MiB.
    pub mem_mib: u64,
    /// GPUs asked (devices; a fraction for a shared one).
    pub gpus: f64,
    /// GPU models accepted (empty: any).
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// CPU seconds used, user + system, from the attempt's cgroup.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// Peak memory, MiB, from the attempt's cgroup.
    #[serde(default)]
    pub max_mem_mib: Option<u64>,
    /// GPU seconds: granted share × wall time.
    #[serde(default)]
    pub gpu_s: Option<f64>,
    /// Dominant-resource seconds: the largest of its CPU, memory and GPU shares of the
    /// cluster's capacity (when it ended) times its wall time; fair share's usage.
    #[serde(default)]
    pub dominant_s: Option<f64>,
    /// Utilisation-weighted GPU seconds, where a probe measured it.
    #[serde(default)]
    pub gpu_util_s: Option<f64>,
    /// The node's GPUs are emulated (no real device behind `gpu_s`).
    #[serde(default)]
    pub gpu_emulated: bool,
    /// `succeeded` (exit 0) or `failed`.
    pub state: String,
    /// Why it ended, where not a plain exit (docs/CONTRACT.md's reasons).
    #[serde(default)]
    pub reason: Option<TaskReason>,
    /// Exit code.
    pub exit_code: i32,
}

impl AttemptRecord {
    /// CPU efficiency: CPU seconds used over CPUs asked × wall time (`None` without both).
    pub fn cpu_efficiency(&self) -> Option<f64> {
        let asked = self.cpus * self.elapsed_s?;
        (asked > 0.0).then(|| self.cpu_s.map(|u| u / asked))?
    }
}

/// Which records `history` returns (all given conditions hold).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryFilter {
    /// Only this user's.
    #[serde(default)]
    pub user: Option<String>,
    /// Only this job's.
    #[serde(default)]
    pub job: Option<JobId>,
    /// Only attempts that ended at or after this time, ms since the Unix epoch.
    #[serde(default)]
    pub since_ms: Option<u64>,
    /// Only attempts that ended before this time, ms since the Unix epoch.
    #[serde(default)]
    pub until_ms: Option<u64>,
    /// Only this state (`succeeded`, `failed`) or reason (`oom`, `timeout`, ...).
    #[serde(default)]
    pub state: Option<String>,
}

impl HistoryFilter {
    /// Whether `r` passes.
    pub fn admits(&self, r: &AttemptRecord) -> bool {
        self.user.as_ref().is_none_or(|u| *u == r.user)
            && self.job.is_none_or(|j| j == r.job)
            && self.since_ms.is_none_or(|t| r.ended_ms >= t)
            && self.until_ms.is_none_or(|t| r.ended_ms < t)
            && self
                .state
                .as_ref()
                .is_none_or(|s| *s == r.state || r.reason.is_some_and(|why| why.as_str() == s))
    }
}

/// `history`'s answer: the records, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryInfo {
    /// The records.
    pub records: Vec<AttemptRecord>,
    /// Detail is kept this long (`master --accounting-retention`), ms; older attempts are
    /// only in `usage`'s daily totals.
    pub retention_ms: u64,
}

/// How `usage` groups its totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    /// Per user.
    #[default]
    User,
    /// Per partition.
    Partition,
    /// Per UTC day.
    Day,
}

/// One group's totals in `usage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    /// The user, partition or day (`YYYY-MM-DD`, UTC).
    pub key: String,
    /// Attempts ended.
    pub tasks: u64,
    /// CPU-hours allocated (CPUs asked × wall time).
    pub cpu_hours: f64,
    /// CPU-hours used (measured), over the attempts with a reading.
    pub cpu_used_hours: f64,
    /// GPU-hours (granted share × wall time).
    pub gpu_hours: f64,
    /// CPU used ÷ CPU allocated, over the attempts with both (`None`: none had).
    pub cpu_efficiency: Option<f64>,
}

/// One user's standing in fair share (docs/guide/accounting.md, "Fair share").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FairShareInfo {
    /// User.
    pub user: String,
    /// Its usage decayed to now, dominant-resource seconds.
    pub decayed_usage: f64,
    /// Its factor F = 2^(−Ū/S), 0 < F ≤ 1 (higher goes first).
    pub factor: f64,
    /// Its share S: its weight (the priority configuration's `[shares]`, default 1) over
    /// the weights of the users listed (absent from older masters' answers).
    #[serde(default)]
    pub share: Option<f64>,
}

/// `usage`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountingUsageInfo {
    /// Each user's decayed usage and fair-share factor, by user (empty with
    /// `--fairshare-half-life off`).
    #[serde(default)]
    pub fair_share: Vec<FairShareInfo>,
    /// The answering master's `--fairshare-half-life`, ms (`None`: off).
    #[serde(default)]
    pub half_life_ms: Option<u64>,
    /// Totals from this time on, ms since the Unix epoch (older detail counts by its UTC
    /// day).
    pub since_ms: u64,
    /// How the totals are grouped.
    pub by: UsageBy,
    /// One total per group, by key.
    pub totals: Vec<UsageTotal>,
}

/// A time bound of `history` and `usage` (`--since`, `--until`, `?since=`), ms since the
/// Unix epoch: a duration back from `now_ms` (`2h`, `7d`), an RFC 3339 time
/// (`2026-11-29T03:00:00Z`, also without the zone, read as UTC), or ms since the epoch.
pub fn time_bound(s: &str, now_ms: u64) -> Result<u64, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(ms);
    }
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ms.saturating_sub(d.as_millis() as u64));
    }
    match humantime::parse_rfc3339_weak(s) {
        Ok(t) => Ok(t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)),
        Err(_) => Err(format!(
            "{s:?} is neither a duration back from now (2h, 7d) nor a time like 2026-11-29T03:00:00Z"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_bounds_are_durations_back_times_or_ms() {
        assert_eq!(time_bound("2h", 10_000_000), Ok(10_000_000 - 7_200_000));
        assert_eq!(time_bound("1970-01-01T00:00:01Z", 0), Ok(1000));
        assert_eq!(time_bound("1970-01-02T00:00:00", 0), Ok(86_400_000));
        assert_eq!(time_bound("1234", 0), Ok(1234));
        assert!(time_bound("yesterday-ish", 0).is_err());
    }

    #[test]
    fn efficiency_and_filters() {
        let r = AttemptRecord {
            user: "a".into(),
            cpus: 2.0,
            elapsed_s: Some(10.0),
            cpu_s: Some(10.0),
            state: "failed".into(),
            reason: Some(TaskReason::Oom),
            ended_ms: 5,
            ..AttemptRecord::default()
        };
        assert_eq!(r.cpu_efficiency(), Some(0.5));
        let f = |state: &str| HistoryFilter {
            state: Some(state.into()),
            ..Default::default()
        };
        assert!(f("oom").admits(&r) && f("failed").admits(&r) && !f("succeeded").admits(&r));
        let until = HistoryFilter {
            until_ms: Some(5),
            ..Default::default()
        };
        assert!(!until.admits(&r));
    }
}
