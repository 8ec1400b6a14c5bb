//! The chain of stages, assembled here and nowhere else: one list, each stage a type in a
//! file of its own knowing nothing of the others (as Nomad's `GenericStack` lists its
//! feasibility checkers, then its rankers, then its selector). A new stage is one file and
//! one line in [`Chain::standard`].
//!
//! The queue stage is the chain's head (it orders the tasks at plan start) and feasibility
//! its input (each task's permitted nodes, computed once per task and read by every stage
//! through `Step::scope`); what the list holds runs per task, the first to decide wins, and
//! a task nobody decides for is stuck.

use super::borrow_stage::PoolBorrowStage;
use super::context::Decision;
use super::dependency_stage::DependencyGate;
use super::engine_stage::EngineChoiceStage;
use super::gang_stage::GangStage;
use super::preemption_stage::PreemptionStage;
use super::selection_stage::SelectionStage;
use super::slave_queue_stage::SlaveQueueStage;
use super::stage::{Stage, Step};
use super::take_back_stage::TakeBackLink;
use crate::sched::engine_choice::EngineChoiceConfig;
use crate::sched::index::PolicyKind;
use crate::state::ClusterState;
use hetsched_common::{NodeId, NodeResources};

/// What the chain is built from: the scheduler's settings that its stages hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChainConfig {
    /// The placement policy of GPU tasks, and its seed.
    pub policy: PolicyKind,
    /// The seed of `policy`.
    pub seed: u64,
    /// The policy of tasks that ask no GPU, and its seed (`None`: `policy`'s default).
    pub cpu_policy: Option<(PolicyKind, u64)>,
    /// S0.1–2 engine-choice bounds.
    pub engine: EngineChoiceConfig,
    /// S0.3 slave queue depth (0: off).
    pub queue_depth: u32,
}

impl ChainConfig {
    /// The policy of tasks that ask no GPU.
    pub fn cpu_kind(&self) -> PolicyKind {
        match self.cpu_policy {
            Some((kind, _)) => kind,
            None => SelectionStage::default_cpu_kind(self.policy),
        }
    }
}

/// The stages in the order they run.
#[derive(Debug)]
pub(super) struct Chain {
    stages: Vec<Box<dyn Stage>>,
}

impl Chain {
    /// The master's chain. Why each sits where it does:
    /// - the gate: `dependency` first (issue 51: a task held for its dependencies,
    ///   singleton or throttle takes nothing from the index, whatever the resources);
    /// - filters: `gang` first (S2: a batch job's gang is placed whole on its pinned slaves
    ///   or waits, and no later stage may place one of its tasks alone); `pool-borrow` (S3:
    ///   hides the GPU nodes' unused reserves from a CPU task while GPU tasks wait) before
    ///   anything reads the index's free vectors;
    /// - rankers: `engine-choice` (S0.1–2: for a program task the engine ranking replaces
    ///   the placement policy), then `selection` (S4 policy among the nodes that fit);
    /// - fallbacks, cheapest loss first: `take-back` (S3: stop CPU tasks borrowing the
    ///   task's pool's reserve), `preemption` (S1: stop lower-priority work), and last
    ///   `slave-queue` (S0.3: a queued task only waits, so anything that runs it now is
    ///   better).
    pub fn standard(cfg: &ChainConfig) -> Self {
        let selection = Self::selection(cfg, 0);
        let stages: Vec<Box<dyn Stage>> = vec![
            Box::new(DependencyGate),
            Box::new(GangStage),
            Box::new(PoolBorrowStage),
            Box::new(EngineChoiceStage { cfg: cfg.engine }),
            Box::new(selection),
            Box::new(TakeBackLink),
            Box::new(PreemptionStage),
            Box::new(SlaveQueueStage {
                depth: cfg.queue_depth,
            }),
        ];
        Self { stages }
    }

    /// The selection stage of `cfg`, its seeds offset by `salt` (0: the chain's own; a
    /// parallel group's index otherwise, `parallel.rs`).
    pub fn selection(cfg: &ChainConfig, salt: u64) -> SelectionStage {
        let mut selection = SelectionStage::new(cfg.policy, cfg.seed.wrapping_add(salt));
        if let Some((kind, seed)) = cfg.cpu_policy {
            selection.set_cpu_policy(kind, seed.wrapping_add(salt));
        }
        selection
    }

    /// The same without the stage named `name` (an optional stage left out; the dependency
    /// gate only as a deliberate bug).
    pub fn without(mut self, name: &str) -> Self {
        self.stages.retain(|s| s.name() != name);
        self
    }

    /// The stages' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The first stage's decision for the step's task, or stuck when none decides.
    pub fn decide(&mut self, step: &mut Step<'_, '_>) -> Decision {
        for stage in &mut self.stages {
            if let Some(d) = stage.consider(step) {
                return d;
            }
        }
        Decision::Stuck
    }

    /// Every stage: a plan over `view` starts.
    pub fn begin_plan(&mut self, view: &ClusterState) {
        self.stages.iter_mut().for_each(|s| s.begin_plan(view));
    }

    /// Every stage: `node`'s free resources changed (`None`: it takes no work).
    pub fn node_changed(&mut self, node: NodeId, free: Option<&NodeResources>) {
        self.stages
            .iter_mut()
            .for_each(|s| s.node_changed(node, free));
    }

    /// Every stage: rebuild from `view`.
    pub fn rebuild(&mut self, view: &ClusterState) {
        self.stages.iter_mut().for_each(|s| s.rebuild(view));
    }
}
