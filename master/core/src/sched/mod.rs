//! The scheduling core: pure functions from a read-only view of the cluster to a [`Plan`].
//!
//! The leader calls [`Scheduler::plan`] on its applied state, proposes the plan as one
//! `ApplyPlan` command, and `apply` re-checks every decision (optimistic concurrency, as in
//! Nomad's plan applier). One plan is in flight at a time, so a plan never races itself.

pub use crate::policy::quota as admission;
pub mod cpu_search;
pub mod engine_choice;
#[cfg(test)]
mod engine_overflow_tests;
pub mod explain;
#[cfg(test)]
mod explain_tests;
/// S4 — the placement index, its policies and the `frag` placer: a crate of its own
/// (`master/index`), since it needs nothing of the master; re-exported under its old path.
pub use hetsched_index as index;
pub mod loads;
pub mod multiqueue;
mod pipeline;
pub mod pool_split;
pub mod pools;
pub mod preemption;
#[cfg(test)]
mod promote_tests;
pub mod queue;
pub mod steal;
#[cfg(test)]
pub(crate) mod test_log;
pub mod waiting;

pub use pipeline::{IndexedScheduler, ParallelConfig};

use crate::state::{ClusterState, Plan};
use hetsched_common::NodeId;

/// A scheduling policy: an immutable view in, a plan out. No I/O, no clock.
///
/// A scheduler may keep derived caches (the placement index); the leader tells it what
/// changed so they stay exact.
pub trait Scheduler: Send {
    /// Decides what to do with the pending tasks of `view`.
    fn plan(&mut self, view: &ClusterState) -> Plan;

    /// As [`plan`](Self::plan), at leader time `now_ms` (ms since the Unix epoch): tasks
    /// waiting out a retry backoff until later are left in the queue. The caller reads the
    /// clock; the scheduler does not.
    fn plan_at(&mut self, view: &ClusterState, _now_ms: u64) -> Plan {
        self.plan(view)
    }

    /// These nodes' free resources or liveness changed in `view` (an entry applied, or a
    /// plan that tentatively used them finished either way).
    fn nodes_changed(&mut self, _view: &ClusterState, _nodes: &[NodeId]) {}

    /// Anything may have changed (new leadership, snapshot restore): rebuild caches.
    fn reset(&mut self, _view: &ClusterState) {}

    /// Why each task the latest plan left waiting waits, with a generation that changes
    /// whenever they do (`None`: this scheduler gives no reasons). Leader-local, never logged
    /// (docs/CONTRACT.md, "Waiting reasons").
    fn waiting(&self) -> Option<(std::sync::Arc<waiting::WaitBoard>, u64)> {
        None
    }

    /// Issue 51, a deliberate bug for chaos tests only (admin port, `BugSpec`): `false`
    /// plans without the dependency gate. Schedulers without the gate ignore it.
    fn set_dependency_gate(&mut self, _on: bool) {}

    /// Issue 53: the users' fair-share factors (from the accounting book), which order users
    /// within one S1 priority level before DRF. Schedulers without DRF ignore them.
    fn set_fair_share(&mut self, _factors: std::collections::BTreeMap<String, f64>) {}
}
