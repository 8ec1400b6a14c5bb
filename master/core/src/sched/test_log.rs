//! Test harness shared by the scheduler's tests: a cluster state fed one command per log
//! index, with the scheduler's derived caches (index, S3 loads) kept in step as the leader
//! keeps them ([`Scheduler::nodes_changed`] with the nodes each command touched).

use super::{IndexedScheduler, Scheduler};
use crate::state::{command_nodes, touched_nodes, ClusterState, Command, CommandEnvelope, Outcome};

/// Applies `command` at `index` (leader time `at_ms`) and tells `sched` what changed.
pub(crate) fn apply_tracked(
    state: &mut ClusterState,
    index: u64,
    at_ms: u64,
    sched: &mut IndexedScheduler,
    command: Command,
) -> Outcome {
    let pre = command_nodes(&command);
    let o = state.apply(
        index,
        CommandEnvelope {
            at_ms,
            request: None,
            command,
        },
    );
    let touched = touched_nodes(pre, &o);
    sched.nodes_changed(state, &touched);
    o
}

/// A state and its last applied index.
pub(crate) struct Log {
    pub s: ClusterState,
    pub i: u64,
}

impl Log {
    /// Applies `c` at the next index, at leader time 0.
    pub fn apply(&mut self, sched: &mut IndexedScheduler, c: Command) -> Outcome {
        self.i += 1;
        apply_tracked(&mut self.s, self.i, 0, sched, c)
    }
}
