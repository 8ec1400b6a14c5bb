//! S0.4 — work stealing between slave queues: the victim choice; see `docs/DESIGN.md` §S0.
//!
//! ```text
//! thief: a slave with an empty queue and free resources asks the leader (StealRequest)
//!   → victim: the slave with the longest queue holding a task the thief can run
//!     (resources free on the thief, its engine kind there, partition, no locality pin)
//!   → the leader asks the victim to release that queued attempt (refused once started)
//!   → released: the leader commits StealTask through the log with attempt + 1
//! ```
//!
//! The victim's queue is scanned from its tail: the task that would wait longest there.
//! Gang tasks (more than one GPU device) and locality-pinned tasks (`submit --nodes`) are
//! never stolen; queued tasks hold no devices anyway (the queue stage only queues tasks
//! that ask none).

use super::engine_choice::engine_count;
use crate::state::{partition_of, ClusterState};
use hetsched_common::{Attempt, NodeId, TaskId, TaskState};
use std::collections::BTreeSet;

/// A queued attempt to move from `from` to the thief.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StealPick {
    /// Task.
    pub task: TaskId,
    /// Its queued attempt on `from`.
    pub attempt: Attempt,
    /// The victim.
    pub from: NodeId,
}

/// Whether `thief` could run the queued `task` now.
fn runnable_on(view: &ClusterState, thief: NodeId, task: TaskId) -> bool {
    let Some(th) = view.nodes().get(&thief) else {
        return false;
    };
    let Some(t) = view.tasks().get(&task) else {
        return false;
    };
    let Some(job) = view.jobs().get(&t.job) else {
        return false;
    };
    let req = &job.spec.resources;
    if t.status.state != TaskState::Assigned || !job.candidates.is_empty() || req.gpu.count > 1 {
        return false;
    }
    if !th.serves(partition_of(&job.spec)) || !th.free.fits(req) {
        return false;
    }
    // A program task whose engine kind was chosen goes where that kind exists.
    t.engine.is_none_or(|k| engine_count(&th.capacity, k) > 0)
}

/// The victim and task for `thief`, or `None` when no queue holds a task it can run (or the
/// thief cannot take work, or has a queue of its own). `busy`: tasks already being stolen.
pub fn pick_victim(
    view: &ClusterState,
    thief: NodeId,
    busy: &BTreeSet<TaskId>,
) -> Option<StealPick> {
    let th = view.nodes().get(&thief)?;
    if !th.takes_work() || !th.queued.is_empty() {
        return None;
    }
    let mut victims: Vec<&crate::state::Node> = view
        .nodes()
        .values()
        .filter(|n| n.id != thief && n.is_up() && !n.queued.is_empty())
        .collect();
    // Longest queue first; ties to the lower id (deterministic).
    victims.sort_by(|a, b| b.queued.len().cmp(&a.queued.len()).then(a.id.cmp(&b.id)));
    for v in victims {
        for &task in v.queued.iter().rev() {
            if busy.contains(&task) || !runnable_on(view, thief, task) {
                continue;
            }
            let Some(t) = view.tasks().get(&task) else {
                continue;
            };
            if t.status.node != Some(v.id) {
                continue;
            }
            return Some(StealPick {
                task,
                attempt: t.status.attempt,
                from: v.id,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Assign, Command, CommandEnvelope, Outcome, Plan};
    use hetsched_common::{JobSpec, NodeResources, ResourceRequest};

    struct Log {
        s: ClusterState,
        i: u64,
    }

    impl Log {
        fn apply(&mut self, command: Command) -> Outcome {
            self.i += 1;
            self.s.apply(
                self.i,
                CommandEnvelope {
                    at_ms: 1000 + self.i,
                    request: None,
                    command,
                },
            )
        }

        fn register(&mut self, key: u64, cpus: u64) -> NodeId {
            match self.apply(Command::RegisterNode {
                key,
                node: None,
                name: format!("n{key}"),
                addr: format!("127.0.0.1:{key}"),
                capacity: NodeResources {
                    cpu_milli: cpus * 1000,
                    mem_mib: 4096,
                    ..Default::default()
                },
                labels: Default::default(),
                partitions: Vec::new(),
            }) {
                Outcome::Registered { node } => node,
                o => panic!("{o:?}"),
            }
        }

        fn submit(&mut self, count: u32, nodes: &[&str]) -> Vec<TaskId> {
            match self.apply(Command::SubmitJob {
                spec: JobSpec {
                    resources: ResourceRequest {
                        cpu_milli: 1000,
                        mem_mib: 10,
                        ..Default::default()
                    },
                    count,
                    command: vec!["true".into()],
                    nodes: nodes.iter().map(|n| n.to_string()).collect(),
                    ..Default::default()
                },
            }) {
                Outcome::Submitted { tasks, .. } => tasks,
                o => panic!("{o:?}"),
            }
        }

        /// Places `tasks` on `node`: the first `run` take resources, the rest queue.
        fn place(&mut self, tasks: &[TaskId], node: NodeId, run: usize) {
            let assignments = tasks
                .iter()
                .enumerate()
                .map(|(i, t)| Assign {
                    queued: i >= run,
                    ..Assign::to(*t, node)
                })
                .collect();
            match self.apply(Command::ApplyPlan(Plan {
                assignments,
                queue_depth: 8,
                ..Default::default()
            })) {
                Outcome::PlanApplied { rejected: 0, .. } => {}
                o => panic!("{o:?}"),
            }
        }
    }

    #[test]
    fn the_longest_queue_holding_a_runnable_task_is_the_victim() {
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        let a = l.register(1, 1);
        let thief = l.register(2, 2);
        let c = l.register(3, 1);
        let on_a = l.submit(4, &[]);
        l.place(&on_a, a, 1); // 1 runs, 3 queued
        let on_c = l.submit(2, &[]);
        l.place(&on_c, c, 1); // 1 runs, 1 queued
        assert_eq!(l.s.nodes()[&a].queued.len(), 3);
        // Queued tasks hold none of the node's free resources.
        assert_eq!(l.s.nodes()[&a].free.cpu_milli, 0);
        let none = BTreeSet::new();
        let pick = pick_victim(&l.s, thief, &none).expect("a victim");
        assert_eq!(pick.from, a, "longest queue");
        assert_eq!(pick.task, on_a[3], "from the tail of its queue");
        assert_eq!(pick.attempt, 1);
        // A task already being stolen is skipped.
        let busy = BTreeSet::from([on_a[3]]);
        assert_eq!(
            pick_victim(&l.s, thief, &busy).map(|p| p.task),
            Some(on_a[2])
        );
        // Nobody steals from itself, and a node with a queue of its own does not steal.
        assert_eq!(pick_victim(&l.s, a, &none), None);
        assert_eq!(pick_victim(&l.s, c, &none), None);
    }

    #[test]
    fn pinned_tasks_and_tasks_the_thief_cannot_fit_are_never_stolen() {
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        let a = l.register(1, 1);
        let thief = l.register(2, 1);
        let pinned = l.submit(3, &["n1"]);
        l.place(&pinned, a, 1);
        let none = BTreeSet::new();
        assert_eq!(pick_victim(&l.s, thief, &none), None, "locality-pinned");
        let free = l.submit(2, &[]);
        l.place(&free, a, 0);
        let pick = pick_victim(&l.s, thief, &none).expect("the unpinned one");
        assert_eq!(pick.task, free[1]);
        // The thief full: nothing fits there.
        let busy_thief = l.submit(1, &[]);
        l.place(&busy_thief, thief, 1);
        assert_eq!(pick_victim(&l.s, thief, &none), None, "thief has no room");
    }

    #[test]
    fn a_committed_steal_moves_the_task_with_attempt_plus_one_and_counts_it() {
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        let a = l.register(1, 1);
        let thief = l.register(2, 1);
        let t = l.submit(2, &[]);
        l.place(&t, a, 1);
        let o = l.apply(Command::StealTask {
            task: t[1],
            attempt: 1,
            from: a,
            to: thief,
        });
        match o {
            Outcome::Stolen {
                assigned: Some(r), ..
            } => {
                assert_eq!((r.node, r.attempt), (thief, 2));
            }
            o => panic!("{o:?}"),
        }
        assert!(l.s.nodes()[&a].queued.is_empty());
        assert_eq!(l.s.nodes()[&thief].free.cpu_milli, 0);
        assert_eq!(
            (l.s.nodes()[&a].steals_out, l.s.nodes()[&thief].steals_in),
            (1, 1)
        );
        let info = l.s.node_info(&l.s.nodes()[&a]);
        assert_eq!((info.queued, info.steals_out), (0, 1));
        // The same move again is stale: fenced by the attempt.
        let again = l.apply(Command::StealTask {
            task: t[1],
            attempt: 1,
            from: a,
            to: thief,
        });
        assert!(matches!(again, Outcome::Ignored(_)), "{again:?}");
        // A report of the released attempt from the victim is stale too.
        let late = l.apply(Command::TaskStarted {
            node: a,
            task: t[1],
            attempt: 1,
        });
        assert!(matches!(late, Outcome::Ignored(_)), "{late:?}");
    }

    #[test]
    fn a_queued_task_takes_the_resources_its_predecessor_frees() {
        let mut l = Log {
            s: ClusterState::new(),
            i: 0,
        };
        let a = l.register(1, 1);
        let t = l.submit(2, &[]);
        l.place(&t, a, 1);
        assert_eq!(l.s.node_info(&l.s.nodes()[&a]).queued, 1);
        l.apply(Command::TaskFinished {
            node: a,
            task: t[0],
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        let n = &l.s.nodes()[&a];
        assert!(n.queued.is_empty());
        assert!(n.tasks.contains(&t[1]));
        assert_eq!(n.free.cpu_milli, 0, "the promoted task holds the core");
        l.apply(Command::TaskFinished {
            node: a,
            task: t[1],
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        assert_eq!(l.s.nodes()[&a].free.cpu_milli, 1000);
        // A queued plan beyond the depth is refused at apply.
        let more = l.submit(3, &[]);
        let o = l.apply(Command::ApplyPlan(Plan {
            assignments: more
                .iter()
                .map(|t| Assign {
                    queued: true,
                    ..Assign::to(*t, a)
                })
                .collect(),
            queue_depth: 2,
            ..Default::default()
        }));
        assert!(
            matches!(o, Outcome::PlanApplied { rejected: 1, .. }),
            "{o:?}"
        );
    }
}
