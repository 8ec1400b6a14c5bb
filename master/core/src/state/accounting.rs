//! The accounting book (issue 53): one [`AttemptRecord`] per ended attempt a slave reported,
//! written by every master as it applies the report, so every master holds the same records.
//!
//! It lives in the [`Replica`](super::Replica) beside the cluster state, not in
//! [`ClusterState`]: the state's hash, its size and the planning copies never serialise it.
//! A snapshot carries it (so a follower that installs one, or a master that restarts from
//! its sled log and snapshot, has it), and it stays bounded: detail older than the
//! retention (`master --accounting-retention`, by the applying entry's `at_ms`) is folded
//! into per-user, per-partition, per-UTC-day totals, which are kept. Pure: no clock, no I/O.

use super::command::TaskRef;
use super::ClusterState;
use crate::sched::multiqueue::DrfUsage;
use hetsched_common::protocol::{
    AttemptRecord, FairShareInfo, HistoryFilter, TaskReport, UsageBy, UsageRecord, UsageTotal,
};
use hetsched_common::{JobId, NodeId, TaskId, TaskReason};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Detail is kept this long by default (30 days), ms.
pub const DEFAULT_RETENTION_MS: u64 = 30 * 86_400_000;

/// Fair share's half-life by default (7 days, as Slurm's `PriorityDecayHalfLife`), ms.
pub const DEFAULT_HALF_LIFE_MS: u64 = 7 * 86_400_000;

/// The accounting settings every master applies alike: how long detail is kept
/// (`master --accounting-retention`) and fair share's half-life (`master
/// --fairshare-half-life`; `None`: off). Replicated state: each new leader's barrier carries
/// its own flags, so what the master that leads (last took the lead) was started with is in
/// force on every master, and no two masters fold or rank differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountingSettings {
    /// Detail older than this is folded into daily totals, ms.
    pub retention_ms: u64,
    /// Fair share's half-life, ms (`None`: off).
    #[serde(default)]
    pub half_life_ms: Option<u64>,
}

impl Default for AccountingSettings {
    fn default() -> Self {
        Self {
            retention_ms: DEFAULT_RETENTION_MS,
            half_life_ms: Some(DEFAULT_HALF_LIFE_MS),
        }
    }
}

impl AccountingSettings {
    /// Whether these are the defaults (left out of snapshots then, so states that never
    /// changed them keep their bytes).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

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
    /// Adds one record's CPUs asked, wall time, CPU and GPU seconds.
    fn add_values(&mut self, cpus: f64, elapsed: Option<f64>, cpu: Option<f64>, gpu: Option<f64>) {
        self.tasks += 1;
        let alloc = cpus * elapsed.unwrap_or(0.0);
        self.cpu_alloc_s += alloc;
        if let Some(used) = cpu {
            self.cpu_used_s += used;
            self.cpu_alloc_measured_s += alloc;
        }
        self.gpu_s += gpu.unwrap_or(0.0);
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

/// One record as the book holds it: names interned, absent readings as NaN or `u64::MAX`,
/// so that a million records stay within about 150 MiB (BENCHMARKS.md, "Accounting
/// records"). Converted to and from [`AttemptRecord`] at the book's edges.
#[derive(Clone, Debug, PartialEq)]
struct Stored {
    job: u64,
    task: u64,
    node: u64,
    ended_ms: u64,
    /// `u64::MAX`: never reported started.
    started_ms: u64,
    /// `u64::MAX`: not measured.
    max_mem_mib: u64,
    mem_mib: u64,
    /// NaN: not measured (the `Option<f64>` readings).
    elapsed_s: f64,
    cpu_s: f64,
    gpu_s: f64,
    gpu_util_s: f64,
    dominant_s: f64,
    cpus: f64,
    gpus: f64,
    index: u32,
    attempt: u32,
    /// Into the book's names.
    user: u32,
    partition: u32,
    /// Into the book's names: the models joined by `,` (the empty name: any).
    gpu_models: u32,
    exit_code: i32,
    reason: Option<hetsched_common::TaskReason>,
    gpu_emulated: bool,
}

/// Names (users, partitions, GPU model lists) held once each.
#[derive(Clone, Debug, Default, PartialEq)]
struct Names {
    all: Vec<String>,
    ids: std::collections::HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.all.len() as u32;
        self.all.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        self.all.get(id as usize).map_or("", String::as_str)
    }

    fn find(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

fn nan_of(v: Option<f64>) -> f64 {
    v.filter(|x| !x.is_nan()).unwrap_or(f64::NAN)
}

fn of_nan(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

impl Stored {
    fn of(r: &AttemptRecord, names: &mut Names) -> Self {
        Self {
            job: r.job.get(),
            task: r.task.get(),
            node: r.node.get(),
            ended_ms: r.ended_ms,
            started_ms: r.started_ms.unwrap_or(u64::MAX),
            max_mem_mib: r.max_mem_mib.unwrap_or(u64::MAX),
            mem_mib: r.mem_mib,
            elapsed_s: nan_of(r.elapsed_s),
            cpu_s: nan_of(r.cpu_s),
            gpu_s: nan_of(r.gpu_s),
            gpu_util_s: nan_of(r.gpu_util_s),
            dominant_s: nan_of(r.dominant_s),
            cpus: r.cpus,
            gpus: r.gpus,
            index: r.index,
            attempt: r.attempt,
            user: names.id(&r.user),
            partition: names.id(&r.partition),
            gpu_models: names.id(&r.gpu_models.join(",")),
            exit_code: r.exit_code,
            reason: r.reason,
            gpu_emulated: r.gpu_emulated,
        }
    }

    fn record(&self, names: &Names) -> AttemptRecord {
        let models = names.name(self.gpu_models);
        AttemptRecord {
            job: JobId(self.job),
            task: TaskId(self.task),
            index: self.index,
            attempt: self.attempt,
            user: names.name(self.user).to_string(),
            partition: names.name(self.partition).to_string(),
            node: NodeId(self.node),
            started_ms: (self.started_ms != u64::MAX).then_some(self.started_ms),
            ended_ms: self.ended_ms,
            elapsed_s: of_nan(self.elapsed_s),
            cpus: self.cpus,
            mem_mib: self.mem_mib,
            gpus: self.gpus,
            gpu_models: if models.is_empty() {
                Vec::new()
            } else {
                models.split(',').map(str::to_string).collect()
            },
            cpu_s: of_nan(self.cpu_s),
            max_mem_mib: (self.max_mem_mib != u64::MAX).then_some(self.max_mem_mib),
            gpu_s: of_nan(self.gpu_s),
            gpu_util_s: of_nan(self.gpu_util_s),
            dominant_s: of_nan(self.dominant_s),
            gpu_emulated: self.gpu_emulated,
            state: state_of(self.exit_code, self.reason).into(),
            reason: self.reason,
            exit_code: self.exit_code,
        }
    }

    fn key(&self) -> (u64, u32) {
        (self.task, self.attempt)
    }
}

/// The records and the folded totals.
#[derive(Clone, Debug, Default)]
pub struct AccountingBook {
    /// Detail, in the order the ends were applied.
    records: VecDeque<Stored>,
    /// The attempts `records` holds (a finish reported twice is recorded once). Derived.
    keys: HashSet<(u64, u32)>,
    /// Users', partitions' and GPU models' names. Derived (a snapshot holds the names).
    names: Names,
    /// Folded detail by (day, user, partition).
    days: BTreeMap<(u64, String, String), Totals>,
    /// Fair share: each user's usage (dominant-resource seconds), decayed to the time
    /// beside it (ms).
    decayed: BTreeMap<String, (f64, u64)>,
}

/// Equal when they hold the same records and totals (NaN readings compare equal).
impl PartialEq for AccountingBook {
    fn eq(&self, o: &Self) -> bool {
        self.records.len() == o.records.len()
            && self.days == o.days
            && self.decayed == o.decayed
            && self
                .records
                .iter()
                .zip(&o.records)
                .all(|(a, b)| a.record(&self.names) == b.record(&o.names))
    }
}

impl Eq for AccountingBook {}

/// The book as written in a snapshot.
#[derive(Serialize, Deserialize)]
struct Document<R, D> {
    records: R,
    days: D,
    #[serde(default)]
    decayed: BTreeMap<String, (f64, u64)>,
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
        let records: Vec<AttemptRecord> =
            self.records.iter().map(|r| r.record(&self.names)).collect();
        Document {
            records,
            days,
            decayed: self.decayed.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AccountingBook {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let d = Document::<Vec<AttemptRecord>, Vec<DayTotal>>::deserialize(deserializer)?;
        let mut book = Self {
            days: d
                .days
                .into_iter()
                .map(|t| ((t.day, t.user, t.partition), t.totals))
                .collect(),
            decayed: d.decayed,
            ..Self::default()
        };
        for r in d.records {
            book.record(r);
        }
        Ok(book)
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

    /// Whether `r`'s attempt is recorded already (its detail not yet folded).
    pub fn holds(&self, r: &AttemptRecord) -> bool {
        self.keys.contains(&(r.task.get(), r.attempt))
    }

    /// Records `r` unless its attempt is recorded already. True when it was recorded.
    pub fn record(&mut self, r: AttemptRecord) -> bool {
        if !self.keys.insert((r.task.get(), r.attempt)) {
            return false;
        }
        let stored = Stored::of(&r, &mut self.names);
        self.records.push_back(stored);
        true
    }

    /// Fair share: charges `r`'s dominant-resource seconds to its user, decaying what the
    /// user had with half-life `half_life_ms` up to `r`'s end.
    pub fn charge(&mut self, r: &AttemptRecord, half_life_ms: u64) {
        let add = r.dominant_s.unwrap_or(0.0);
        let e = self
            .decayed
            .entry(r.user.clone())
            .or_insert((0.0, r.ended_ms));
        *e = (
            decay(e.0, e.1, r.ended_ms, half_life_ms) + add,
            r.ended_ms.max(e.1),
        );
    }

    /// Each user's decayed usage at `now_ms` and its factor F = 2^(−Ū/S): Ū its share of
    /// all users' decayed usage — or of the whole cluster's decayed capacity, when that is
    /// larger — and S its share of the cluster: its weight in `shares` (default 1) over the
    /// weights of the users with usage. By user.
    ///
    /// The capacity: a cluster busy all along would hold `half_life / ln 2` whole-cluster
    /// seconds of decayed usage (∫ 2^(−t/h) dt), the units of `dominant_s`. On a busy
    /// cluster the users' total is about that, and Ū is the plain ratio; while the
    /// cluster idles everyone's usage decays towards 0 and every factor recovers towards 1,
    /// where the plain ratio would stay frozen (uniform decay keeps the ratios).
    pub fn fair_share(
        &self,
        now_ms: u64,
        half_life_ms: u64,
        shares: &BTreeMap<String, u64>,
    ) -> Vec<FairShareInfo> {
        let weight = |u: &str| shares.get(u).copied().unwrap_or(1).max(1) as f64;
        let now: Vec<(&String, f64)> = self
            .decayed
            .iter()
            .map(|(u, (v, at))| (u, decay(*v, *at, now_ms, half_life_ms)))
            .collect();
        let used: f64 = now.iter().map(|(_, v)| v).sum();
        let total = used.max(decayed_capacity_s(half_life_ms));
        let weights: f64 = now.iter().map(|(u, _)| weight(u)).sum();
        now.into_iter()
            .map(|(user, v)| {
                let share = weight(user) / weights;
                FairShareInfo {
                    user: user.clone(),
                    decayed_usage: v,
                    factor: if total > 0.0 {
                        (-(v / total) / share).exp2()
                    } else {
                        1.0
                    },
                    share: Some(share),
                }
            })
            .collect()
    }

    /// Folds the detail of attempts that ended before `before_ms` into daily totals.
    pub fn fold_before(&mut self, before_ms: u64) {
        while self.records.front().is_some_and(|r| r.ended_ms < before_ms) {
            let Some(r) = self.records.pop_front() else {
                break;
            };
            self.keys.remove(&r.key());
            let (user, partition) = (self.names.name(r.user), self.names.name(r.partition));
            let key = (r.ended_ms / DAY_MS, user.to_string(), partition.to_string());
            let t = self.days.entry(key).or_default();
            t.add_values(
                r.cpus,
                of_nan(r.elapsed_s),
                of_nan(r.cpu_s),
                of_nan(r.gpu_s),
            );
        }
    }

    /// The detail records `filter` admits, oldest first.
    pub fn history(&self, filter: &HistoryFilter) -> Vec<AttemptRecord> {
        // Records are in end order: the time bounds skip what is outside by search.
        let from = filter
            .since_ms
            .map_or(0, |t| self.records.partition_point(|r| r.ended_ms < t));
        // The cheap conditions on the stored form first; an unknown user has no records.
        let user = match &filter.user {
            Some(u) => match self.names.find(u) {
                Some(id) => Some(id),
                None => return Vec::new(),
            },
            None => None,
        };
        self.records
            .range(from..)
            .filter(|r| user.is_none_or(|u| u == r.user))
            .filter(|r| filter.job.is_none_or(|j| j.get() == r.job))
            .filter(|r| filter.until_ms.is_none_or(|t| r.ended_ms < t))
            .map(|r| r.record(&self.names))
            .filter(|r| filter.admits(r))
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
        for s in self.records.range(from..) {
            let (u, p) = (self.names.name(s.user), self.names.name(s.partition));
            if mine(u) {
                let t = groups.entry(key(s.ended_ms / DAY_MS, u, p)).or_default();
                t.add_values(
                    s.cpus,
                    of_nan(s.elapsed_s),
                    of_nan(s.cpu_s),
                    of_nan(s.gpu_s),
                );
            }
        }
        groups.into_iter().map(|(k, t)| t.shown(k)).collect()
    }
}

/// The decayed usage, in whole-cluster seconds, of a cluster busy all along with half-life
/// `half_life_ms`: ∫₀^∞ 2^(−t/h) dt = h / ln 2.
pub(crate) fn decayed_capacity_s(half_life_ms: u64) -> f64 {
    half_life_ms as f64 / 1000.0 / std::f64::consts::LN_2
}

/// `value` held at `from_ms`, decayed with half-life `half_life_ms` to `to_ms` (never grown:
/// a time before `from_ms` leaves it as it is).
pub fn decay(value: f64, from_ms: u64, to_ms: u64, half_life_ms: u64) -> f64 {
    let dt = to_ms.saturating_sub(from_ms) as f64;
    value * (-dt / half_life_ms.max(1) as f64).exp2()
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

/// A record's state from how its attempt ended (the stored form keeps only these):
/// `lost` when the master ended it without a report, else by its exit code.
fn state_of(exit_code: i32, reason: Option<TaskReason>) -> &'static str {
    match (exit_code, reason) {
        (_, Some(TaskReason::Lost)) => "lost",
        (0, _) => "succeeded",
        _ => "failed",
    }
}

/// How an attempt ended, as its record says it.
struct Ending<'a> {
    exit_code: i32,
    reason: Option<TaskReason>,
    /// The slave's readings (`None`: none came, every reading `null`).
    usage: Option<&'a UsageRecord>,
}

/// The record of the attempt a finish report ends, drafted from the state before the report
/// is applied: `None` unless `node` ran that attempt and it is the task's current one (a
/// stale or unknown report records nothing). `capacity` is the cluster's, for the
/// attempt's dominant share.
pub fn draft(
    s: &ClusterState,
    node: NodeId,
    report: &TaskReport,
    at_ms: u64,
    capacity: &DrfUsage,
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
    let ending = Ending {
        exit_code: *exit_code,
        reason: *reason,
        usage: usage.as_ref(),
    };
    let at = TaskRef {
        node,
        task: *task,
        attempt: *attempt,
    };
    build(s, at, at_ms, capacity, ending)
}

/// The record of a started attempt the master ends without a report from its slave — its
/// node declared down (`NodeDown`), or its slave no longer holding it (`TaskLost`): state
/// `lost`, reason `lost`, exit code −1 (none), every reading `null` (nothing was measured;
/// fair share charges it nothing). `None` unless it is the task's current attempt on `node`
/// and it had started (an attempt that never ran leaves no record).
pub fn draft_lost(
    s: &ClusterState,
    at: TaskRef,
    at_ms: u64,
    capacity: &DrfUsage,
) -> Option<AttemptRecord> {
    let t = s.task(at.task)?;
    if t.status.state != hetsched_common::TaskState::Running || t.started_ms.is_none() {
        return None;
    }
    let ending = Ending {
        exit_code: -1,
        reason: Some(TaskReason::Lost),
        usage: None,
    };
    build(s, at, at_ms, capacity, ending)
}

/// The record of attempt `at` ending at `at_ms` as `ending` says; `None` unless it is the
/// task's current attempt and ran on that node.
fn build(
    s: &ClusterState,
    at: TaskRef,
    at_ms: u64,
    capacity: &DrfUsage,
    ending: Ending<'_>,
) -> Option<AttemptRecord> {
    let TaskRef {
        node,
        task,
        attempt,
    } = at;
    let t = s.task(task)?;
    if t.status.attempt != attempt || t.attempt_nodes.get(&attempt) != Some(&node) {
        return None;
    }
    let job = s.job(t.job)?;
    let asked = &job.spec.resources;
    let u = ending.usage.cloned().unwrap_or_default();
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
        task,
        index: t.index,
        attempt,
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
        dominant_s: elapsed_ms.map(|ms| {
            DrfUsage::of(asked).dominant_share(capacity) as f64 / 1e9 * ms as f64 / 1000.0
        }),
        gpu_emulated: gpu_emulated || u.gpu_emulated,
        state: state_of(ending.exit_code, ending.reason).into(),
        reason: ending.reason,
        exit_code: ending.exit_code,
    })
}

#[cfg(test)]
#[path = "accounting_tests.rs"]
mod tests;
