//! S0.1–2 — engine choice for API-program tasks; see `docs/DESIGN.md` §S0.
//!
//! A pure stage between the queue and feasibility. For a program task:
//!
//! ```text
//! relation (task kind → [(engine, Σ time)] ascending)
//!   → targets: the fastest kind, and any whose efficiency t_fastest / t_kind is at least
//!     --engine-efficiency-bound (1.0: the fastest only)
//!   → slaves with a target engine whose load rate (busy engines of the kind / engines of the
//!     kind, queued tasks counted as busy) is below --load-bound, most free engines first
//!   → none of those has a free target engine (the kind is scarce: fewer free engines than
//!     tasks waiting for it): the overflow goes to the second-best kind, chosen the same way,
//!     instead of waiting — when that finishes sooner than waiting would
//!   → neither: the task waits for (or queues on) a target engine
//! ```
//!
//! "Sooner than waiting" is this project's decision where the seed is silent: a task that
//! waits behind `w` others for `n` busy target engines starts after about `1 + w / n` of
//! the target's task times and then runs one more, so it finishes after about
//! `(2 + w / n) · t_target`. The second-best kind takes the overflow only when its
//! `t_second` is below that; otherwise (a CPU eight times slower than the GPU, say)
//! overflowing would make the whole finish later, and the task waits.
//!
//! Tasks are taken in queue order and each decision is counted in the [`EngineLoad`] at
//! once, so within one plan the first tasks take the free target engines and the rest of
//! those waiting overflow: exactly "free engines fewer than the tasks waiting".
//!
//! Engine counts per node are a dimension of placement next to the index's resource
//! classes: CPU engines are whole cores, GPU engines are devices, other kinds are the node's
//! declared counts. Engines are booked (`state::booking`): the load reads the units taken
//! in the replicated state, whoever took them, so a GPU a command task holds is busy here.
//! A program task's resources (CPU, memory) and its booked unit go through the index.

use crate::state::ClusterState;
use hetsched_common::program::EngineTotal;
use hetsched_common::{EngineKind, NodeId};
use std::collections::BTreeMap;

/// The engine-choice knobs (master flags).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineChoiceConfig {
    /// `--engine-efficiency-bound`: kinds whose efficiency (fastest total / their total) is
    /// at least this are targets as good as the fastest. In (0, 1]; 1.0: the fastest only.
    pub efficiency_bound: f64,
    /// `--load-bound`: a slave whose load rate of the target kind is at or above this is
    /// passed over. In (0, 1]; default 0.8.
    pub load_bound: f64,
}

impl Default for EngineChoiceConfig {
    fn default() -> Self {
        Self {
            efficiency_bound: 1.0,
            load_bound: 0.8,
        }
    }
}

impl EngineChoiceConfig {
    /// Checks both bounds lie in (0, 1].
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("--engine-efficiency-bound", self.efficiency_bound),
            ("--load-bound", self.load_bound),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!("{name} must be in (0, 1], got {v}"));
            }
        }
        Ok(())
    }
}

/// Engines and their use per (node, kind), for the nodes taking work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineLoad {
    count: BTreeMap<(NodeId, EngineKind), u32>,
    busy: BTreeMap<(NodeId, EngineKind), u32>,
    /// Tasks of this plan left waiting for a target engine of each kind.
    waiting: BTreeMap<EngineKind, u32>,
}

pub use crate::state::engine_count;

impl EngineLoad {
    /// The engines of every node taking work and, as busy, the units booked there or
    /// otherwise taken (GPUs held by command tasks, cores in use, other engines a job asked
    /// for), plus the program tasks queued there for a kind (docs/DESIGN.md, S0.2).
    pub fn of(view: &ClusterState) -> Self {
        let mut load = Self::default();
        for n in view.nodes().values().filter(|n| n.takes_work()) {
            for k in EngineKind::ALL {
                let c = engine_count(&n.capacity, k);
                if c > 0 {
                    load.count.insert((n.id, k), c);
                    let taken = c.saturating_sub(crate::state::free_units(n, k));
                    if taken > 0 {
                        load.busy.insert((n.id, k), taken);
                    }
                }
            }
            for tid in n.queued.iter() {
                if let Some(k) = view.tasks().get(tid).and_then(|t| t.engine) {
                    load.add(n.id, k);
                }
            }
        }
        load
    }

    /// Declares `count` engines of `kind` on `node` (tests and simulations).
    pub fn set_count(&mut self, node: NodeId, kind: EngineKind, count: u32) {
        self.count.insert((node, kind), count);
    }

    /// One more task uses (or waits for) an engine of `kind` on `node`.
    pub fn add(&mut self, node: NodeId, kind: EngineKind) {
        *self.busy.entry((node, kind)).or_insert(0) += 1;
    }

    /// One more task waits for an engine of `kind` (none was free for it).
    pub fn wait(&mut self, kind: EngineKind) {
        *self.waiting.entry(kind).or_insert(0) += 1;
    }

    /// Tasks waiting for an engine of `kind`.
    pub fn waiting(&self, kind: EngineKind) -> u32 {
        self.waiting.get(&kind).copied().unwrap_or(0)
    }

    /// Engines of `kind` on `node`.
    pub fn count(&self, node: NodeId, kind: EngineKind) -> u32 {
        self.count.get(&(node, kind)).copied().unwrap_or(0)
    }

    /// Tasks using or waiting for engines of `kind` on `node`.
    pub fn busy(&self, node: NodeId, kind: EngineKind) -> u32 {
        self.busy.get(&(node, kind)).copied().unwrap_or(0)
    }

    /// Free engines of `kind` on `node`.
    pub fn free(&self, node: NodeId, kind: EngineKind) -> u32 {
        self.count(node, kind).saturating_sub(self.busy(node, kind))
    }

    /// Busy / engines of `kind` on `node` (queued tasks count as busy); infinite without
    /// engines of that kind.
    pub fn load_rate(&self, node: NodeId, kind: EngineKind) -> f64 {
        match self.count(node, kind) {
            0 => f64::INFINITY,
            c => f64::from(self.busy(node, kind)) / f64::from(c),
        }
    }

    /// Nodes with at least one engine of `kind`, in id order.
    pub fn nodes_with(&self, kind: EngineKind) -> impl Iterator<Item = NodeId> + '_ {
        self.count
            .iter()
            .filter(move |((_, k), c)| *k == kind && **c > 0)
            .map(|((n, _), _)| *n)
    }
}

/// The target kinds of a relation (fastest first) and the second-best kind (the fastest
/// one that is not a target), under `efficiency_bound`.
pub fn targets(
    relation: &[EngineTotal],
    efficiency_bound: f64,
) -> (Vec<EngineKind>, Option<EngineKind>) {
    let Some(best) = relation.first() else {
        return (Vec::new(), None);
    };
    let best_us = best.total_us.max(1) as f64;
    let mut targets = Vec::new();
    let mut second = None;
    for e in relation {
        let efficiency = best_us / e.total_us.max(1) as f64;
        if e.engine == best.engine || efficiency >= efficiency_bound {
            targets.push(e.engine);
        } else if second.is_none() {
            second = Some(e.engine);
        }
    }
    (targets, second)
}

/// What the stage decided for one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineChoice {
    /// Nodes to try, best first, each with the engine kind the task would use there.
    pub ranked: Vec<(NodeId, EngineKind)>,
    /// True when these are second-best engines (the target kind is scarce).
    pub overflow: bool,
    /// True when no listed engine is free: the task may only wait or queue there.
    pub waiting: bool,
}

/// Decides where a program task with `relation` goes. `allowed` says which nodes its
/// partition and locality permit. `None`: no node permitted has an engine of any kind in
/// the relation (or the relation is empty: the task is placed like any other).
pub fn choose(
    cfg: &EngineChoiceConfig,
    relation: &[EngineTotal],
    load: &EngineLoad,
    allowed: impl Fn(NodeId) -> bool,
) -> Option<EngineChoice> {
    let (target_kinds, second) = targets(relation, cfg.efficiency_bound);
    if target_kinds.is_empty() {
        return None;
    }
    // Slaves with a free engine of one of `kinds` and a load rate below the bound: most
    // free engines first, then the lower load rate, then the lower id.
    let eligible = |kinds: &[EngineKind]| -> Vec<(NodeId, EngineKind)> {
        let mut v: Vec<(NodeId, EngineKind, u32, f64)> = kinds
            .iter()
            .flat_map(|k| load.nodes_with(*k).map(move |n| (n, *k)))
            .filter(|(n, _)| allowed(*n))
            .filter(|(n, k)| load.free(*n, *k) > 0 && load.load_rate(*n, *k) < cfg.load_bound)
            .map(|(n, k)| (n, k, load.free(n, k), load.load_rate(n, k)))
            .collect();
        v.sort_by(|a, b| {
            b.2.cmp(&a.2)
                .then(a.3.total_cmp(&b.3))
                .then(a.0.cmp(&b.0))
                .then(a.1.cmp(&b.1))
        });
        v.into_iter().map(|(n, k, _, _)| (n, k)).collect()
    };
    let on_target = eligible(&target_kinds);
    if !on_target.is_empty() {
        return Some(EngineChoice {
            ranked: on_target,
            overflow: false,
            waiting: false,
        });
    }
    let total_of = |k: EngineKind| relation.iter().find(|e| e.engine == k).map(|e| e.total_us);
    let pays_off = |s: EngineKind| {
        let (Some(t_target), Some(t_second)) = (total_of(target_kinds[0]), total_of(s)) else {
            return false;
        };
        let engines: u32 = target_kinds
            .iter()
            .flat_map(|k| load.nodes_with(*k).map(move |n| (n, *k)))
            .filter(|(n, _)| allowed(*n))
            .map(|(n, k)| load.count(n, k))
            .sum();
        let waiting: u32 = target_kinds.iter().map(|k| load.waiting(*k)).sum();
        // Finish if waiting: (2 + w / n) target times (see the module docs).
        let rounds = 2.0 + f64::from(waiting) / f64::from(engines.max(1));
        (t_second as f64) < rounds * t_target as f64
    };
    if let Some(s) = second.filter(|s| pays_off(*s)) {
        let on_second = eligible(&[s]);
        if !on_second.is_empty() {
            return Some(EngineChoice {
                ranked: on_second,
                overflow: true,
                waiting: false,
            });
        }
    }
    // Nothing free: wait for a target engine (the least loaded first), where the queue
    // stage may queue the task.
    let mut waiting: Vec<(NodeId, EngineKind, f64)> = target_kinds
        .iter()
        .flat_map(|k| load.nodes_with(*k).map(move |n| (n, *k)))
        .filter(|(n, _)| allowed(*n))
        .map(|(n, k)| (n, k, load.load_rate(n, k)))
        .collect();
    if waiting.is_empty() {
        return None;
    }
    waiting.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    Some(EngineChoice {
        ranked: waiting.into_iter().map(|(n, k, _)| (n, k)).collect(),
        overflow: false,
        waiting: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(v: &[(EngineKind, u64)]) -> Vec<EngineTotal> {
        v.iter()
            .map(|(engine, total_us)| EngineTotal {
                engine: *engine,
                total_us: *total_us,
            })
            .collect()
    }

    const GPU_NPU_CPU: [(EngineKind, u64); 3] = [
        (EngineKind::Gpu, 100),
        (EngineKind::Npu, 150),
        (EngineKind::Cpu, 800),
    ];

    #[test]
    fn targets_take_kinds_within_the_efficiency_bound() {
        let r = rel(&GPU_NPU_CPU);
        assert_eq!(
            targets(&r, 1.0),
            (vec![EngineKind::Gpu], Some(EngineKind::Npu))
        );
        // NPU efficiency 100/150 = 0.67: a target under a bound of 0.6.
        assert_eq!(
            targets(&r, 0.6),
            (
                vec![EngineKind::Gpu, EngineKind::Npu],
                Some(EngineKind::Cpu)
            )
        );
        assert_eq!(targets(&[], 1.0), (Vec::new(), None));
    }

    #[test]
    fn target_first_then_second_best_when_the_target_is_scarce() {
        // Node 1: 2 GPUs; nodes 2 and 3: 2 NPUs each. Ten tasks wanting the GPU.
        let mut load = EngineLoad::default();
        load.set_count(NodeId(1), EngineKind::Gpu, 2);
        load.set_count(NodeId(2), EngineKind::Npu, 2);
        load.set_count(NodeId(3), EngineKind::Npu, 2);
        let cfg = EngineChoiceConfig {
            efficiency_bound: 1.0,
            load_bound: 1.0,
        };
        let r = rel(&GPU_NPU_CPU);
        let mut kinds = Vec::new();
        for _ in 0..10 {
            let c = choose(&cfg, &r, &load, |_| true).expect("a choice");
            let (node, kind) = c.ranked[0];
            if c.waiting {
                load.wait(kind);
                kinds.push(None);
                continue;
            }
            assert_eq!(c.overflow, kind == EngineKind::Npu);
            load.add(node, kind);
            kinds.push(Some((node.0, kind)));
        }
        use EngineKind::{Gpu, Npu};
        assert_eq!(
            kinds,
            vec![
                Some((1, Gpu)),
                Some((1, Gpu)),
                // The GPUs are taken: the overflow goes to the NPUs, most free first.
                Some((2, Npu)),
                Some((3, Npu)),
                Some((2, Npu)),
                Some((3, Npu)),
                None,
                None,
                None,
                None,
            ]
        );
        // Waiting tasks wait for the target kind.
        let c = choose(&cfg, &r, &load, |_| true).expect("a choice");
        assert!(c.waiting);
        assert_eq!(c.ranked, vec![(NodeId(1), Gpu)]);
    }

    #[test]
    fn a_much_slower_second_best_kind_takes_no_overflow() {
        // One busy GPU; the CPU is 8 times slower: waiting (finish after about 2 GPU
        // times) beats overflowing.
        let mut load = EngineLoad::default();
        load.set_count(NodeId(1), EngineKind::Gpu, 1);
        load.set_count(NodeId(1), EngineKind::Cpu, 8);
        load.add(NodeId(1), EngineKind::Gpu);
        let r = rel(&[(EngineKind::Gpu, 100), (EngineKind::Cpu, 800)]);
        let cfg = EngineChoiceConfig::default();
        let c = choose(&cfg, &r, &load, |_| true).expect("a choice");
        assert!(c.waiting, "{c:?}");
        // With 7 tasks already waiting for that GPU, waiting means about 9 GPU times: the
        // CPU (8) is faster now. (At 6 it would tie, and a tie waits.)
        for _ in 0..7 {
            load.wait(EngineKind::Gpu);
        }
        let c = choose(&cfg, &r, &load, |_| true).expect("a choice");
        assert!(c.overflow, "{c:?}");
        assert_eq!(c.ranked, vec![(NodeId(1), EngineKind::Cpu)]);
    }

    #[test]
    fn no_second_best_kind_means_waiting_for_the_target() {
        let mut load = EngineLoad::default();
        load.set_count(NodeId(1), EngineKind::Gpu, 1);
        load.add(NodeId(1), EngineKind::Gpu);
        let c = choose(
            &EngineChoiceConfig::default(),
            &rel(&[(EngineKind::Gpu, 10)]),
            &load,
            |_| true,
        )
        .expect("a choice");
        assert!(c.waiting && !c.overflow);
        // A node the task may not use is never proposed.
        assert_eq!(
            choose(
                &EngineChoiceConfig::default(),
                &rel(&[(EngineKind::Gpu, 10)]),
                &load,
                |n| n != NodeId(1)
            ),
            None
        );
    }

    #[test]
    fn load_bound_passes_over_busy_slaves_even_with_more_free_engines() {
        // Node 1: 20 NPUs, 17 busy (load 0.85, 3 free). Node 2: 2 NPUs, 0 busy (2 free).
        let mut load = EngineLoad::default();
        load.set_count(NodeId(1), EngineKind::Npu, 20);
        for _ in 0..17 {
            load.add(NodeId(1), EngineKind::Npu);
        }
        load.set_count(NodeId(2), EngineKind::Npu, 2);
        let r = rel(&[(EngineKind::Npu, 60), (EngineKind::Cpu, 100)]);
        let bounded = choose(&EngineChoiceConfig::default(), &r, &load, |_| true).expect("choice");
        assert_eq!(bounded.ranked, vec![(NodeId(2), EngineKind::Npu)]);
        // Without the bound (1.0 lets everything below full through), most free engines win.
        let loose = EngineChoiceConfig {
            load_bound: 1.0,
            ..Default::default()
        };
        let unbounded = choose(&loose, &r, &load, |_| true).expect("choice");
        assert_eq!(
            unbounded.ranked,
            vec![(NodeId(1), EngineKind::Npu), (NodeId(2), EngineKind::Npu)]
        );
        // Node 2 at 1 of 2 busy (0.5) is still below 0.8; at 2 of 2 it is full: with both
        // over the bound the CPU (second best, and faster than waiting for an NPU) takes the
        // overflow.
        load.add(NodeId(2), EngineKind::Npu);
        load.add(NodeId(2), EngineKind::Npu);
        load.set_count(NodeId(3), EngineKind::Cpu, 4);
        let c = choose(&EngineChoiceConfig::default(), &r, &load, |_| true).expect("choice");
        assert!(c.overflow);
        assert_eq!(c.ranked, vec![(NodeId(3), EngineKind::Cpu)]);
    }
}
