//! S1 — admission: the priority each task of a new job gets, from its user's entry in the
//! priority configuration and what that user (or group) already holds against its quota
//! in the partition (docs/DESIGN.md §S1).
//!
//! Tasks are admitted in submission order. A task whose demand still fits in the remaining
//! quota (quota − the non-final tasks holding the entry's priority, floored at 0) gets the
//! entry's priority and counts against the quota from then on; any other gets the base
//! priority. The decision is taken once, when the job is applied, and never revisited:
//! the same log gives the same priorities on every replica.

use hetsched_common::priority::{Principal, PriorityConfig, Usage};
use hetsched_common::ResourceRequest;

/// What one task was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Its priority.
    pub priority: i64,
    /// The principal whose quota it holds (none at base priority).
    pub quota: Option<Principal>,
}

/// Admits `count` tasks of `demand` each for `user` in `partition`, given what the entry's
/// principal holds already (`held`, asked only when the user has an entry).
pub fn admit(
    cfg: &PriorityConfig,
    user: &str,
    partition: &str,
    demand: &ResourceRequest,
    count: u32,
    held: impl FnOnce(&Principal) -> Usage,
) -> Vec<Admitted> {
    let base = Admitted {
        priority: cfg.base_priority,
        quota: None,
    };
    let Some(entry) = cfg.resolve(user, partition) else {
        return vec![base; count as usize];
    };
    let mut used = held(entry.who);
    (0..count)
        .map(|_| {
            if entry.quota.admits(&used, demand) {
                used.add(demand);
                Admitted {
                    priority: entry.priority,
                    quota: Some(entry.who.clone()),
                }
            } else {
                base.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::priority::parse_priority_toml;

    fn cpus(n: u64) -> ResourceRequest {
        ResourceRequest {
            cpu_milli: n * 1000,
            mem_mib: 1,
            ..Default::default()
        }
    }

    #[test]
    fn tasks_within_quota_get_the_users_priority_the_rest_the_base() {
        let cfg = parse_priority_toml(
            "base_priority = 1\n[[users]]\nname = \"u\"\npriority = 9\nquota = { cpus = 5 }\n",
        )
        .expect("config");
        let got: Vec<i64> = admit(&cfg, "u", "default", &cpus(2), 4, |_| Usage::default())
            .iter()
            .map(|a| a.priority)
            .collect();
        assert_eq!(got, vec![9, 9, 1, 1]);
        // What is held already counts.
        let held = Usage {
            cpu_milli: 4000,
            ..Default::default()
        };
        let got: Vec<i64> = admit(&cfg, "u", "default", &cpus(1), 2, |_| held)
            .iter()
            .map(|a| a.priority)
            .collect();
        assert_eq!(got, vec![9, 1]);
        // No entry: base priority, and the usage is not even looked at.
        let got = admit(&cfg, "x", "default", &cpus(1), 1, |_| panic!("not asked"));
        assert_eq!(
            got,
            vec![Admitted {
                priority: 1,
                quota: None
            }]
        );
    }
}
