//! Planners for batches of jobs.

pub mod batch_submit;
/// S2 — the makespan planner: a crate of its own (`master/planner`), since it needs nothing
/// of the master; re-exported under its old path.
pub use hetsched_planner as makespan;
