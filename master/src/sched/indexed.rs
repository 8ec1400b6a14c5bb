//! `IndexedScheduler` — placement through the S4 [`PlacementIndex`] with a selection policy:
//! the master's default scheduler.
//!
//! Why a cache beside the replicated state rather than in it: the index is derived data
//! (rebuildable from the nodes' free vectors at any time), so it stays out of the log and
//! the state hash. The leader keeps it in step with every applied change through
//! [`Scheduler::nodes_changed`] and rebuilds it on [`Scheduler::reset`] (new leadership,
//! snapshot restore). Within one plan, decisions are taken out of the index tentatively;
//! once the plan is applied or refused, the touched nodes are re-read from the state.

use super::index::{AnyPolicy, IndexConfig, PlacementIndex, PlacementQuery, PolicyKind};
use super::Scheduler;
use crate::state::{Assign, ClusterState, Plan};
use hetsched_common::{NodeId, TaskId};

/// Pending tasks in queue order, each to the node the policy picks among those that fit.
#[derive(Debug)]
pub struct IndexedScheduler {
    index: PlacementIndex,
    policy: AnyPolicy,
    kind: PolicyKind,
    /// Most assignments per plan: bounds the size of one `ApplyPlan` entry.
    pub max_per_plan: usize,
}

impl IndexedScheduler {
    /// A scheduler with `policy` (seeded with `seed` where the policy is random) over an
    /// exact index (θ = 1).
    pub fn new(policy: PolicyKind, seed: u64) -> Self {
        Self {
            index: PlacementIndex::new(IndexConfig::default()),
            policy: policy.build(seed),
            kind: policy,
            max_per_plan: 4096,
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> PolicyKind {
        self.kind
    }

    /// Nodes in the index.
    pub fn indexed_nodes(&self) -> usize {
        self.index.len()
    }

    fn sync(&mut self, view: &ClusterState, node: NodeId) {
        match view.nodes.get(&node) {
            Some(n) if n.is_up() => self.index.upsert_node(node, &n.free),
            _ => {
                self.index.remove_node(node);
            }
        }
    }
}

impl Scheduler for IndexedScheduler {
    fn plan(&mut self, view: &ClusterState) -> Plan {
        let mut plan = Plan::default();
        let mut from = TaskId(0);
        while let Some(&task) = view.pending.range(from..).next() {
            if plan.assignments.len() >= self.max_per_plan || self.index.is_empty() {
                break;
            }
            from = TaskId(task.0 + 1);
            let Some(job) = view.tasks.get(&task).and_then(|t| view.jobs.get(&t.job)) else {
                continue;
            };
            let req = &job.spec.resources;
            let q = PlacementQuery::new(req).for_task(task);
            let Some(node) = self.index.place(&q, &mut self.policy) else {
                // The job's other tasks ask for the same and the index only shrinks within
                // a plan: skip them all (a job's task ids are consecutive), so a queue where
                // nothing fits costs one probe per job, not one per task.
                if let Some(last) = job.tasks.last() {
                    from = from.max(TaskId(last.0 + 1));
                }
                continue;
            };
            // Tentative: later tasks of this plan see the node without what this one took.
            if self.index.take(node, req).is_some() {
                plan.assignments.push(Assign { task, node });
            }
        }
        plan
    }

    fn nodes_changed(&mut self, view: &ClusterState, nodes: &[NodeId]) {
        for n in nodes {
            self.sync(view, *n);
        }
    }

    fn reset(&mut self, view: &ClusterState) {
        self.index.rebuild(
            view.nodes
                .values()
                .filter(|n| n.is_up())
                .map(|n| (n.id, n.free.clone())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{command_nodes, touched_nodes, Command, CommandEnvelope, Outcome};
    use hetsched_common::{JobSpec, NodeResources, ResourceRequest};

    struct Log {
        s: ClusterState,
        i: u64,
    }

    impl Log {
        fn apply(&mut self, sched: &mut IndexedScheduler, c: Command) -> Outcome {
            self.i += 1;
            let pre = command_nodes(&c);
            let o = self.s.apply(
                self.i,
                CommandEnvelope {
                    at_ms: 0,
                    request: None,
                    command: c,
                },
            );
            let touched = touched_nodes(pre, &o);
            sched.nodes_changed(&self.s, &touched);
            o
        }
    }

    fn register(cpus: u64, key: u64) -> Command {
        Command::RegisterNode {
            key,
            node: None,
            name: String::new(),
            addr: String::new(),
            capacity: NodeResources {
                cpu_milli: cpus * 1000,
                mem_mib: 1000,
                ..Default::default()
            },
            labels: Default::default(),
        }
    }

    fn job(count: u32, cpu_milli: u64) -> Command {
        Command::SubmitJob {
            spec: JobSpec {
                name: String::new(),
                user: String::new(),
                partition: String::new(),
                resources: ResourceRequest {
                    cpu_milli,
                    mem_mib: 10,
                    ..Default::default()
                },
                count,
                command: vec!["true".into()],
                env: Default::default(),
            },
        }
    }

    #[test]
    fn least_fit_spreads_and_the_index_follows_applied_changes() {
        let mut sched = IndexedScheduler::new(PolicyKind::LeastFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(&mut sched, register(4, 1));
        l.apply(&mut sched, register(2, 2));
        assert_eq!(sched.indexed_nodes(), 2);
        l.apply(&mut sched, job(3, 1000));
        let plan = sched.plan(&l.s);
        // Most free first: node 1 (4 cores), then 1 again (3 left vs 2), then a tie at 2
        // cores each broken by the lower id... least-fit picks the most available.
        let nodes: Vec<u64> = plan.assignments.iter().map(|a| a.node.0).collect();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0], 1);
        let applied = l.apply(&mut sched, Command::ApplyPlan(plan));
        assert!(matches!(applied, Outcome::PlanApplied { rejected: 0, .. }));
        // The index now holds exactly the state's free vectors.
        let fresh = {
            let mut s = IndexedScheduler::new(PolicyKind::LeastFit, 0);
            s.reset(&l.s);
            s
        };
        assert_eq!(
            format!("{:?}", sched.index.free(NodeId(1))),
            format!("{:?}", fresh.index.free(NodeId(1)))
        );
        assert_eq!(
            format!("{:?}", sched.index.free(NodeId(2))),
            format!("{:?}", fresh.index.free(NodeId(2)))
        );
        // A node going down leaves the index; nothing is placed on it.
        l.apply(&mut sched, Command::NodeDown { node: NodeId(1) });
        assert_eq!(sched.indexed_nodes(), 1);
        let plan = sched.plan(&l.s);
        assert!(plan.assignments.iter().all(|a| a.node == NodeId(2)));
    }

    #[test]
    fn plans_never_overcommit_and_match_first_fit_capacity() {
        let mut sched = IndexedScheduler::new(PolicyKind::BestFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        for k in 1..=3 {
            l.apply(&mut sched, register(2, k));
        }
        l.apply(&mut sched, job(10, 1000));
        let plan = sched.plan(&l.s);
        assert_eq!(plan.assignments.len(), 6, "3 nodes × 2 cores");
        match l.apply(&mut sched, Command::ApplyPlan(plan)) {
            Outcome::PlanApplied { accepted, rejected } => {
                assert_eq!(accepted.len(), 6);
                assert_eq!(rejected, 0);
            }
            o => panic!("{o:?}"),
        }
        assert!(sched.plan(&l.s).is_empty());
    }

    #[test]
    fn a_job_that_does_not_fit_is_skipped_whole_and_later_jobs_still_place() {
        let mut sched = IndexedScheduler::new(PolicyKind::FirstFit, 0);
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        l.apply(&mut sched, register(2, 1));
        l.apply(&mut sched, job(1, 1000));
        l.apply(&mut sched, job(500, 8000)); // never fits: 8 cores on a 2-core node
        l.apply(&mut sched, job(3, 1000));
        let plan = sched.plan(&l.s);
        let tasks: Vec<u64> = plan.assignments.iter().map(|a| a.task.0).collect();
        // Task 1 (job 1), then job 2's 500 tasks are skipped as one, then job 3's first.
        assert_eq!(tasks, vec![1, 502]);
    }
}
