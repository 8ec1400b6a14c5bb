//! S1 — the priority configuration: users and groups, their priority and quota per
//! partition (docs/DESIGN.md §S1). Parsed from TOML by `hetsched config apply`, replicated as
//! `SetPriorityConfig`, read by the admission stage.
//!
//! ```toml
//! base_priority = 0
//! protect_min_priority = 100     # optional: --no-preempt jobs at this priority or above
//! [groups]
//! ml = ["u3", "u4"]              # a user may be in several groups
//! [[users]]
//! name = "u1"                    # or: group = "ml" — the group's quota is shared by its members
//! partition = "default"
//! priority = 100
//! quota = { cpus = 4 }           # any of cpus, mem (MiB), gpus; omitted = not limited
//! [shares]                       # optional (issue 53): fair-share weights, default 1
//! u1 = 2                         # u1's share is twice that of a user not named
//! ```
//!
//! A user's own entry wins over its groups'; among groups, the highest priority wins (ties:
//! the group named first in alphabetical order). Users without an entry get the base priority.

use crate::ResourceRequest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A quota: the most a user (or group) may hold at its priority in one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// CPU, millicores (`None`: not limited).
    #[serde(default)]
    pub cpu_milli: Option<u64>,
    /// Memory, MiB.
    #[serde(default)]
    pub mem_mib: Option<u64>,
    /// GPUs, thousandths of a device.
    #[serde(default)]
    pub gpu_milli: Option<u64>,
}

/// One `[[users]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityEntry {
    /// Whose entry: a user or a group.
    pub who: Principal,
    /// Partition it applies to.
    pub partition: String,
    /// Priority (higher is more important).
    pub priority: i64,
    /// Quota at that priority.
    pub quota: Quota,
}

/// A user or a group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Principal {
    /// One user.
    User(String),
    /// A group from `[groups]`: its members share the quota.
    Group(String),
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::User(u) => write!(f, "user {u}"),
            Principal::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// The replicated priority configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityConfig {
    /// Version, set by the state machine when applied (1, 2, ...; 0 = never configured).
    #[serde(default)]
    pub version: u64,
    /// Priority of users without an entry, and of tasks beyond their quota.
    #[serde(default)]
    pub base_priority: i64,
    /// Jobs submitted `--no-preempt` are accepted only for users whose priority is at least
    /// this; their tasks are then never preemption victims. `None`: `--no-preempt` refused.
    #[serde(default)]
    pub protect_min_priority: Option<i64>,
    /// Groups and their members.
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
    /// Entries.
    #[serde(default)]
    pub entries: Vec<PriorityEntry>,
    /// Issue 53: each named user's fair-share weight (`[shares]`, ≥ 1); a user not named
    /// weighs 1. A user's share S is its weight over the weights of the users with usage.
    /// Left out while empty, so configurations without it keep their bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, u64>,
}

/// What a user gets in a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// Whose quota it is (a group's is shared).
    pub who: &'a Principal,
    /// Priority.
    pub priority: i64,
    /// Quota.
    pub quota: Quota,
}

impl PriorityConfig {
    /// The entry that applies to `user` in `partition`, if any.
    pub fn resolve(&self, user: &str, partition: &str) -> Option<Resolved<'_>> {
        let own = self
            .entries
            .iter()
            .find(|e| e.partition == partition && e.who == Principal::User(user.to_string()));
        let best = own.or_else(|| {
            self.entries
                .iter()
                .filter(|e| e.partition == partition)
                .filter(|e| match &e.who {
                    Principal::Group(g) => self
                        .groups
                        .get(g)
                        .is_some_and(|m| m.iter().any(|u| u == user)),
                    Principal::User(_) => false,
                })
                // Highest priority; among equals the first group by name.
                .min_by(|a, b| b.priority.cmp(&a.priority).then(a.who.cmp(&b.who)))
        })?;
        Some(Resolved {
            who: &best.who,
            priority: best.priority,
            quota: best.quota,
        })
    }

    /// The priority a user's tasks get when within quota (the base priority without an entry).
    pub fn priority_of(&self, user: &str, partition: &str) -> i64 {
        self.resolve(user, partition)
            .map_or(self.base_priority, |r| r.priority)
    }
}

impl Quota {
    /// Whether `used + demand` stays within the quota in every limited dimension.
    pub fn admits(&self, used: &Usage, demand: &ResourceRequest) -> bool {
        let within = |limit: Option<u64>, used: u64, more: u64| {
            limit.is_none_or(|l| used.saturating_add(more) <= l)
        };
        within(self.cpu_milli, used.cpu_milli, demand.cpu_milli)
            && within(self.mem_mib, used.mem_mib, demand.mem_mib)
            && within(self.gpu_milli, used.gpu_milli, demand.gpu.total_milli())
    }
}

/// Resources held against a quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU, millicores.
    pub cpu_milli: u64,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// GPUs, thousandths.
    pub gpu_milli: u64,
}

impl Usage {
    /// Adds one task's demand.
    pub fn add(&mut self, r: &ResourceRequest) {
        self.cpu_milli += r.cpu_milli;
        self.mem_mib += r.mem_mib;
        self.gpu_milli += r.gpu.total_milli();
    }
}

/// A priority file that could not be used: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", line.map(|l| format!("line {l}")).unwrap_or_default(), key.as_ref().map(|k| format!(", key {k}")).unwrap_or_default())]
pub struct ConfigError {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key at fault, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQuota {
    cpus: Option<f64>,
    mem: Option<u64>,
    gpus: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: Option<String>,
    group: Option<String>,
    #[serde(default = "default_partition")]
    partition: String,
    priority: i64,
    quota: Option<FileQuota>,
}

fn default_partition() -> String {
    "default".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    base_priority: i64,
    protect_min_priority: Option<i64>,
    #[serde(default)]
    groups: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    users: Vec<toml::Spanned<FileEntry>>,
    #[serde(default)]
    shares: BTreeMap<String, u64>,
}

/// Parses a priority file (TOML). The whole file is rejected on the first error, with its
/// line and key.
pub fn parse_priority_toml(text: &str) -> Result<PriorityConfig, ConfigError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let syntax = |e: toml::de::Error| ConfigError {
        line: e.span().map(|s| line_of(s.start)),
        key: None,
        message: e.message().to_string(),
    };
    let de = toml::Deserializer::parse(text).map_err(syntax)?;
    // The path names the key at fault; the parser's span, its line.
    let file: FileConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().iter().next_back().and_then(|seg| match seg {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            _ => None,
        });
        let inner = e.into_inner();
        ConfigError {
            key,
            ..syntax(inner)
        }
    })?;
    // Each `[[users]]` entry's span gives its line for the checks below.
    let entry_lines: Vec<usize> = file.users.iter().map(|e| line_of(e.span().start)).collect();
    let at = |i: usize, key: &str, message: String| ConfigError {
        line: entry_lines.get(i).copied(),
        key: Some(key.to_string()),
        message,
    };
    let mut cfg = PriorityConfig {
        version: 0,
        base_priority: file.base_priority,
        protect_min_priority: file.protect_min_priority,
        groups: file.groups,
        entries: Vec::new(),
        shares: BTreeMap::new(),
    };
    if let Some((user, _)) = file.shares.iter().find(|(_, w)| **w == 0) {
        return Err(ConfigError {
            line: None,
            key: Some(user.clone()),
            message: format!("[shares] {user}: a share is a whole number of at least 1"),
        });
    }
    cfg.shares = file.shares;
    for (i, e) in file
        .users
        .into_iter()
        .map(toml::Spanned::into_inner)
        .enumerate()
    {
        let who = match (e.name, e.group) {
            (Some(n), None) if !n.is_empty() => Principal::User(n),
            (None, Some(g)) => {
                if !cfg.groups.contains_key(&g) {
                    return Err(at(i, "group", format!("group {g:?} is not in [groups]")));
                }
                Principal::Group(g)
            }
            (Some(_), Some(_)) => {
                return Err(at(i, "name", "give name or group, not both".into()));
            }
            _ => {
                return Err(at(
                    i,
                    "name",
                    "each [[users]] entry needs name or group".into(),
                ))
            }
        };
        let milli = |v: Option<f64>, key: &str| -> Result<Option<u64>, ConfigError> {
            match v {
                None => Ok(None),
                Some(x) if x.is_finite() && x >= 0.0 => Ok(Some((x * 1000.0).round() as u64)),
                Some(x) => Err(at(i, key, format!("{x} is not a non-negative number"))),
            }
        };
        let quota = match e.quota {
            None => Quota::default(),
            Some(q) => Quota {
                cpu_milli: milli(q.cpus, "quota.cpus")?,
                mem_mib: q.mem,
                gpu_milli: milli(q.gpus, "quota.gpus")?,
            },
        };
        if cfg
            .entries
            .iter()
            .any(|x| x.who == who && x.partition == e.partition)
        {
            return Err(at(
                i,
                "partition",
                format!("{who} has two entries for partition {:?}", e.partition),
            ));
        }
        cfg.entries.push(PriorityEntry {
            who,
            partition: e.partition,
            priority: e.priority,
            quota,
        });
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = r#"
base_priority = 0
[groups]
ml = ["u3", "u4"]
ops = ["u4"]
[[users]]
name = "u1"
priority = 100
quota = { cpus = 4 }
[[users]]
name = "u2"
partition = "default"
priority = 50
quota = { cpus = 8 }
[[users]]
group = "ml"
priority = 30
quota = { gpus = 2 }
[[users]]
group = "ops"
priority = 70
[[users]]
name = "u3"
partition = "gpu"
priority = 90
"#;

    #[test]
    fn entries_resolve_own_first_then_highest_group() {
        let c = parse_priority_toml(S1).expect("parses");
        assert_eq!(c.priority_of("u1", "default"), 100);
        assert_eq!(
            c.resolve("u1", "default").map(|r| r.quota.cpu_milli),
            Some(Some(4000))
        );
        assert_eq!(c.priority_of("nobody", "default"), 0);
        assert_eq!(c.priority_of("u1", "other"), 0);
        // u3: only ml in default; its own entry in gpu.
        assert_eq!(c.priority_of("u3", "default"), 30);
        assert_eq!(c.priority_of("u3", "gpu"), 90);
        // u4 is in ml (30) and ops (70): the highest wins.
        let r = c.resolve("u4", "default").expect("entry");
        assert_eq!(
            (r.priority, r.who.clone()),
            (70, Principal::Group("ops".into()))
        );
    }

    #[test]
    fn bad_files_name_line_and_key() {
        let e = parse_priority_toml(
            "base_priority = 0\n[[users]]\nname = \"a\"\npriority = \"high\"\n",
        )
        .expect_err("bad");
        assert_eq!(e.line, Some(4), "{e}");
        assert_eq!(e.key.as_deref(), Some("priority"), "{e}");
        let e = parse_priority_toml("[[users]]\nname = \"a\"\npriority = 1\ncolour = 3\n")
            .expect_err("unknown key");
        assert!(e.to_string().contains("colour"), "{e}");
        assert_eq!((e.line, e.key.as_deref()), (Some(4), Some("colour")));
        let e =
            parse_priority_toml("[[users]]\ngroup = \"nope\"\npriority = 1\n").expect_err("group");
        assert_eq!((e.line, e.key.as_deref()), (Some(1), Some("group")));
        let e = parse_priority_toml(
            "[[users]]\nname = \"a\"\npriority = 1\n[[users]]\nname = \"a\"\npriority = 2\n",
        )
        .expect_err("duplicate");
        assert_eq!(e.line, Some(4), "{e}");
        let e =
            parse_priority_toml("[[users]]\nname = \"a\"\npriority = 1\nquota = { cpus = -1 }\n")
                .expect_err("negative");
        assert_eq!(e.key.as_deref(), Some("quota.cpus"));
    }

    #[test]
    fn shares_are_whole_weights_of_at_least_one() {
        let c = parse_priority_toml("[shares]\nu1 = 3\nu2 = 1\n").expect("parses");
        assert_eq!(
            c.shares,
            BTreeMap::from([("u1".to_string(), 3), ("u2".to_string(), 1)])
        );
        assert!(parse_priority_toml(S1).expect("parses").shares.is_empty());
        let e = parse_priority_toml("[shares]\nu1 = 0\n").expect_err("zero");
        assert_eq!(e.key.as_deref(), Some("u1"), "{e}");
        let e = parse_priority_toml("[shares]\nu1 = 1.5\n").expect_err("not whole");
        assert_eq!(e.key.as_deref(), Some("u1"), "{e}");
    }

    #[test]
    fn quotas_admit_within_limits_only() {
        let q = Quota {
            cpu_milli: Some(4000),
            mem_mib: None,
            gpu_milli: None,
        };
        let r = ResourceRequest {
            cpu_milli: 2000,
            mem_mib: 1 << 20,
            ..Default::default()
        };
        let mut used = Usage::default();
        assert!(q.admits(&used, &r));
        used.add(&r);
        assert!(q.admits(&used, &r));
        used.add(&r);
        assert!(!q.admits(&used, &r));
    }
}
