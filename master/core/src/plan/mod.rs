//! Planners for batches of jobs.

pub mod makespan;
