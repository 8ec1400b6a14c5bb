//! The scheduler's derived data kept in step with the replicated state: the placement
//! index, the `frag` placer's node set and workload mix, the S3 loads and the reserve
//! history. Followed change by change ([`Scheduler::nodes_changed`](crate::sched::Scheduler))
//! and rebuilt on reset; none of it is in the log or the state hash.

use super::IndexedScheduler;
use crate::state::ClusterState;
use hetsched_common::{NodeId, TaskId};

impl IndexedScheduler {
    /// Re-reads `node` from `view` into the index and the `frag` placer.
    pub(super) fn sync(&mut self, view: &ClusterState, node: NodeId) {
        match view.nodes().get(&node) {
            // Draining nodes leave the index: they take no new tasks.
            Some(n) if n.takes_work() => {
                self.index.upsert_node(node, &n.free);
                self.chain.node_changed(node, Some(&n.free));
            }
            _ => {
                self.index.remove_node(node);
                self.chain.node_changed(node, None);
            }
        }
    }

    /// Teaches the reserve history the tasks submitted since the last plan.
    /// At the start of a plan: the stages see the new state, the reserve history learns
    /// the new arrivals, reservations are kept in step, the GPU pools re-split by demand,
    /// and whatever of it can unblock a task marks the blocked set changed.
    pub(super) fn refresh(&mut self, view: &ClusterState) {
        self.chain.begin_plan(view);
        self.observe_reserve(view);
        let held = self.reserved.len();
        super::reservations::sync(&mut self.index, &mut self.reserved, view);
        if self.reserved.len() < held {
            self.books.blocked.changed(); // a reservation released its node
        }
        if let (Some(l), Some(h)) = (&mut self.loads, &self.pools) {
            if l.resplit(h.demand()) {
                self.books.blocked.changed();
            }
        }
        self.books.blocked.check_priority(view.priority());
    }

    pub(super) fn observe_reserve(&mut self, view: &ClusterState) {
        let Some(pools) = &mut self.pools else { return };
        let from = TaskId(self.pool_seen.0.saturating_add(1));
        for (id, t) in view.tasks().range(from..) {
            if let Some(req) = view.job_resources(t.job) {
                pools.observe(req);
            }
            self.pool_seen = *id;
        }
    }

    /// New possible victims make blocked keys worth a probe again: a placement of a lower
    /// priority than a blocked key's (S1 preemption), or a CPU task on a borrowed reserve
    /// (S3 take-back).
    pub(super) fn note_victims(&mut self, view: &ClusterState, plan: &crate::state::Plan) {
        let Some(top) = self.books.blocked.top_priority() else {
            return;
        };
        let victim = plan.assignments.iter().any(|a| {
            let Some(t) = view.tasks().get(&a.task) else {
                return false;
            };
            t.priority < top
                || (a.borrowed && view.job_resources(t.job).is_some_and(|r| r.gpu.is_none()))
        });
        if victim {
            self.books.blocked.changed();
        }
    }

    /// Rebuilds everything derived from `view` (new leadership, snapshot restore).
    pub(super) fn rebuild(&mut self, view: &ClusterState) {
        self.books.blocked.changed();
        self.partitions.clear();
        // Rebuilding drops every reservation; the next plan restores them.
        self.reserved.clear();
        if let Some(l) = &mut self.loads {
            l.rebuild(view);
        }
        self.index.rebuild(
            view.nodes()
                .values()
                .filter(|n| n.takes_work())
                .map(|n| (n.id, n.free.clone())),
        );
        self.chain.rebuild(view);
        self.build_views(view);
    }
}
