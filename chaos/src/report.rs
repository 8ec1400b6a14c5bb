//! The report of a chaos run: `--json` prints it as one line with the documented field names; the
//! text form is [`Report::text`].

use crate::checker::Violation;
use serde::{Deserialize, Serialize};

/// One timeline entry: a fault injected or healed, or a phase of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// ms since the run started.
    pub t_ms: u64,
    /// What happened.
    pub event: String,
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed (replays the fault schedule and workload).
    pub seed: u64,
    /// Length of the fault phase, s.
    pub duration_s: f64,
    /// Faults injected.
    pub faults_injected: u64,
    /// Faults of the schedule not injected: process faults under `--attach`, and network
    /// faults only `--netns` can make (a one-way cut, a slave's cut) without it.
    #[serde(default)]
    pub faults_skipped: u64,
    /// Client operations invoked.
    pub ops: u64,
    /// Tasks that succeeded.
    pub tasks_completed: u64,
    /// Broken rules (empty: the run is clean).
    pub violations: Vec<Violation>,
    /// Faults and phases in order.
    pub timeline: Vec<TimelineEntry>,
    /// The run directory (logs, history, state dumps); kept when there are violations.
    pub run_dir: String,
}

impl Report {
    /// Human-readable form; `replay` is the command that replays the run.
    pub fn text(&self, replay: &str) -> String {
        let skipped = if self.faults_skipped > 0 {
            format!(" ({} skipped, see the timeline)", self.faults_skipped)
        } else {
            String::new()
        };
        let mut s = format!(
            "chaos {}: seed {}, {:.0} s, {} faults injected{skipped}, {} ops, {} tasks completed\n",
            self.scenario,
            self.seed,
            self.duration_s,
            self.faults_injected,
            self.ops,
            self.tasks_completed
        );
        for t in &self.timeline {
            s.push_str(&format!(
                "  {:>7.1}s  {}\n",
                t.t_ms as f64 / 1000.0,
                t.event
            ));
        }
        if self.violations.is_empty() {
            s.push_str("no violations\n");
        } else {
            s.push_str(&format!("{} violation(s):\n", self.violations.len()));
            for v in &self.violations {
                s.push_str(&format!("  {}: {}\n", v.rule, v.detail));
            }
            s.push_str(&format!(
                "run directory kept: {}\nreplay: {replay}\n",
                self.run_dir
            ));
        }
        s
    }
}
