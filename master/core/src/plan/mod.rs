//! Planners for batches of jobs.

pub mod makespan;
pub mod batch_submit;
