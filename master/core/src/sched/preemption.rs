//! S1 — preemption: when a task fits nowhere, find a node where idle resources plus those of
//! running lower-priority tasks cover it, and the fewest, least important victims there
//! (docs/DESIGN.md §S1). Runs late in the scheduler's pipeline (its preemption stage), only
//! for tasks that feasibility and selection could not place, because stopping work is the
//! most expensive decision the scheduler takes.
//!
//! Node choice, in order: the highest priority among the victims needed is lowest; fewest
//! victims; least resources freed beyond the need (cpu, then memory, then GPU); lowest node
//! id. Victims on a node: lowest priority first, latest submitted first among equals, only
//! as many as needed. Never victims: tasks of equal or higher priority, protected tasks
//! (`--no-preempt`), tasks preempted `max_preemptions` times already, and tasks another
//! preemption of the same plan already chose. Tasks at (or below) the base priority never
//! preempt.

use super::index::Candidates;
use crate::state::{partition_of, ClusterState, Node, Preemption, TaskRef};
use hetsched_common::{NodeResources, ResourceRequest, TaskId};
use std::collections::BTreeSet;

/// Limits of the preemption stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptionConfig {
    /// A task preempted this many times is not chosen again (`--max-preemptions`).
    pub max_preemptions: u32,
    /// Most preemption decisions in one plan (bounds the cost of a round).
    pub max_per_plan: usize,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        Self {
            max_preemptions: 3,
            max_per_plan: 16,
        }
    }
}

/// How good a node is for a preemption: lower is better.
type Score = (i64, usize, (u64, u64, u64), u64);

/// The victims `preemptor` needs, on the best node, if any node can make room.
pub fn plan_preemption(
    view: &ClusterState,
    preemptor: TaskId,
    only: Option<&Candidates>,
    taken: &BTreeSet<TaskId>,
    cfg: &PreemptionConfig,
) -> Option<Preemption> {
    let t = view.tasks().get(&preemptor)?;
    if t.priority <= view.priority().base_priority {
        return None;
    }
    // Waiting for earlier victims to stop: no new preemption until they have.
    if let Some((node, victims)) = view.awaiting().get(&preemptor) {
        let still = view.nodes().get(node).is_some_and(|n| {
            victims.iter().any(|v| {
                n.stopping
                    .iter()
                    .any(|s| s.task == v.task && s.attempt == v.attempt)
            })
        });
        if still {
            return None;
        }
    }
    let job = view.jobs().get(&t.job)?;
    let req = &job.spec.resources;
    let partition = partition_of(&job.spec);
    let mut best: Option<(Score, Preemption)> = None;
    // One waiting preemptor per node: a node whose freed room is promised already is not
    // asked for more.
    let promised: BTreeSet<hetsched_common::NodeId> = view
        .awaiting()
        .iter()
        .filter(|(t, _)| **t != preemptor)
        .filter(|(t, _)| {
            view.tasks()
                .get(t)
                .is_some_and(|t| t.status.state == hetsched_common::TaskState::Pending)
        })
        .map(|(_, (n, _))| *n)
        .collect();
    for node in view.nodes().values() {
        if !node.takes_work()
            || !node.serves(partition)
            || promised.contains(&node.id)
            || only.is_some_and(|c| !c.contains(node.id))
        {
            continue;
        }
        let Some((score, victims)) = victims_on(view, node, req, t.priority, taken, cfg) else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _)| score < *b) {
            best = Some((
                score,
                Preemption {
                    preemptor,
                    node: node.id,
                    victims,
                    take_back: false,
                },
            ));
        }
    }
    best.map(|b| b.1)
}

/// The victims needed on `node` for `req`, with the node's score; `None` when even every
/// eligible victim would not make room, or when none is needed (normal placement's job).
fn victims_on(
    view: &ClusterState,
    node: &Node,
    req: &ResourceRequest,
    priority: i64,
    taken: &BTreeSet<TaskId>,
    cfg: &PreemptionConfig,
) -> Option<(Score, Vec<TaskRef>)> {
    if node.free.fits(req) {
        return None;
    }
    let mut eligible: Vec<(i64, TaskId)> = node
        .tasks
        .iter()
        .filter_map(|id| view.tasks().get(id))
        .filter(|v| {
            v.priority < priority
                && !v.protected
                && v.preemptions < cfg.max_preemptions
                && !v.status.state.is_final()
                && !taken.contains(&v.id)
        })
        .map(|v| (v.priority, v.id))
        .collect();
    // Lowest priority first; among equals the latest submitted (highest id) first.
    eligible.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut free: NodeResources = node.free.clone();
    let mut victims = Vec::new();
    let mut top = i64::MIN;
    for (prio, id) in eligible {
        if free.fits(req) {
            break;
        }
        let v = view.tasks().get(&id)?;
        let vreq = view.job_resources(v.job)?;
        free.give_back(vreq, &v.gpus, &node.capacity);
        top = top.max(prio);
        victims.push(TaskRef {
            task: id,
            node: node.id,
            attempt: v.status.attempt,
        });
    }
    if !free.fits(req) || victims.is_empty() {
        return None;
    }
    let excess = (
        free.cpu_milli.saturating_sub(req.cpu_milli),
        free.mem_mib.saturating_sub(req.mem_mib),
        free.gpus
            .iter()
            .map(|g| u64::from(g.free_milli))
            .sum::<u64>()
            .saturating_sub(req.gpu.total_milli()),
    );
    Some(((top, victims.len(), excess, node.id.0), victims))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::index::PolicyKind;
    use crate::sched::{IndexedScheduler, Scheduler};
    use crate::state::{Command, CommandEnvelope, Outcome, Plan};
    use hetsched_common::priority::parse_priority_toml;
    use hetsched_common::{JobSpec, NodeId, NodeResources, TaskState};

    const CONFIG: &str = r#"
base_priority = 0
[[users]]
name = "hi"
priority = 100
[[users]]
name = "mid"
priority = 50
[[users]]
name = "lo"
priority = 10
[[users]]
name = "u1"
priority = 100
quota = { cpus = 4 }
[[users]]
name = "u2"
priority = 50
quota = { cpus = 8 }
"#;

    struct World {
        s: ClusterState,
        i: u64,
        sched: IndexedScheduler,
    }

    impl World {
        fn new() -> Self {
            let mut w = Self {
                s: ClusterState::new(),
                i: 0,
                sched: IndexedScheduler::new(PolicyKind::FirstFit, 0),
            };
            w.apply(Command::SetPriorityConfig {
                config: parse_priority_toml(CONFIG).expect("config"),
            });
            w
        }

        fn apply(&mut self, command: Command) -> Outcome {
            self.i += 1;
            let o = self.s.apply(
                self.i,
                CommandEnvelope {
                    at_ms: self.i,
                    request: None,
                    command,
                },
            );
            self.sched.reset(&self.s);
            o
        }

        fn node(&mut self, cpus: u64) -> NodeId {
            match self.apply(Command::RegisterNode {
                key: self.i + 100,
                node: None,
                name: String::new(),
                addr: String::new(),
                capacity: NodeResources {
                    cpu_milli: cpus * 1000,
                    mem_mib: 1 << 20,
                    ..Default::default()
                },
                labels: Default::default(),
                partitions: Vec::new(),
            }) {
                Outcome::Registered { node } => node,
                o => panic!("{o:?}"),
            }
        }

        fn submit(&mut self, user: &str, cpus: u64, count: u32) -> Vec<TaskId> {
            let spec: JobSpec = serde_json::from_value(serde_json::json!({
                "user": user, "partition": "default",
                "resources": {"cpu_milli": cpus * 1000, "mem_mib": 1},
                "count": count, "command": ["true"]
            }))
            .expect("spec");
            match self.apply(Command::SubmitJob { spec }) {
                Outcome::Submitted { tasks, .. } => tasks,
                o => panic!("{o:?}"),
            }
        }

        /// Plans and applies one round; returns the plan.
        fn round(&mut self) -> Plan {
            let plan = self.sched.plan(&self.s);
            self.apply(Command::ApplyPlan(plan.clone()));
            plan
        }

        fn prio(&self, t: TaskId) -> i64 {
            self.s.tasks()[&t].priority
        }
    }

    fn victims(p: &Plan) -> Vec<TaskId> {
        p.preempt
            .iter()
            .flat_map(|p| p.victims.iter().map(|v| v.task))
            .collect()
    }

    #[test]
    fn the_s1_worked_example() {
        let mut w = World::new();
        let a = w.submit("u1", 2, 1)[0];
        let b = w.submit("u1", 4, 1)[0];
        let c = w.submit("u2", 4, 1)[0];
        let d = w.submit("u2", 6, 1)[0];
        assert_eq!(
            [w.prio(a), w.prio(b), w.prio(c), w.prio(d)],
            [100, 0, 50, 0]
        );
    }

    #[test]
    fn quota_is_given_back_when_tasks_end() {
        let mut w = World::new();
        let n = w.node(8);
        let a = w.submit("u1", 4, 1)[0];
        assert_eq!(w.prio(a), 100);
        let over = w.submit("u1", 1, 1)[0];
        assert_eq!(w.prio(over), 0);
        w.round();
        w.apply(Command::TaskFinished {
            node: n,
            task: a,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        let again = w.submit("u1", 4, 1)[0];
        assert_eq!(w.prio(again), 100);
    }

    #[test]
    fn victims_are_the_lowest_priority_then_the_latest_submitted() {
        let mut w = World::new();
        w.node(4);
        let mid = w.submit("mid", 1, 1);
        let lo = w.submit("lo", 1, 3);
        assert_eq!(w.round().assignments.len(), 4);
        let hi = w.submit("hi", 2, 1)[0];
        let plan = w.round();
        assert!(plan.assignments.is_empty());
        assert_eq!(plan.preempt.len(), 1);
        assert_eq!(plan.preempt[0].preemptor, hi);
        // Lowest priority first (lo before mid), latest submitted first among lo.
        assert_eq!(victims(&plan), vec![lo[2], lo[1]]);
        assert!(!victims(&plan).contains(&mid[0]));
        // Applied: victims pending again, counted once, their resources held until stopped.
        for v in [lo[2], lo[1]] {
            let t = &w.s.tasks()[&v];
            assert_eq!((t.status.state, t.preemptions), (TaskState::Pending, 1));
        }
        // Nothing more happens until the victims stop: no new preemption, no placement.
        let again = w.round();
        assert!(again.is_empty(), "{again:?}");
        // The victims stop; the preemptor is placed, and only then. The room the first
        // victim gives back is held for the preemptor: the pending victims (lower priority,
        // 1 cpu each) must not take it, or preemption would start over.
        let n = NodeId(1);
        assert_eq!(
            w.apply(Command::TaskFinished {
                node: n,
                task: lo[2],
                attempt: 1,
                exit_code: -15,
                reason: None,
            }),
            Outcome::TaskUpdated
        );
        let between = w.round();
        assert!(between.is_empty(), "{between:?}");
        assert_eq!(
            w.apply(Command::TaskFinished {
                node: n,
                task: lo[1],
                attempt: 1,
                exit_code: -15,
                reason: None,
            }),
            Outcome::TaskUpdated
        );
        let plan = w.round();
        assert_eq!(plan.assignments.len(), 1);
        assert_eq!(plan.assignments[0].task, hi);
        assert!(plan.preempt.is_empty());
        // The node is never over-committed.
        assert_eq!(w.s.nodes()[&n].free.cpu_milli, 0);
        // The victims run again under attempt 2 once room returns, counted once.
        w.apply(Command::TaskFinished {
            node: n,
            task: hi,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        let plan = w.round();
        assert_eq!(plan.assignments.len(), 2);
        for v in [lo[1], lo[2]] {
            let t = &w.s.tasks()[&v];
            assert_eq!((t.status.attempt, t.preemptions), (2, 1));
        }
    }

    #[test]
    fn the_node_with_the_least_important_fewest_victims_is_chosen() {
        let mut w = World::new();
        let a = w.node(2);
        let b = w.node(2);
        let c = w.node(2);
        // a: two mid tasks; b: one lo task of 2 cpus; c: two lo tasks of 1 cpu.
        let on_a = w.submit("mid", 1, 2);
        let on_b = w.submit("lo", 2, 1);
        let on_c = w.submit("lo", 1, 2);
        let plan = w.round();
        let placed: Vec<(TaskId, NodeId)> =
            plan.assignments.iter().map(|x| (x.task, x.node)).collect();
        assert_eq!(
            placed,
            vec![
                (on_a[0], a),
                (on_a[1], a),
                (on_b[0], b),
                (on_c[0], c),
                (on_c[1], c)
            ]
        );
        w.submit("hi", 2, 1);
        let plan = w.round();
        assert_eq!(plan.preempt.len(), 1);
        assert_eq!(
            plan.preempt[0].node, b,
            "lo beats mid; one victim beats two"
        );
        assert_eq!(victims(&plan), vec![on_b[0]]);
    }

    #[test]
    fn nothing_is_preempted_when_even_every_lower_task_would_not_make_room() {
        let mut w = World::new();
        w.node(4);
        w.submit("hi", 1, 1);
        w.submit("lo", 1, 3);
        w.round();
        w.submit("mid", 2, 1);
        // mid may take lo's 3 cpus... it needs 2: fine. Ask for more than lo holds.
        w.submit("mid", 4, 1);
        let plan = w.round();
        for p in &plan.preempt {
            assert_ne!(
                w.s.tasks()[&p.preemptor].status.state,
                TaskState::Running,
                "{plan:?}"
            );
            assert!(
                w.s.jobs()[&w.s.tasks()[&p.preemptor].job]
                    .spec
                    .resources
                    .cpu_milli
                    <= 2000
            );
        }
        // The 4-cpu task could only fit by stopping hi's task: never.
        assert!(plan
            .preempt
            .iter()
            .all(|p| w.s.jobs()[&w.s.tasks()[&p.preemptor].job]
                .spec
                .resources
                .cpu_milli
                == 2000));
    }

    #[test]
    fn base_priority_never_preempts() {
        let mut w = World::new();
        w.node(2);
        w.submit("lo", 1, 2);
        w.round();
        // "nobody" has no entry: base priority 0, below lo's 10 anyway; and a user over
        // quota drops to the base priority too.
        w.submit("nobody", 1, 1);
        assert!(w.round().preempt.is_empty());
        w.submit("u1", 4, 1);
        let over = w.submit("u1", 1, 1)[0];
        assert_eq!(w.prio(over), 0);
        let plan = w.round();
        assert!(plan.preempt.iter().all(|p| p.preemptor != over), "{plan:?}");
    }

    #[test]
    fn a_task_preempted_max_times_is_not_chosen_again() {
        let mut w = World::new();
        let n = w.node(1);
        let lo = w.submit("lo", 1, 1)[0];
        w.round();
        for round in 1..=3u32 {
            let hi = w.submit("hi", 1, 1)[0];
            let plan = w.round();
            assert_eq!(victims(&plan), vec![lo], "round {round}");
            w.apply(Command::TaskFinished {
                node: n,
                task: lo,
                attempt: round,
                exit_code: -15,
                reason: None,
            });
            w.round(); // hi placed
            w.apply(Command::TaskFinished {
                node: n,
                task: hi,
                attempt: 1,
                exit_code: 0,
                reason: None,
            });
            w.round(); // lo placed again
            assert_eq!(w.s.tasks()[&lo].status.attempt, round + 1);
        }
        assert_eq!(w.s.tasks()[&lo].preemptions, 3);
        w.submit("hi", 1, 1);
        assert!(w.round().preempt.is_empty(), "the cap holds");
    }

    #[test]
    fn a_stale_preemption_is_refused_at_apply() {
        let mut w = World::new();
        let n = w.node(1);
        let lo = w.submit("lo", 1, 1)[0];
        w.round();
        w.submit("hi", 1, 1);
        let plan = w.sched.plan(&w.s);
        assert_eq!(victims(&plan), vec![lo]);
        // The victim finished before the plan applied.
        w.apply(Command::TaskFinished {
            node: n,
            task: lo,
            attempt: 1,
            exit_code: 0,
            reason: None,
        });
        match w.apply(Command::ApplyPlan(plan)) {
            Outcome::PlanApplied {
                rejected,
                preempted,
                ..
            } => assert_eq!((rejected, preempted.len()), (1, 0)),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn no_preempt_is_honoured_only_where_allowed() {
        let mut w = World::new();
        let spec = |user: &str| -> JobSpec {
            serde_json::from_value(serde_json::json!({
                "user": user, "resources": {"cpu_milli": 1000, "mem_mib": 1},
                "count": 1, "command": ["true"], "no_preempt": true
            }))
            .expect("spec")
        };
        // Not enabled: refused.
        assert!(matches!(
            w.apply(Command::SubmitJob { spec: spec("lo") }),
            Outcome::Rejected(m) if m.contains("not enabled")
        ));
        let mut cfg = parse_priority_toml(CONFIG).expect("config");
        cfg.protect_min_priority = Some(50);
        w.apply(Command::SetPriorityConfig { config: cfg });
        assert!(matches!(
            w.apply(Command::SubmitJob { spec: spec("lo") }),
            Outcome::Rejected(m) if m.contains("50")
        ));
        let n = w.node(1);
        let Outcome::Submitted { tasks, .. } = w.apply(Command::SubmitJob { spec: spec("mid") })
        else {
            panic!("mid may protect its job");
        };
        w.round();
        assert_eq!(w.s.tasks()[&tasks[0]].status.node, Some(n));
        w.submit("hi", 1, 1);
        assert!(
            w.round().preempt.is_empty(),
            "protected tasks are never victims"
        );
    }
}
