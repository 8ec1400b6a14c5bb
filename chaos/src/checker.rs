//! The history checker: each rule is named, and each violation says which rule it broke and
//! why. Pure: it reads a history and a final state and returns violations.
//!
//! Rules:
//! - `acked-lost`: an acknowledged job's task is missing from the final state, or (a command
//!   task) ended `succeeded` without ever leaving its side effect.
//! - `duplicate-attempt`: the side-effect file holds one `(task, attempt)` twice: the task ran
//!   twice under one attempt (attempt fencing broken).
//! - `double-success`: one task was observed `succeeded` under two different attempts.
//! - `two-leaders`: two masters said they lead in one term.
//! - `state-diverged`: after heal, two masters at the same applied index hash their states
//!   differently.
//! - `over-commit`: at some index of a master's committed log, a node's assigned and running
//!   tasks held more than its capacity ([`crate::replay`] replays each master's exported log
//!   through `ClusterState::apply`; [`check`] adds its findings).
//! - `early-start` (issue 51): at some index of a master's committed log a task was assigned
//!   while its dependencies were not met as committed before, a singleton job was under way
//!   beside another of its user and name, or a job had more than `max_running` tasks under
//!   way ([`crate::early_start`], on the same replay as `over-commit`).
//! - `stuck`: a task was not finished when the settle period after heal ran out.

use crate::history::{Event, FinalState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The checker's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// An acknowledged task was lost.
    AckedLost,
    /// A side effect twice under one attempt.
    DuplicateAttempt,
    /// Succeeded under two attempts.
    DoubleSuccess,
    /// Two leaders in one term.
    TwoLeaders,
    /// State hashes differ after heal.
    StateDiverged,
    /// A node ran more than its capacity.
    OverCommit,
    /// A task assigned before its dependencies ended as it needs (or beside its singleton,
    /// or over its job's `max_running`).
    EarlyStart,
    /// Not finished within the settle period.
    Stuck,
}

impl Rule {
    /// The rule's name as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::AckedLost => "acked-lost",
            Rule::DuplicateAttempt => "duplicate-attempt",
            Rule::DoubleSuccess => "double-success",
            Rule::TwoLeaders => "two-leaders",
            Rule::StateDiverged => "state-diverged",
            Rule::OverCommit => "over-commit",
            Rule::Stuck => "stuck",
            Rule::EarlyStart => "early-start",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Which rule.
    pub rule: Rule,
    /// What was seen.
    pub detail: String,
}

fn violation(rule: Rule, detail: String) -> Violation {
    Violation { rule, detail }
}

const FINISHED: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// Checks `history` and `end` against every rule; violations in rule order.
pub fn check(history: &[Event], end: &FinalState) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(acked_lost(history, end));
    out.extend(duplicate_attempt(end));
    out.extend(double_success(history, end));
    out.extend(two_leaders(history));
    out.extend(state_diverged(end));
    for r in &end.replays {
        out.extend(
            r.violations
                .iter()
                .filter(|v| v.rule == Rule::StateDiverged)
                .cloned(),
        );
    }
    for rule in [Rule::OverCommit, Rule::EarlyStart] {
        for r in &end.replays {
            out.extend(r.violations.iter().filter(|v| v.rule == rule).cloned());
        }
    }
    out.extend(stuck(end));
    out
}

fn acked_lost(history: &[Event], end: &FinalState) -> Vec<Violation> {
    let present: BTreeMap<u64, &crate::history::FinalTask> =
        end.tasks.iter().map(|t| (t.task, t)).collect();
    let effects: BTreeSet<u64> = end.side_effects.iter().map(|(t, _)| *t).collect();
    let mut out = Vec::new();
    for e in history {
        let Event::Ack {
            job,
            tasks,
            op,
            program,
            ..
        } = e
        else {
            continue;
        };
        for task in tasks {
            match present.get(task) {
                None => out.push(violation(
                    Rule::AckedLost,
                    format!("task-{task} of job-{job} (op {op}) was acknowledged but is not in the final state"),
                )),
                Some(t) if t.state == "succeeded" && !program && !effects.contains(task) => out.push(violation(
                    Rule::AckedLost,
                    format!("task-{task} of job-{job} succeeded (attempt {}) but never left its side effect", t.attempt),
                )),
                Some(_) => {}
            }
        }
    }
    out
}

fn duplicate_attempt(end: &FinalState) -> Vec<Violation> {
    let mut seen: BTreeMap<(u64, u32), u32> = BTreeMap::new();
    for pair in &end.side_effects {
        *seen.entry(*pair).or_default() += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((task, attempt), n)| {
            violation(
                Rule::DuplicateAttempt,
                format!("task-{task} attempt {attempt} left its side effect {n} times"),
            )
        })
        .collect()
}

fn double_success(history: &[Event], end: &FinalState) -> Vec<Violation> {
    let mut attempts: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    let observed = history.iter().filter_map(|e| match e {
        Event::Task {
            task,
            state,
            attempt,
            ..
        } if state == "succeeded" => Some((*task, *attempt)),
        _ => None,
    });
    let last = end
        .tasks
        .iter()
        .filter(|t| t.state == "succeeded")
        .map(|t| (t.task, t.attempt));
    for (task, attempt) in observed.chain(last) {
        attempts.entry(task).or_default().insert(attempt);
    }
    attempts
        .into_iter()
        .filter(|(_, a)| a.len() > 1)
        .map(|(task, a)| {
            violation(
                Rule::DoubleSuccess,
                format!("task-{task} was seen succeeded under attempts {a:?}"),
            )
        })
        .collect()
}

fn two_leaders(history: &[Event]) -> Vec<Violation> {
    let mut by_term: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for e in history {
        if let Event::Leader { master, term, .. } = e {
            by_term.entry(*term).or_default().insert(*master);
        }
    }
    by_term
        .into_iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(term, m)| {
            violation(
                Rule::TwoLeaders,
                format!("masters {m:?} each said they lead in term {term}"),
            )
        })
        .collect()
}

fn state_diverged(end: &FinalState) -> Vec<Violation> {
    let mut by_index: BTreeMap<u64, BTreeMap<&str, Vec<u64>>> = BTreeMap::new();
    for m in &end.masters {
        by_index
            .entry(m.applied_index)
            .or_default()
            .entry(&m.state_hash)
            .or_default()
            .push(m.master);
    }
    by_index
        .into_iter()
        .filter(|(_, h)| h.len() > 1)
        .map(|(index, h)| {
            violation(
                Rule::StateDiverged,
                format!("at applied index {index} the masters hash differently: {h:?}"),
            )
        })
        .collect()
}

fn stuck(end: &FinalState) -> Vec<Violation> {
    let unfinished: Vec<String> = end
        .tasks
        .iter()
        .filter(|t| !FINISHED.contains(&t.state.as_str()))
        .map(|t| format!("task-{} ({})", t.task, t.state))
        .collect();
    if unfinished.is_empty() {
        return Vec::new();
    }
    let shown: Vec<&str> = unfinished.iter().take(10).map(String::as_str).collect();
    vec![violation(
        Rule::Stuck,
        format!(
            "{} task(s) not finished {} s after heal: {}{}",
            unfinished.len(),
            end.settle_s,
            shown.join(", "),
            if unfinished.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{FinalTask, MasterView};

    fn ack(job: u64, tasks: &[u64]) -> Event {
        Event::Ack {
            t_ms: 10,
            op: job,
            job,
            tasks: tasks.to_vec(),
            program: false,
        }
    }

    fn done(task: u64, attempt: u32) -> FinalTask {
        FinalTask {
            task,
            job: 1,
            state: "succeeded".into(),
            attempt,
            preemptions: 0,
        }
    }

    fn master(master: u64, applied_index: u64, hash: &str) -> MasterView {
        MasterView {
            master,
            applied_index,
            state_hash: hash.into(),
        }
    }

    /// A clean run: two tasks acknowledged, each ran once, one leader per term, same hashes.
    fn clean() -> (Vec<Event>, FinalState) {
        let history = vec![
            Event::Invoke {
                t_ms: 1,
                op: 1,
                what: "submit".into(),
            },
            ack(1, &[1, 2]),
            Event::Leader {
                t_ms: 5,
                master: 1,
                term: 2,
            },
            Event::Leader {
                t_ms: 50,
                master: 2,
                term: 3,
            },
            Event::Usage {
                t_ms: 20,
                node: 1,
                cpu_milli_used: 1000,
                cpu_milli_capacity: 1000,
            },
            Event::Task {
                t_ms: 30,
                task: 1,
                job: 1,
                state: "succeeded".into(),
                attempt: 1,
            },
        ];
        let end = FinalState {
            tasks: vec![done(1, 1), done(2, 2)],
            masters: vec![
                master(1, 40, "aa"),
                master(2, 40, "aa"),
                master(3, 39, "bb"),
            ],
            side_effects: vec![(1, 1), (2, 1), (2, 2)],
            settle_s: 60,
            replays: Vec::new(),
        };
        (history, end)
    }

    fn rules(v: &[Violation]) -> Vec<Rule> {
        v.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let (h, e) = clean();
        assert_eq!(check(&h, &e), vec![]);
    }

    #[test]
    fn acked_lost_catches_a_missing_task() {
        let (h, mut e) = clean();
        e.tasks.retain(|t| t.task != 2);
        let v = check(&h, &e);
        assert_eq!(rules(&v), vec![Rule::AckedLost]);
        assert!(v[0].detail.contains("task-2"), "{v:?}");
    }

    #[test]
    fn acked_lost_catches_a_success_without_side_effect() {
        let (h, mut e) = clean();
        e.side_effects.retain(|(t, _)| *t != 1);
        assert_eq!(rules(&check(&h, &e)), vec![Rule::AckedLost]);
    }

    #[test]
    fn a_program_task_needs_no_side_effect_but_must_not_be_lost() {
        let (mut h, mut e) = clean();
        h.push(Event::Ack {
            t_ms: 12,
            op: 9,
            job: 9,
            tasks: vec![90],
            program: true,
        });
        e.tasks.push(done(90, 1));
        assert!(check(&h, &e).is_empty(), "programs run in the slave");
        e.tasks.retain(|t| t.task != 90);
        assert_eq!(rules(&check(&h, &e)), vec![Rule::AckedLost]);
    }

    #[test]
    fn duplicate_attempt_catches_a_rerun_under_one_attempt() {
        let (h, mut e) = clean();
        e.side_effects.push((1, 1));
        let v = check(&h, &e);
        assert_eq!(rules(&v), vec![Rule::DuplicateAttempt]);
        assert!(v[0].detail.contains("task-1 attempt 1"), "{v:?}");
    }

    #[test]
    fn double_success_catches_two_succeeded_attempts() {
        let (mut h, e) = clean();
        h.push(Event::Task {
            t_ms: 31,
            task: 2,
            job: 1,
            state: "succeeded".into(),
            attempt: 1,
        });
        assert_eq!(rules(&check(&h, &e)), vec![Rule::DoubleSuccess]);
    }

    #[test]
    fn two_leaders_catches_two_masters_in_one_term() {
        let (mut h, e) = clean();
        h.push(Event::Leader {
            t_ms: 51,
            master: 3,
            term: 3,
        });
        let v = check(&h, &e);
        assert_eq!(rules(&v), vec![Rule::TwoLeaders]);
        assert!(v[0].detail.contains("term 3"), "{v:?}");
    }

    #[test]
    fn state_diverged_catches_different_hashes_at_one_index() {
        let (h, mut e) = clean();
        e.masters[1].state_hash = "ab".into();
        assert_eq!(rules(&check(&h, &e)), vec![Rule::StateDiverged]);
    }

    #[test]
    fn over_commit_reports_what_the_log_replay_found() {
        let (h, mut e) = clean();
        e.replays.push(crate::replay::Replayed {
            master: 2,
            last_index: 40,
            violations: vec![violation(
                Rule::OverCommit,
                "master-2's log at index 17: node-1 holds 1500 of 1000 milli-cores".into(),
            )],
            ..Default::default()
        });
        let v = check(&h, &e);
        assert_eq!(rules(&v), vec![Rule::OverCommit]);
        assert!(v[0].detail.contains("index 17"), "{v:?}");
    }

    #[test]
    fn stuck_catches_an_unfinished_task() {
        let (h, mut e) = clean();
        e.tasks[1].state = "running".into();
        let v = check(&h, &e);
        assert_eq!(rules(&v), vec![Rule::Stuck]);
        assert!(v[0].detail.contains("task-2 (running)"), "{v:?}");
    }

    #[test]
    fn rule_names_are_the_documented_ones() {
        let names: Vec<String> = [
            Rule::AckedLost,
            Rule::DuplicateAttempt,
            Rule::DoubleSuccess,
            Rule::TwoLeaders,
            Rule::StateDiverged,
            Rule::OverCommit,
            Rule::Stuck,
        ]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
        assert_eq!(
            names.join(","),
            "\"acked-lost\",\"duplicate-attempt\",\"double-success\",\"two-leaders\",\"state-diverged\",\"over-commit\",\"stuck\""
        );
    }
}
