//! The one road from a submit to its placement (docs/ARCHITECTURE.md#submit-flow): every
//! submission the client API checked comes here, and [`DutiesCore::submission`] always
//! answers with a [`Command::SubmitPlaced`] for the executor to propose. When nothing else
//! waits it carries the placements of the job's tasks (an idle submit in one Raft round);
//! otherwise its `place` is empty and the tasks wait in the queue, placed by the next
//! `ApplyPlan` like every pending task.
//!
//! Why planning here: without it a submit costs two rounds before its dispatch (the job
//! commits, the duties see it applied, the scheduler plans, the plan commits). When
//! nothing else waits (no pending task, no plan in flight), the scheduler plans on a copy
//! of the applied state with the job applied to it: the same decisions the next plan would
//! take, since the job's tasks would be the only ones it looks at. The placements travel by
//! task index in the job and are re-checked at apply like a plan's, so a placement made
//! stale by an entry that landed in between leaves its task pending for the ordinary loop.
//! The slot of the one plan in flight is the duties' own: held from the planning until the
//! executor reports the submission's proposal finished (as the plan's
//! [`ProposalTag::Plan`]), so no other plan counts on the same resources meanwhile.
//!
//! The copy ([`ClusterState::planning_copy`]: nodes, open jobs and their tasks, none of
//! the history) costs time in the size of what is live, so above [`MAX_COPIED`] nodes and
//! held tasks together the submit goes the two-round way.

use super::{DutiesCore, Now, PlanSlot, ProposalTag, Role};
use crate::state::{ClusterState, Command, CommandEnvelope, Outcome, PlaceNew};
use hetsched_common::{JobSpec, NodeId};

/// Most nodes and tasks held on them together in a state copied to plan a submission.
pub const MAX_COPIED: usize = 20_000;

/// What a submission is proposed with: its placements, and the tag whose result the
/// executor reports once the proposal finished either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPlacement {
    /// The placements, by task index in the job.
    pub place: Vec<PlaceNew>,
    /// As the plan's `queue_depth`.
    pub queue_depth: u32,
    /// Reported back as [`DutyEvent::Proposed`](super::DutyEvent::Proposed) once the
    /// submission's proposal finished (applied or not).
    pub tag: ProposalTag,
}

impl NewPlacement {
    /// The command that submits `spec` with these placements.
    pub fn command(&self, spec: JobSpec) -> Command {
        Command::SubmitPlaced {
            spec,
            place: self.place.clone(),
            queue_depth: self.queue_depth,
        }
    }
}

/// What the executor proposes for one submission.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    /// Always a [`Command::SubmitPlaced`]; its `place` is empty when nothing was planned.
    pub command: Command,
    /// The plan slot the placements hold: reported back as
    /// [`DutyEvent::Proposed`](super::DutyEvent::Proposed) once the proposal finished,
    /// applied or not. `None`: nothing planned, nothing to report.
    pub slot: Option<ProposalTag>,
}

impl DutiesCore {
    /// The submission of `spec` as it is proposed: planned when nothing else waits (see
    /// [`DutiesCore::place_new`]), else with no placement, its tasks left to the queue.
    pub fn submission(&mut self, spec: JobSpec, now: Now, view: &ClusterState) -> Submission {
        match self.place_new(&spec, now, view) {
            Some(p) => Submission {
                command: p.command(spec),
                slot: Some(p.tag),
            },
            None => Submission {
                command: Command::SubmitPlaced {
                    spec,
                    place: Vec::new(),
                    queue_depth: 0,
                },
                slot: None,
            },
        }
    }

    /// Plans the tasks of `spec` before it is proposed, when nothing else waits: `None`
    /// (its tasks go to the queue) when not leading, a plan is in flight, tasks are
    /// pending, the state is too large to copy, or the plan places none of them.
    pub fn place_new(
        &mut self,
        spec: &JobSpec,
        now: Now,
        view: &ClusterState,
    ) -> Option<NewPlacement> {
        let Role::Leading(l) = &self.role else {
            return None;
        };
        if l.plan != PlanSlot::Idle || !view.pending().is_empty() {
            return None;
        }
        let held: usize = view
            .nodes()
            .values()
            .map(|n| n.tasks.len() + n.queued.len())
            .sum();
        if held + view.nodes().len() > MAX_COPIED {
            return None;
        }
        let epoch = l.epoch;
        // Only the live part: what ended costs time to copy and no stage reads it.
        let mut copy = view.planning_copy();
        let tasks = match copy.apply(
            copy.last_index() + 1,
            CommandEnvelope {
                at_ms: now.wall_ms,
                request: None,
                command: Command::SubmitJob { spec: spec.clone() },
            },
        ) {
            Outcome::Submitted { tasks, .. } => tasks,
            _ => return None,
        };
        let plan = self.scheduler.plan_at(&copy, now.wall_ms);
        let nodes: Vec<NodeId> = plan.assignments.iter().map(|a| a.node).collect();
        let place: Vec<PlaceNew> = plan
            .assignments
            .iter()
            .filter_map(|a| PlaceNew::of(a, &tasks))
            .collect();
        let only_new = place.len() == plan.assignments.len()
            && plan.preemptions.is_empty()
            && plan.moves.is_empty()
            && plan.preempt.is_empty()
            && plan.unqueue.is_empty(); // issue 53: a fair-share take-back goes as a whole plan
        let Role::Leading(l) = &mut self.role else {
            return None;
        };
        if !only_new || place.is_empty() {
            // Not proposed: the scheduler's tentative use of these nodes is undone.
            self.scheduler.nodes_changed(view, &nodes);
            l.sched_dirty = true;
            return None;
        }
        l.plan = PlanSlot::InFlight { nodes };
        Some(NewPlacement {
            place,
            queue_depth: plan.queue_depth,
            tag: ProposalTag::Plan { epoch },
        })
    }
}
