//! Chaos scenarios (TOML; the built-in ones are `chaos/scenarios/*.toml`, embedded in the
//! binary) and the seeded fault schedule drawn from one. A seed replays the schedule and the
//! workload, not thread timing. Targets named by role (`leader`, `follower`) are resolved when
//! the fault fires.

use hetsched_common::rng::SplitMix64;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The scenarios built into the binary, by name.
pub const BUILTIN: [(&str, &str); 8] = [
    ("kill-leader", include_str!("../scenarios/kill-leader.toml")),
    (
        "partition-leader",
        include_str!("../scenarios/partition-leader.toml"),
    ),
    (
        "pause-follower",
        include_str!("../scenarios/pause-follower.toml"),
    ),
    (
        "flapping-slaves",
        include_str!("../scenarios/flapping-slaves.toml"),
    ),
    (
        "slave-restart",
        include_str!("../scenarios/slave-restart.toml"),
    ),
    (
        "rolling-restart",
        include_str!("../scenarios/rolling-restart.toml"),
    ),
    ("mixed", include_str!("../scenarios/mixed.toml")),
    ("partitions", include_str!("../scenarios/partitions.toml")),
];

/// A fault the nemesis can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kill -9 the leader; restart it at heal.
    KillLeader,
    /// kill -9 a follower master; restart it at heal.
    KillFollower,
    /// kill -9 a slave agent (its tasks keep running); restart it at heal.
    KillSlave,
    /// SIGSTOP a follower master; SIGCONT at heal.
    PauseFollower,
    /// SIGSTOP the leader; SIGCONT at heal.
    PauseLeader,
    /// SIGSTOP a slave agent; SIGCONT at heal.
    PauseSlave,
    /// Cut the leader from every other master (admin port transport faults; with `--netns`
    /// from every other process, by nftables rules).
    PartitionLeader,
    /// Cut one follower from every other master: a minority partition (with `--netns` a
    /// majority/minority split of the masters and slaves).
    PartitionMinority,
    /// Cut one link between two masters.
    PartitionLink,
    /// Drop what one master sends to another, one way (only with `--netns`; skipped
    /// otherwise).
    PartitionOneWay,
    /// Cut one process, a master or a slave (by the seed), from every other one (a slave only
    /// with `--netns`; skipped otherwise).
    PartitionNode,
    /// Delay every master's Raft messages.
    Delay,
    /// kill -9 and restart each master in turn.
    RollingRestart,
}

impl FaultKind {
    /// Whether the fault acts on processes (signals, kill and restart): only a local cluster
    /// the tool started can take those; `--attach` skips them.
    pub fn is_process_fault(self) -> bool {
        !matches!(
            self,
            FaultKind::PartitionLeader
                | FaultKind::PartitionMinority
                | FaultKind::PartitionLink
                | FaultKind::PartitionOneWay
                | FaultKind::PartitionNode
                | FaultKind::Delay
        )
    }

    /// The name scenarios use.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// A scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// What it exercises.
    #[serde(default)]
    pub description: String,
    /// Masters to start.
    #[serde(default = "default_masters")]
    pub masters: u32,
    /// Slaves to start.
    #[serde(default = "default_slaves")]
    pub slaves: u32,
    /// Cores per slave.
    #[serde(default = "default_cpus")]
    pub slave_cpus: u32,
    /// The faults drawn from (uniformly, by the seed).
    pub faults: Vec<FaultKind>,
    /// Time between the starts of two faults (`6s`).
    #[serde(default = "default_interval", with = "humantime_serde_str")]
    pub interval: Duration,
    /// How long a fault lasts before it is healed (`3s`).
    #[serde(default = "default_hold", with = "humantime_serde_str")]
    pub hold: Duration,
    /// Jobs submitted per second.
    #[serde(default = "default_rate")]
    pub jobs_per_s: f64,
    /// Most tasks per job (each job draws 1..=this).
    #[serde(default = "default_tasks")]
    pub max_tasks_per_job: u32,
    /// How long each task runs (`1500ms`).
    #[serde(default = "default_task_time", with = "humantime_serde_str")]
    pub task_time: Duration,
    /// Share of jobs that run an API program (sha256 and sort calls in the slave) instead of
    /// a command, 0..=1.
    #[serde(default = "default_program_share")]
    pub program_share: f64,
    /// Issue 51: share of the workload's submissions that are a chain of `chain_length`
    /// jobs, each `after` the one before (0: none; the `early-start` rule checks their
    /// order in every master's log).
    #[serde(default)]
    pub chain_share: f64,
    /// Jobs in one chain.
    #[serde(default = "default_chain_length")]
    pub chain_length: u32,
    /// Issue 51: share of the workload's submissions that are a flow (submitted as
    /// `submit-flow` does, in one entry): a `prep` step, `flow_width` steps each needing it,
    /// and a `join` step needing them all (0: none; the `early-start` rule checks their order
    /// in every master's log).
    #[serde(default)]
    pub flow_share: f64,
    /// Parallel steps in one flow (between `prep` and `join`).
    #[serde(default = "default_flow_width")]
    pub flow_width: u32,
}

fn default_masters() -> u32 {
    3
}
fn default_slaves() -> u32 {
    2
}
fn default_cpus() -> u32 {
    4
}
fn default_interval() -> Duration {
    Duration::from_secs(6)
}
fn default_hold() -> Duration {
    Duration::from_secs(3)
}
fn default_rate() -> f64 {
    1.0
}
fn default_tasks() -> u32 {
    3
}
fn default_program_share() -> f64 {
    0.2
}
fn default_chain_length() -> u32 {
    5
}
fn default_flow_width() -> u32 {
    3
}
fn default_task_time() -> Duration {
    Duration::from_millis(1500)
}

mod humantime_serde_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// A scenario that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Neither a built-in name nor a readable file.
    #[error("no scenario {0:?}: not a built-in ({1}) and not a readable file")]
    Unknown(String, String),
    /// The TOML is invalid.
    #[error("{origin}: {message}")]
    Invalid {
        /// File or built-in name.
        origin: String,
        /// What is wrong (with line and column from the TOML parser).
        message: String,
    },
}

impl Scenario {
    /// Parses a scenario's TOML; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let s: Scenario = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if s.faults.is_empty() {
            return Err(invalid("field `faults`: at least one fault kind".into()));
        }
        if s.masters == 0 || s.slaves == 0 || s.slave_cpus == 0 {
            return Err(invalid(
                "fields `masters`, `slaves`, `slave_cpus`: at least 1".into(),
            ));
        }
        if !(s.jobs_per_s > 0.0 && s.jobs_per_s <= 100.0) {
            return Err(invalid("field `jobs_per_s`: between 0 and 100".into()));
        }
        if !(0.0..=1.0).contains(&s.program_share) {
            return Err(invalid("field `program_share`: between 0 and 1".into()));
        }
        for (key, share) in [("chain_share", s.chain_share), ("flow_share", s.flow_share)] {
            if !(0.0..=1.0).contains(&share) {
                return Err(invalid(format!("field `{key}`: between 0 and 1")));
            }
        }
        if s.flow_width == 0 {
            return Err(invalid("field `flow_width`: at least 1".into()));
        }
        if s.max_tasks_per_job == 0 || s.interval.is_zero() {
            return Err(invalid(
                "fields `max_tasks_per_job`, `interval`: greater than 0".into(),
            ));
        }
        Ok(s)
    }

    /// A built-in scenario by name.
    pub fn builtin(name: &str) -> Option<Result<Self, ScenarioError>> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| Self::parse(n, text))
    }

    /// The built-in names, comma-separated (for messages).
    pub fn builtin_names() -> String {
        BUILTIN
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The fault schedule for a run of `duration` under `seed`: a fault every `interval`
    /// (the first after one interval), each held for `hold`, none starting in the last
    /// `hold` of the run.
    pub fn schedule(&self, seed: u64, duration: Duration) -> Vec<PlannedFault> {
        let mut rng = SplitMix64::new(seed ^ 0xc4a0_5eed);
        let mut out = Vec::new();
        let mut at = self.interval;
        while at + self.hold <= duration {
            let kind = self.faults[rng.below(self.faults.len() as u64) as usize];
            out.push(PlannedFault {
                at_ms: at.as_millis() as u64,
                hold_ms: self.hold.as_millis() as u64,
                kind,
                pick: rng.next_u64(),
            });
            at += self.interval;
        }
        out
    }
}

/// One fault of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedFault {
    /// When it starts, ms after the run started.
    pub at_ms: u64,
    /// How long it lasts.
    pub hold_ms: u64,
    /// What.
    pub kind: FaultKind,
    /// Seeded choice among the candidate targets (`pick % candidates`).
    pub pick: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses() {
        for (name, _) in BUILTIN {
            let s = Scenario::builtin(name).unwrap().unwrap();
            assert_eq!(s.name, name);
        }
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        let s = Scenario::builtin("mixed").unwrap().unwrap();
        let a = s.schedule(7, Duration::from_secs(40));
        assert_eq!(a, s.schedule(7, Duration::from_secs(40)));
        assert!(!a.is_empty());
        assert_ne!(a, s.schedule(8, Duration::from_secs(40)));
        let last = a.last().unwrap();
        assert!(last.at_ms + last.hold_ms <= 40_000);
    }

    #[test]
    fn flow_keys_parse_with_defaults_and_mixed_submits_flows() {
        let s = Scenario::parse("x.toml", "name = \"x\"\nfaults = [\"delay\"]\n").unwrap();
        assert_eq!((s.flow_share, s.flow_width), (0.0, 3));
        let s = Scenario::parse(
            "x.toml",
            "name = \"x\"\nfaults = [\"delay\"]\nflow_share = 0.25\nflow_width = 5\n",
        )
        .unwrap();
        assert_eq!((s.flow_share, s.flow_width), (0.25, 5));
        let mixed = Scenario::builtin("mixed").unwrap().unwrap();
        assert!(mixed.flow_share > 0.0 && mixed.chain_share > 0.0);
        for bad in [
            "flow_share = 1.5",
            "flow_share = -0.1",
            "flow_width = 0",
            "chain_share = 2.0",
        ] {
            let key = bad.split(' ').next().unwrap();
            let e = Scenario::parse(
                "x.toml",
                &format!("name = \"x\"\nfaults = [\"delay\"]\n{bad}\n"),
            )
            .unwrap_err();
            assert!(e.to_string().contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_scenarios_say_what_is_wrong() {
        let e = Scenario::parse("x.toml", "name = \"x\"\nfaults = [\"boom\"]\n").unwrap_err();
        assert!(e.to_string().contains("x.toml"), "{e}");
        assert!(e.to_string().contains("boom"), "{e}");
        let e = Scenario::parse("x.toml", "name = \"x\"\nfaults = []\n").unwrap_err();
        assert!(e.to_string().contains("faults"), "{e}");
        let e = Scenario::parse(
            "x.toml",
            "name = \"x\"\nfaults = [\"delay\"]\ninterval = \"soon\"\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("interval") || e.to_string().contains("soon"),
            "{e}"
        );
    }
}
