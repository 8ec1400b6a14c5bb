//! Workflow keys of a job spec (issue 51): dependencies on other jobs, `singleton` and the
//! array throttle `max_running`, as users write them (spec keys, HTTP body keys, `submit`
//! flags of the same names) and as a job carries them into the log.
//!
//! | key | Slurm | the job (or task *i*) may start once |
//! |---|---|---|
//! | `after` | `afterok` | each job named ended with every task succeeded |
//! | `after_any` | `afterany` | each job named ended, in any state |
//! | `after_fail` | `afternotok` | each job named ended failed or cancelled |
//! | `after_each` | `aftercorr` | task *i* of the job named succeeded |
//! | `singleton` | `singleton` | no other singleton job of its (user, name) is under way |
//! | `max_running` | `--array=…%N` | (throttle) fewer than N of its tasks are assigned or running |
//!
//! `after_mode = "any"` (Slurm's `?` separator) makes one met dependency enough, instead of
//! all of them. A dependency that can never be met any more (an `after` job failed) cancels
//! the dependent with end reason `dependency`; in mode `any` only once none can be met.

use crate::{JobId, JobSpec};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The workflow keys of a spec (and of `jobs --json`), in the order the spec declares them.
pub const SPEC_KEYS: [&str; 7] = [
    "after",
    "after_any",
    "after_fail",
    "after_each",
    "after_mode",
    "singleton",
    "max_running",
];

/// How a job's dependencies combine (`after_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterMode {
    /// Every dependency must be met (Slurm's `,`).
    #[default]
    All,
    /// One met dependency is enough (Slurm's `?`).
    Any,
}

impl AfterMode {
    /// Whether this is the default, `all` (left out of the encoding).
    pub fn is_all(&self) -> bool {
        *self == AfterMode::All
    }

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            AfterMode::All => "all",
            AfterMode::Any => "any",
        }
    }
}

impl fmt::Display for AfterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AfterMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => Ok(AfterMode::All),
            "any" => Ok(AfterMode::Any),
            other => Err(format!(
                "after_mode {other:?} is neither \"all\" nor \"any\""
            )),
        }
    }
}

/// The kind of one dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DependencyKind {
    /// `after`: the job must succeed.
    After,
    /// `after_any`: the job must end.
    AfterAny,
    /// `after_fail`: the job must fail or be cancelled.
    AfterFail,
    /// `after_each`: task *i* of the job must succeed.
    AfterEach,
}

impl DependencyKind {
    /// The spec key (`after`, `after_any`, `after_fail`, `after_each`).
    pub fn key(self) -> &'static str {
        match self {
            DependencyKind::After => "after",
            DependencyKind::AfterAny => "after_any",
            DependencyKind::AfterFail => "after_fail",
            DependencyKind::AfterEach => "after_each",
        }
    }

    /// The `submit` flag (`--after`, `--after-any`, ...).
    pub fn flag(self) -> &'static str {
        match self {
            DependencyKind::After => "--after",
            DependencyKind::AfterAny => "--after-any",
            DependencyKind::AfterFail => "--after-fail",
            DependencyKind::AfterEach => "--after-each",
        }
    }
}

/// Returns `false`, for `skip_serializing_if` of a flag that is usually off.
pub fn is_false(b: &bool) -> bool {
    !*b
}

impl JobSpec {
    /// Every dependency of the job, in key order (`after`, `after_any`, `after_fail`,
    /// `after_each`), each job as often as it was named.
    pub fn dependencies(&self) -> impl Iterator<Item = (DependencyKind, JobId)> + '_ {
        fn of(
            kind: DependencyKind,
            jobs: &[JobId],
        ) -> impl Iterator<Item = (DependencyKind, JobId)> + '_ {
            jobs.iter().map(move |j| (kind, *j))
        }
        of(DependencyKind::After, &self.after)
            .chain(of(DependencyKind::AfterAny, &self.after_any))
            .chain(of(DependencyKind::AfterFail, &self.after_fail))
            .chain(self.after_each.map(|j| (DependencyKind::AfterEach, j)))
    }

    /// Whether the job names another job it follows.
    pub fn has_dependencies(&self) -> bool {
        !self.after.is_empty()
            || !self.after_any.is_empty()
            || !self.after_fail.is_empty()
            || self.after_each.is_some()
    }

    /// Whether anything holds the job's tasks besides resources: dependencies, `singleton`
    /// or `max_running` (the scheduler's gate passes every other job untouched).
    pub fn is_gated(&self) -> bool {
        self.has_dependencies() || self.singleton || self.max_running.is_some()
    }

    /// The workflow keys in brief, as the `jobs` DEPENDS column shows them
    /// (`after:12,13 each:14 singleton max:2`; `-` when the job has none).
    pub fn depends_brief(&self) -> String {
        let ids = |jobs: &[JobId]| {
            jobs.iter()
                .map(|j| j.0.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut parts = Vec::new();
        for (name, jobs) in [
            ("after", &self.after),
            ("any", &self.after_any),
            ("fail", &self.after_fail),
        ] {
            if !jobs.is_empty() {
                parts.push(format!("{name}:{}", ids(jobs)));
            }
        }
        if let Some(j) = self.after_each {
            parts.push(format!("each:{}", j.0));
        }
        if self.after_mode == AfterMode::Any && self.has_dependencies() {
            parts.push("(any-of)".into());
        }
        if self.singleton {
            parts.push("singleton".into());
        }
        if let Some(n) = self.max_running {
            parts.push(format!("max:{n}"));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(" ")
        }
    }

    /// Checks the workflow keys alone (part of [`JobSpec::validate`]).
    pub(crate) fn validate_workflow(&self) -> Result<(), String> {
        if self.max_running == Some(0) {
            return Err("max_running must be at least 1".into());
        }
        if self.after_mode == AfterMode::Any && !self.has_dependencies() {
            return Err("after_mode = \"any\" needs dependencies (after, after_any, after_fail or after_each)".into());
        }
        if let Some(j) = self.dependencies().map(|(_, j)| j).find(|j| j.0 == 0) {
            return Err(format!("{j} is not a job id"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_workflow_keys_stay_out_of_the_encoding() {
        let spec = serde_json::to_value(JobSpec::default()).expect("json");
        for key in SPEC_KEYS {
            assert!(spec.get(key).is_none(), "{key} written while unset");
        }
        let with = JobSpec {
            after: vec![JobId(3)],
            after_each: Some(JobId(4)),
            after_mode: AfterMode::Any,
            singleton: true,
            max_running: Some(2),
            ..JobSpec::default()
        };
        let bytes = rmp_serde::to_vec_named(&with).expect("encode");
        let back: JobSpec = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back, with);
        assert_eq!(
            with.depends_brief(),
            "after:3 each:4 (any-of) singleton max:2"
        );
        assert_eq!(JobSpec::default().depends_brief(), "-");
    }

    #[test]
    fn dependencies_are_listed_in_key_order() {
        let spec = JobSpec {
            after: vec![JobId(1)],
            after_any: vec![JobId(2)],
            after_fail: vec![JobId(3)],
            after_each: Some(JobId(4)),
            ..JobSpec::default()
        };
        let kinds: Vec<_> = spec.dependencies().collect();
        assert_eq!(
            kinds,
            vec![
                (DependencyKind::After, JobId(1)),
                (DependencyKind::AfterAny, JobId(2)),
                (DependencyKind::AfterFail, JobId(3)),
                (DependencyKind::AfterEach, JobId(4)),
            ]
        );
        assert!(spec.is_gated());
        assert!(!JobSpec::default().is_gated());
    }

    #[test]
    fn bad_workflow_keys_are_refused() {
        let zero = JobSpec {
            max_running: Some(0),
            ..JobSpec::default()
        };
        assert!(zero.validate_workflow().is_err());
        let lonely_any = JobSpec {
            after_mode: AfterMode::Any,
            ..JobSpec::default()
        };
        assert!(lonely_any.validate_workflow().is_err());
        assert_eq!("any".parse::<AfterMode>(), Ok(AfterMode::Any));
        assert!("some".parse::<AfterMode>().is_err());
    }
}
