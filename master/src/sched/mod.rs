//! The scheduling core: pure functions from a read-only view of the cluster to decisions.

pub mod index;
