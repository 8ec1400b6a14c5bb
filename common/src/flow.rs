//! Flows (issue 51): jobs submitted together as named steps, each step following others by
//! name (`needs` = `after`, `needs_any` = `after_any`, `needs_fail` = `after_fail`,
//! `each` = `after_each`). A flow is checked whole here — names unique, every name known,
//! no cycle, `each` counts equal — by the CLI before it sends anything and again by the
//! state machine before it hands out an id; the state machine then submits the steps in
//! [`FlowSpec::order`], each naming the jobs its upstream steps became.
//!
//! The file format (`[[step]]` tables) is read by [`crate::flowfile`].

use crate::{DependencyKind, JobId, JobSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A flow as submitted: its steps in the file's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowSpec {
    /// The steps.
    pub steps: Vec<FlowStep>,
}

/// One step: a job and the steps it follows, by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowStep {
    /// Unique within the flow.
    pub name: String,
    /// The job (its own `after…` keys may name jobs outside the flow).
    pub spec: JobSpec,
    /// Start once each of these steps succeeded (`after`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// Start once each of these steps ended (`after_any`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_any: Vec<String>,
    /// Start once each of these steps failed or was cancelled (`after_fail`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_fail: Vec<String>,
    /// Task *i* starts once task *i* of this step succeeded (`after_each`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<String>,
}

impl FlowStep {
    /// A step running `spec` that follows nothing.
    pub fn new(name: &str, spec: JobSpec) -> Self {
        Self {
            name: name.to_string(),
            spec,
            needs: Vec::new(),
            needs_any: Vec::new(),
            needs_fail: Vec::new(),
            each: None,
        }
    }

    /// The steps this one follows, with the kind of each edge and the key that names it.
    pub fn upstream(&self) -> impl Iterator<Item = (DependencyKind, &str)> + '_ {
        self.needs
            .iter()
            .map(|n| (DependencyKind::After, n.as_str()))
            .chain(
                self.needs_any
                    .iter()
                    .map(|n| (DependencyKind::AfterAny, n.as_str())),
            )
            .chain(
                self.needs_fail
                    .iter()
                    .map(|n| (DependencyKind::AfterFail, n.as_str())),
            )
            .chain(
                self.each
                    .iter()
                    .map(|n| (DependencyKind::AfterEach, n.as_str())),
            )
    }
}

/// The flow key of a dependency kind, as the file writes it.
pub fn flow_key(kind: DependencyKind) -> &'static str {
    match kind {
        DependencyKind::After => "needs",
        DependencyKind::AfterAny => "needs_any",
        DependencyKind::AfterFail => "needs_fail",
        DependencyKind::AfterEach => "each",
    }
}

/// Why a flow is refused; `step` is the index of the step to blame (for the file's line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowError {
    /// No step at all.
    Empty,
    /// A step without a name.
    Unnamed {
        /// The step.
        step: usize,
    },
    /// A name given twice.
    Duplicate {
        /// The second step of that name.
        step: usize,
        /// The name.
        name: String,
    },
    /// A step follows a name no step has.
    Unknown {
        /// The step.
        step: usize,
        /// The key naming it (`needs`, `each`, ...).
        key: &'static str,
        /// The unknown name.
        name: String,
    },
    /// Steps follow each other in a circle: the names in order, the first again at the end.
    Cycle {
        /// The first step of the cycle.
        step: usize,
        /// `prep, train, prep`.
        names: Vec<String>,
    },
    /// `each` between steps of different task counts.
    EachCount {
        /// The step.
        step: usize,
        /// Why, in words.
        why: String,
    },
}

impl FlowError {
    /// The step to blame, if one is.
    pub fn step(&self) -> Option<usize> {
        match self {
            FlowError::Empty => None,
            FlowError::Unnamed { step }
            | FlowError::Duplicate { step, .. }
            | FlowError::Unknown { step, .. }
            | FlowError::Cycle { step, .. }
            | FlowError::EachCount { step, .. } => Some(*step),
        }
    }
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowError::Empty => write!(f, "a flow needs at least one [[step]]"),
            FlowError::Unnamed { step } => write!(f, "step {} has no name", step + 1),
            FlowError::Duplicate { name, .. } => write!(f, "step name {name:?} is used twice"),
            FlowError::Unknown { key, name, .. } => {
                write!(f, "{key} names an unknown step {name:?}")
            }
            FlowError::Cycle { names, .. } => write!(f, "cycle: {}", names.join(" → ")),
            FlowError::EachCount { why, .. } => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for FlowError {}

impl FlowSpec {
    /// The steps in an order that submits every step after those it follows (the file's
    /// order where it is free), or why the flow is invalid.
    pub fn order(&self) -> Result<Vec<usize>, FlowError> {
        if self.steps.is_empty() {
            return Err(FlowError::Empty);
        }
        let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, s) in self.steps.iter().enumerate() {
            if s.name.is_empty() {
                return Err(FlowError::Unnamed { step: i });
            }
            if by_name.insert(s.name.as_str(), i).is_some() {
                return Err(FlowError::Duplicate {
                    step: i,
                    name: s.name.clone(),
                });
            }
        }
        // Edges: ups[i] are the steps i follows; downs[u] the steps following u.
        let mut ups: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.steps.len()];
        let mut downs: Vec<Vec<usize>> = vec![Vec::new(); self.steps.len()];
        for (i, s) in self.steps.iter().enumerate() {
            for (kind, name) in s.upstream() {
                let Some(&u) = by_name.get(name) else {
                    return Err(FlowError::Unknown {
                        step: i,
                        key: flow_key(kind),
                        name: name.to_string(),
                    });
                };
                if kind == DependencyKind::AfterEach {
                    self.check_each(i, u)?;
                }
                if ups[i].insert(u) {
                    downs[u].push(i);
                }
            }
        }
        // Kahn's algorithm, the lowest ready index first: the file's order where free.
        let mut waiting: Vec<usize> = ups.iter().map(BTreeSet::len).collect();
        let mut ready: BTreeSet<usize> =
            (0..self.steps.len()).filter(|&i| waiting[i] == 0).collect();
        let mut order = Vec::with_capacity(self.steps.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &d in &downs[i] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.insert(d);
                }
            }
        }
        if order.len() == self.steps.len() {
            return Ok(order);
        }
        Err(self.cycle(&ups, &waiting))
    }

    /// `each` from step `i` to step `u`: task counts must match; `after_each` not given too.
    fn check_each(&self, i: usize, u: usize) -> Result<(), FlowError> {
        let (s, up) = (&self.steps[i], &self.steps[u]);
        let why = if s.spec.after_each.is_some() {
            format!(
                "step {:?} gives both each and after_each (a job follows one job task by task)",
                s.name
            )
        } else if s.spec.count != up.spec.count {
            format!(
                "step {:?}: each = {:?} pairs task i with task i, but it has {} task(s) and {:?} {} \
                 (the counts must match)",
                s.name, up.name, s.spec.count, up.name, up.spec.count
            )
        } else {
            return Ok(());
        };
        Err(FlowError::EachCount { step: i, why })
    }

    /// A cycle among the steps Kahn's algorithm could not order (`waiting` > 0): start at
    /// the first such step and follow unordered upstream steps until one repeats.
    fn cycle(&self, ups: &[BTreeSet<usize>], waiting: &[usize]) -> FlowError {
        let stuck = |i: &usize| waiting[*i] > 0;
        let start = (0..self.steps.len()).find(stuck).unwrap_or(0);
        let mut path = vec![start];
        let mut seen = BTreeMap::from([(start, 0usize)]);
        let mut at = start;
        // Every stuck step follows at least one stuck step, so this always finds one.
        while let Some(&next) = ups[at].iter().find(|u| stuck(u)) {
            if let Some(&first) = seen.get(&next) {
                let mut names: Vec<String> = path[first..]
                    .iter()
                    .rev()
                    .map(|&i| self.steps[i].name.clone())
                    .collect();
                names.insert(0, self.steps[next].name.clone());
                return FlowError::Cycle { step: next, names };
            }
            seen.insert(next, path.len());
            path.push(next);
            at = next;
        }
        FlowError::Cycle {
            step: start,
            names: vec![self.steps[start].name.clone()],
        }
    }

    /// Step `i`'s job with its upstream steps resolved to jobs by `job_of` (each step's
    /// job id): the names become `after`, `after_any`, `after_fail` and `after_each`.
    pub fn resolved(&self, i: usize, job_of: impl Fn(&str) -> Option<JobId>) -> JobSpec {
        let step = &self.steps[i];
        let mut spec = step.spec.clone();
        for (kind, name) in step.upstream() {
            let Some(j) = job_of(name) else { continue };
            match kind {
                DependencyKind::After => spec.after.push(j),
                DependencyKind::AfterAny => spec.after_any.push(j),
                DependencyKind::AfterFail => spec.after_fail.push(j),
                DependencyKind::AfterEach => spec.after_each = Some(j),
            }
        }
        spec
    }
}
