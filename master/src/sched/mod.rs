//! The scheduling core: pure functions from a read-only view of the cluster to a [`Plan`].
//!
//! The leader calls [`Scheduler::plan`] on its applied state, proposes the plan as one
//! `ApplyPlan` command, and `apply` re-checks every decision (optimistic concurrency, as in
//! Nomad's plan applier). One plan is in flight at a time, so a plan never races itself.

pub mod index;

use crate::state::{Assign, ClusterState, Plan};
use hetsched_common::{NodeId, NodeResources};
use std::collections::BTreeMap;

/// A scheduling policy: an immutable view in, a plan out. No I/O, no clock.
pub trait Scheduler: Send {
    /// Decides what to do with the pending tasks of `view`.
    fn plan(&mut self, view: &ClusterState) -> Plan;
}

/// Plain first fit in (pending task id, node id) order: the walking skeleton's policy.
/// Tasks are taken in queue order; each goes to the lowest-id up node whose free resources
/// (as left by the earlier decisions of this same plan) fit it.
#[derive(Clone, Debug)]
pub struct FirstFit {
    /// Most assignments per plan: bounds the size of one `ApplyPlan` entry.
    pub max_per_plan: usize,
}

impl Default for FirstFit {
    fn default() -> Self {
        Self { max_per_plan: 512 }
    }
}

impl Scheduler for FirstFit {
    fn plan(&mut self, view: &ClusterState) -> Plan {
        let mut free: BTreeMap<NodeId, NodeResources> = view
            .nodes
            .values()
            .filter(|n| n.is_up())
            .map(|n| (n.id, n.free.clone()))
            .collect();
        let mut plan = Plan::default();
        for task in &view.pending {
            if plan.assignments.len() >= self.max_per_plan || free.is_empty() {
                break;
            }
            let Some(req) = view.tasks.get(task).and_then(|t| view.job_resources(t.job)) else {
                continue;
            };
            let chosen = free.iter_mut().find_map(|(id, f)| f.take(req).map(|_| *id));
            if let Some(node) = chosen {
                plan.assignments.push(Assign { task: *task, node });
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Command, CommandEnvelope, Outcome};
    use hetsched_common::{JobSpec, ResourceRequest};

    #[test]
    fn first_fit_fills_nodes_in_id_order_and_respects_capacity() {
        let mut s = ClusterState::new();
        let mut i = 0;
        let mut apply = |s: &mut ClusterState, c| {
            i += 1;
            s.apply(
                i,
                CommandEnvelope {
                    at_ms: 0,
                    request: None,
                    command: c,
                },
            )
        };
        for key in [1, 2] {
            apply(
                &mut s,
                Command::RegisterNode {
                    key,
                    node: None,
                    name: String::new(),
                    addr: String::new(),
                    capacity: NodeResources {
                        cpu_milli: 2000,
                        mem_mib: 1000,
                        ..Default::default()
                    },
                    labels: Default::default(),
                },
            );
        }
        let spec = JobSpec {
            name: String::new(),
            user: String::new(),
            partition: String::new(),
            resources: ResourceRequest {
                cpu_milli: 1000,
                mem_mib: 10,
                ..Default::default()
            },
            count: 5,
            command: vec!["true".into()],
            env: Default::default(),
        };
        apply(&mut s, Command::SubmitJob { spec });
        let plan = FirstFit::default().plan(&s);
        let nodes: Vec<u64> = plan.assignments.iter().map(|a| a.node.0).collect();
        assert_eq!(
            nodes,
            vec![1, 1, 2, 2],
            "4 of 5 fit, first node filled first"
        );
        match apply(&mut s, Command::ApplyPlan(plan)) {
            Outcome::PlanApplied { accepted, rejected } => {
                assert_eq!(accepted.len(), 4);
                assert_eq!(rejected, 0);
            }
            o => panic!("{o:?}"),
        }
        assert!(FirstFit::default().plan(&s).is_empty());
    }
}
