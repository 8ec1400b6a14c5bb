//! Planners for batches of jobs.

pub mod batch_submit;
pub mod makespan;
