//! hetsched chaos tool, the pure part: the history format ([`history`]), the checker with its
//! named rules ([`checker`]), scenarios and their seeded fault schedules ([`scenario`]), and
//! the run report ([`report`]), and the replay of each master's exported log that checks
//! `over-commit` and `early-start` at every index ([`replay`], [`early_start`]). Nothing here does I/O or reads a clock: the `hetsched chaos`
//! command (src/cmd/chaos.rs) launches the cluster, drives the workload and nemeses, records
//! the history and hands it here.

pub mod checker;
pub mod early_start;
pub mod history;
pub mod replay;
pub mod report;
pub mod scenario;

pub use checker::{check, Rule, Violation};
pub use history::{Event, FinalState, FinalTask, MasterView};
pub use report::Report;
pub use scenario::{FaultKind, PlannedFault, Scenario, ScenarioError};
