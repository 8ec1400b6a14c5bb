//! S4.7 (docs/DESIGN.md): several tasks selected at once, each group of them on its own
//! thread against its own view of the index, conflicts resolved afterwards in queue order.
//!
//! ```text
//! plan start (sequential): the queue order; the tasks that may reach selection (below)
//!   dealt to G groups by their rank among those tasks (rank mod G)
//! propose (parallel, one thread per group or several groups per thread):
//!   group g brings its view up to date (the nodes that changed since its last plan),
//!   then, in queue order, picks a node for each of its tasks with the selection policy
//!   and takes it from its view → a proposal task → node
//! the chain (sequential, unchanged): in queue order every task goes through every stage;
//!   the selection stage takes a task's proposal when the node still has room in the
//!   leader's index as the plan left it so far, else it selects as with one group
//! ```
//!
//! **Views.** Group g's view holds the nodes whose id is g mod G: a partition of the
//! nodes, so the views together hold one copy of the index however many groups there are,
//! and each is kept in step lazily (a node that changed is re-read into its one view at the
//! start of the next plan with groups, by that view's own thread). A full copy per plan
//! would make the cost of a plan grow with the number of nodes. Within a partition the
//! groups never propose the same node, so conflicts come only from what the sequential
//! stages took first (an earlier task placed by another stage, pools hiding a reserve, a
//! proposal on a node that was reserved since).
//!
//! **Conflicts.** The chain runs in queue order over the leader's one index, as with one
//! group: a proposal is only a candidate, taken when the node still fits the task there;
//! otherwise the task is selected again over the whole index (the earlier task in queue
//! order keeps the room, the later is re-placed). So no node is ever over-committed, and
//! the plan is a function of (state, G, the scheduler's history): proposals depend on G,
//! never on the number of threads that computed them.
//!
//! **What runs in parallel, honestly.** Only the selection policy's search. Tasks get a
//! proposal only where, as far as can be known before the chain runs, selection is what
//! decides for them: not a gang's (S2 places the whole gang on pinned slaves), not a
//! program task's (S0.1–2 engine choice ranks engines), not a GPU task's while S3 pools are
//! on (the pools decide which GPU pool a task may use), not one backing off. Gang,
//! dependency holds, pool borrowing, engine choice, take-back, preemption and slave queues
//! all still run in the chain, in queue order, on one thread; so does `frag`'s workload
//! mix: each view keeps its own copy learning the same arrivals, and what a view proposes
//! changes no mix. A task an earlier stage decides for simply leaves its proposal unused.

use super::selection_stage::SelectionStage;
use super::stage::PendingTask;
use crate::sched::index::{Candidates, IndexConfig, PlacementIndex, PlacementQuery};
use crate::state::ClusterState;
use hetsched_common::{JobId, NodeId, TaskId};
use std::collections::{BTreeSet, HashMap};

/// How a plan's selection is split: `groups` is part of the plan's input (the plan depends
/// on it), `threads` only says how many threads compute the groups' proposals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParallelConfig {
    /// Groups the placeable tasks are dealt to (1: no parallel selection, today's plans).
    pub groups: u32,
    /// Threads that compute the groups' proposals (at most `groups` are used).
    pub threads: u32,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        Self {
            groups: 1,
            threads: 1,
        }
    }
}

impl ParallelConfig {
    /// The leader's default: min(cores − 1, 4) threads (at least one) and as many groups.
    pub fn for_host() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = cores.saturating_sub(1).clamp(1, 4) as u32;
        Self {
            groups: threads,
            threads,
        }
    }
}

/// The groups' proposals of one plan (a part of the plan state, read by the selection
/// stage).
#[derive(Debug, Default)]
pub(super) struct Proposals(pub HashMap<TaskId, NodeId>);

/// One group's view: the nodes of its partition, and its own selection stage (policies,
/// `frag` placer and workload mix).
#[derive(Debug)]
struct View {
    index: PlacementIndex,
    selection: SelectionStage,
    /// Nodes of this partition to re-read from the state before the next proposals.
    dirty: Vec<NodeId>,
}

impl View {
    /// Brings the view up to date with `view` (the plan's state).
    fn sync(&mut self, view: &ClusterState) {
        self.dirty.sort_unstable();
        self.dirty.dedup();
        for n in self.dirty.drain(..) {
            match view.nodes().get(&n).filter(|x| x.takes_work()) {
                Some(node) => {
                    self.index.upsert_node(n, &node.free);
                    self.selection.note_node(n, Some(&node.free));
                }
                None => {
                    self.index.remove_node(n);
                    self.selection.note_node(n, None);
                }
            }
        }
        self.selection.observe_arrivals(view);
    }

    /// Proposals for `work` (in queue order), each taken from the view.
    fn propose(&mut self, view: &ClusterState, work: &[Work<'_>]) -> Vec<(TaskId, NodeId)> {
        self.sync(view);
        let mut out = Vec::with_capacity(work.len());
        // A job's tasks at one priority ask the same of the same nodes, and the view only
        // shrinks within a plan: once one fits nowhere here, the rest of them are skipped
        // (as the chain's `stuck` set does).
        let mut stuck: BTreeSet<(JobId, i64)> = BTreeSet::new();
        for w in work {
            let key = (w.head.job.id, w.head.t.priority);
            if stuck.contains(&key) {
                continue;
            }
            let mut q = PlacementQuery::new(w.head.req).for_task(w.head.task);
            if let Some(c) = w.allowed {
                q = q.with_candidates(c);
            }
            let Some(node) = self.selection.place(&mut self.index, &q, w.head.req) else {
                stuck.insert(key);
                continue;
            };
            if self.index.take(node, w.head.req).is_some() {
                self.dirty.push(node); // re-read at the next plan: this take was tentative
                out.push((w.head.task, node));
            }
        }
        out
    }
}

/// One task to propose a node for: the task and the nodes it may use.
#[derive(Clone, Copy, Debug)]
pub(super) struct Work<'a> {
    pub head: PendingTask<'a>,
    pub allowed: Option<&'a Candidates>,
}

/// The groups' views, kept across plans.
#[derive(Debug, Default)]
pub(super) struct Groups {
    pub cfg: ParallelConfig,
    /// One per group once a plan with groups built them; empty until then (and after a
    /// rebuild).
    views: Vec<View>,
    /// Proposals made, and those the chain took, since the start.
    pub proposed: u64,
    pub taken: u64,
}

impl Groups {
    /// Fewest proposals a plan needs before it starts threads.
    const SPAWN_MIN: usize = 64;

    /// Groups with this split and no views yet.
    pub fn new(cfg: ParallelConfig) -> Self {
        Self {
            cfg,
            views: Vec::new(),
            proposed: 0,
            taken: 0,
        }
    }

    /// Counts the plan's proposals and those its `assignments` took.
    pub fn count(&mut self, proposals: &Proposals, assignments: &[crate::state::Assign]) {
        if proposals.0.is_empty() {
            return;
        }
        self.proposed += proposals.0.len() as u64;
        let taken = assignments
            .iter()
            .filter(|a| proposals.0.get(&a.task) == Some(&a.node))
            .count();
        self.taken += taken as u64;
    }

    /// The group (and view) of `node`.
    fn part(&self, node: NodeId) -> usize {
        (node.0 % u64::from(self.cfg.groups.max(1))) as usize
    }

    /// Whether plans use parallel selection.
    pub fn on(&self) -> bool {
        self.cfg.groups > 1
    }

    /// `node` changed in the state: its view re-reads it before the next proposals.
    pub fn node_changed(&mut self, node: NodeId) {
        if !self.views.is_empty() {
            let p = self.part(node);
            self.views[p].dirty.push(node);
        }
    }

    /// Drops the views (new leadership, snapshot restore); the next plan rebuilds them.
    pub fn clear(&mut self) {
        self.views.clear();
    }

    /// Builds the views from `view` when there are none: each its partition's nodes and a
    /// selection stage made by `selection` (seeded per group).
    pub fn build(
        &mut self,
        view: &ClusterState,
        config: IndexConfig,
        selection: &dyn Fn(u64) -> SelectionStage,
    ) {
        if !self.views.is_empty() || !self.on() {
            return;
        }
        for g in 0..self.cfg.groups as usize {
            let nodes = view
                .nodes()
                .values()
                .filter(|n| n.takes_work() && self.part(n.id) == g)
                .map(|n| (n.id, n.free.clone()));
            let index = PlacementIndex::with_nodes(config, nodes);
            let mut sel = selection(g as u64);
            sel.rebuild_where(view, &|n| self.part(n) == g);
            self.views.push(View {
                index,
                selection: sel,
                dirty: Vec::new(),
            });
        }
    }

    /// Every group's proposals for `work` (in queue order; the task of rank i goes to
    /// group i mod G), computed on up to `threads` threads. The same for any thread count.
    pub fn propose(
        &mut self,
        view: &ClusterState,
        config: IndexConfig,
        selection: &dyn Fn(u64) -> SelectionStage,
        work: &[Work<'_>],
    ) -> Proposals {
        if work.is_empty() {
            // Nothing to propose: the views catch up at the next plan that has work (they
            // re-read the state then, so when they do does not change what they hold).
            return Proposals::default();
        }
        self.build(view, config, selection);
        let g = self.views.len();
        let mut dealt: Vec<Vec<Work<'_>>> = vec![Vec::new(); g];
        for (i, w) in work.iter().enumerate() {
            dealt[i % g].push(*w);
        }
        // A thread costs more to start than a few searches: small plans run on this one.
        let threads = match work.len() {
            n if n < Self::SPAWN_MIN => 1,
            _ => (self.cfg.threads.max(1) as usize).min(g),
        };
        let mut buckets: Vec<Vec<(&mut View, &[Work<'_>])>> =
            (0..threads).map(|_| Vec::new()).collect();
        for (i, (v, w)) in self.views.iter_mut().zip(&dealt).enumerate() {
            buckets[i % threads].push((v, w.as_slice()));
        }
        let run = |bucket: Vec<(&mut View, &[Work<'_>])>| {
            bucket
                .into_iter()
                .flat_map(|(v, w)| v.propose(view, w))
                .collect::<Vec<_>>()
        };
        let mut all = HashMap::with_capacity(work.len());
        let mut rest = buckets.into_iter();
        let first = rest.next().unwrap_or_default();
        std::thread::scope(|s| {
            let handles: Vec<_> = rest.map(|b| s.spawn(move || run(b))).collect();
            all.extend(run(first));
            for h in handles {
                match h.join() {
                    Ok(p) => all.extend(p),
                    // A panic in a proposal thread is a bug in the pure core: pass it on.
                    Err(e) => std::panic::resume_unwind(e),
                }
            }
        });
        Proposals(all)
    }
}

#[cfg(test)]
#[path = "parallel_tests.rs"]
mod tests;
