//! The accounting book (issue 53): one [`AttemptRecord`] per ended attempt a slave reported,
//! written by every master as it applies the report, so every master holds the same records.
//!
//! It lives in the [`Replica`](super::Replica) beside the cluster state, not in
//! [`ClusterState`]: the state's hash, its size and the planning copies never serialise it.
//! A snapshot carries it (so a follower that installs one, or a master that restarts from
//! its sled log and snapshot, has it), and it stays bounded: detail older than the
//! retention (`master --accounting-retention`, by the applying entry's `at_ms`) is folded
//! into per-user, per-partition, per-UTC-day totals, which are kept. Pure: no clock, no I/O.

use super::ClusterState;
use hetsched_common::protocol::{
    AttemptRecord, HistoryFilter, TaskReport, UsageBy, UsageRecord, UsageTotal,
};
use hetsched_common::{Attempt, NodeId, TaskId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Detail is kept this long by default (30 days), ms.
pub const DEFAULT_RETENTION_MS: u64 = 30 * 86_400_000;

const DAY_MS: u64 = 86_400_000;

/// Running totals of a set of records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Attempts.
    pub tasks: u64,
    /// CPU-seconds allocated (CPUs asked × wall time).
    pub cpu_alloc_s: f64,
    /// CPU-seconds used, over the attempts with a reading.
    pub cpu_used_s: f64,
    /// CPU-seconds allocated over the attempts with a CPU reading (efficiency's divisor).
    pub cpu_alloc_measured_s: f64,
    /// GPU-seconds.
    pub gpu_s: f64,
}

impl Totals {
    /// Adds one record.
    pub fn add(&mut self, r: &AttemptRecord) {
        self.tasks += 1;
        let alloc = r.cpus * r.elapsed_s.unwrap_or(0.0);
        self.cpu_alloc_s += alloc;
        if let Some(used) = r.cpu_s {
            self.cpu_used_s += used;
            self.cpu_alloc_measured_s += alloc;
        }
        self.gpu_s += r.gpu_s.unwrap_or(0.0);
    }

    /// Adds other totals.
    pub fn merge(&mut self, o: &Totals) {
        self.tasks += o.tasks;
        self.cpu_alloc_s += o.cpu_alloc_s;
        self.cpu_used_s += o.cpu_used_s;
        self.cpu_alloc_measured_s += o.cpu_alloc_measured_s;
        self.gpu_s += o.gpu_s;
    }

    /// As `usage` shows them, under `key`.
    pub fn shown(&self, key: String) -> UsageTotal {
        UsageTotal {
            key,
            tasks: self.tasks,
            cpu_hours: self.cpu_alloc_s / 3600.0,
            cpu_used_hours: self.cpu_used_s / 3600.0,
            gpu_hours: self.gpu_s / 3600.0,
            cpu_efficiency: (self.cpu_alloc_measured_s > 0.0)
                .then(|| self.cpu_used_s / self.cpu_alloc_measured_s),
        }
    }
}

/// One user's use of one partition on one UTC day, once its detail was folded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DayTotal {
    /// Days since the Unix epoch (UTC).
    pub day: u64,
    /// User.
    pub user: String,
    /// Partition.
    pub partition: String,
    /// Totals.
    pub totals: Totals,
}

/// The records and the folded totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccountingBook {
    /// Detail, in the order the ends were applied.
    records: VecDeque<AttemptRecord>,
    /// The attempts `records` holds (a finish reported twice is recorded once). Derived.
    keys: HashSet<(TaskId, Attempt)>,
    /// Folded detail by (day, user, partition).
    days: BTreeMap<(u64, String, String), Totals>,
}

impl Eq for AccountingBook {}

/// The book as written in a snapshot.
#[derive(Serialize, Deserialize)]
struct Document<R, D> {
    records: R,
    days: D,
}

impl Serialize for AccountingBook {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let days: Vec<DayTotal> = self
            .days
            .iter()
            .map(|((day, user, partition), totals)| DayTotal {
                day: *day,
                user: user.clone(),
                partition: partition.clone(),
                totals: totals.clone(),
            })
            .collect();
        Document {
            records: &self.records,
            days,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AccountingBook {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let d = Document::<VecDeque<AttemptRecord>, Vec<DayTotal>>::deserialize(deserializer)?;
        let keys = d.records.iter().map(|r| (r.task, r.attempt)).collect();
        let days = d
            .days
            .into_iter()
            .map(|t| ((t.day, t.user, t.partition), t.totals))
            .collect();
        Ok(Self {
            records: d.records,
            keys,
            days,
        })
    }
}

impl AccountingBook {
    /// Whether nothing was ever recorded (then a snapshot leaves the book out).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.days.is_empty()
    }

    /// Detail records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Folded (user, partition, day) totals held.
    pub fn days_len(&self) -> usize {
        self.days.len()
    }

    /// Records `r` unless its attempt is recorded already. True when it was recorded.
    pub fn record(&mut self, r: AttemptRecord) -> bool {
        if !self.keys.insert((r.task, r.attempt)) {
            return false;
        }
        self.records.push_back(r);
        true
    }

    /// Folds the detail of attempts that ended before `before_ms` into daily totals.
    pub fn fold_before(&mut self, before_ms: u64) {
        while self.records.front().is_some_and(|r| r.ended_ms < before_ms) {
            let Some(r) = self.records.pop_front() else {
                break;
            };
            self.keys.remove(&(r.task, r.attempt));
            let key = (r.ended_ms / DAY_MS, r.user.clone(), r.partition.clone());
            self.days.entry(key).or_default().add(&r);
        }
    }

    /// The detail records `filter` admits, oldest first.
    pub fn history(&self, filter: &HistoryFilter) -> Vec<AttemptRecord> {
        // Records are in end order: the time bounds skip what is outside by search.
        let from = filter
            .since_ms
            .map_or(0, |t| self.records.partition_point(|r| r.ended_ms < t));
        self.records
            .range(from..)
            .filter(|r| filter.admits(r))
            .cloned()
            .collect()
    }

    /// Totals of the attempts that ended from `since_ms` on (folded days that overlap it
    /// count whole), grouped `by`, sorted by key; only `user`'s where given.
    pub fn usage(&self, since_ms: u64, by: UsageBy, user: Option<&str>) -> Vec<UsageTotal> {
        let mut groups: BTreeMap<String, Totals> = BTreeMap::new();
        let key = |day: u64, u: &str, p: &str| match by {
            UsageBy::User => u.to_string(),
            UsageBy::Partition => p.to_string(),
            UsageBy::Day => day_text(day),
        };
        let mine = |u: &str| user.is_none_or(|w| w == u);
        for ((day, u, p), t) in &self.days {
            if (day + 1) * DAY_MS > since_ms && mine(u) {
                groups.entry(key(*day, u, p)).or_default().merge(t);
            }
        }
        let from = self.records.partition_point(|r| r.ended_ms < since_ms);
        for r in self.records.range(from..).filter(|r| mine(&r.user)) {
            let k = key(r.ended_ms / DAY_MS, &r.user, &r.partition);
            groups.entry(k).or_default().add(r);
        }
        groups.into_iter().map(|(k, t)| t.shown(k)).collect()
    }
}

/// `YYYY-MM-DD` of a day since the Unix epoch (UTC; proleptic Gregorian).
pub fn day_text(day: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The record of the attempt a finish report ends, drafted from the state before the report
/// is applied: `None` unless `node` ran that attempt and it is the task's current one (a
/// stale or unknown report records nothing).
pub fn draft(
    s: &ClusterState,
    node: NodeId,
    report: &TaskReport,
    at_ms: u64,
) -> Option<AttemptRecord> {
    let TaskReport::Finished {
        task,
        attempt,
        exit_code,
        reason,
        usage,
        ..
    } = report
    else {
        return None;
    };
    let t = s.task(*task)?;
    if t.status.attempt != *attempt || t.attempt_nodes.get(attempt) != Some(&node) {
        return None;
    }
    let job = s.job(t.job)?;
    let asked = &job.spec.resources;
    let u = usage.clone().unwrap_or_default();
    let UsageRecord {
        elapsed_ms,
        cpu_s,
        max_mem_mib,
        gpu_s,
        gpu_util_s,
        ..
    } = u;
    let per_device = match asked.gpu.milli {
        0 => 1000,
        m => m,
    };
    let gpus = f64::from(asked.gpu.count) * f64::from(per_device) / 1000.0;
    let gpu_emulated = asked.gpu.count > 0
        && s.node(node)
            .is_some_and(|n| n.capacity.gpus.iter().any(|g| g.emulated));
    Some(AttemptRecord {
        job: t.job,
        task: *task,
        index: t.index,
        attempt: *attempt,
        user: job.spec.user.clone(),
        partition: job.spec.partition.clone(),
        node,
        started_ms: t.started_ms,
        ended_ms: at_ms,
        elapsed_s: elapsed_ms.map(|ms| ms as f64 / 1000.0),
        cpus: t.cpu_milli.unwrap_or(asked.cpu_milli) as f64 / 1000.0,
        mem_mib: asked.mem_mib,
        gpus,
        gpu_models: asked.gpu.models.clone(),
        cpu_s,
        max_mem_mib,
        gpu_s,
        gpu_util_s,
        gpu_emulated: gpu_emulated || u.gpu_emulated,
        state: if *exit_code == 0 {
            "succeeded"
        } else {
            "failed"
        }
        .into(),
        reason: *reason,
        exit_code: *exit_code,
    })
}

#[cfg(test)]
#[path = "accounting_tests.rs"]
mod tests;
