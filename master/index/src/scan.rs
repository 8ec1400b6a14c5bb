//! The reference: a linear scan with the index's exact semantics (same views, coordinates,
//! order and policies through [`FitSpace`]), O(|N|) per placement. Kept for the property
//! tests and as the benchmark's baseline.

use super::coord::Granularity;
use super::error::IndexError;
use super::node::{best_of, judge, NodeState, Reservation};
use super::policy::{Dir, Draw, FitSpace, Policy, Pos};
use super::query::PlacementQuery;
use super::tree::FxBuild;
use hetsched_common::rng::SplitMix64;
use hetsched_common::{GpuAlloc, NodeId, NodeResources, ResourceRequest, TaskId};
use std::collections::HashMap;

/// Nodes in a vector, searched front to back on every placement.
#[derive(Clone, Debug, Default)]
pub struct LinearScan {
    theta: Granularity,
    nodes: Vec<NodeState>,
    by_id: HashMap<NodeId, usize, FxBuild>,
}

impl LinearScan {
    /// An empty scan with granularity `theta` (the index's, for identical answers).
    pub fn new(theta: Granularity) -> Self {
        Self {
            theta,
            ..Self::default()
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds a node or replaces what it has free.
    pub fn upsert_node(&mut self, id: NodeId, free: &NodeResources) {
        match self.by_id.get(&id) {
            Some(i) => {
                let st = &mut self.nodes[*i];
                st.free.clone_from(free);
                st.refresh(&self.theta);
            }
            None => {
                self.by_id.insert(id, self.nodes.len());
                self.nodes
                    .push(NodeState::new(id, free.clone(), &self.theta));
            }
        }
    }

    /// Removes a node; returns whether it was there.
    pub fn remove_node(&mut self, id: NodeId) -> bool {
        let Some(i) = self.by_id.remove(&id) else {
            return false;
        };
        self.nodes.swap_remove(i);
        if let Some(moved) = self.nodes.get(i) {
            self.by_id.insert(moved.id, i);
        }
        true
    }

    /// Holds `amount` of `node` for `task` (see `PlacementIndex::reserve`).
    pub fn reserve(
        &mut self,
        node: NodeId,
        task: TaskId,
        amount: &ResourceRequest,
    ) -> Result<(), IndexError> {
        let st = self.state_mut(node)?;
        if let Some(r) = &st.reservation {
            if r.task != task {
                return Err(IndexError::AlreadyReserved {
                    node,
                    holder: r.task,
                });
            }
        }
        st.reservation = Some(Reservation {
            task,
            amount: amount.clone(),
        });
        let theta = self.theta;
        self.state_mut(node)?.refresh(&theta);
        Ok(())
    }

    /// Drops `node`'s reservation; returns the task it was held for.
    pub fn unreserve(&mut self, node: NodeId) -> Option<TaskId> {
        let theta = self.theta;
        let st = self.state_mut(node).ok()?;
        let r = st.reservation.take()?;
        st.refresh(&theta);
        Some(r.task)
    }

    /// What `node` has free.
    pub fn free(&self, node: NodeId) -> Option<&NodeResources> {
        self.by_id.get(&node).map(|i| &self.nodes[*i].free)
    }

    /// Takes `req` from `node` (see `NodeResources::take`).
    pub fn take(&mut self, node: NodeId, req: &ResourceRequest) -> Option<GpuAlloc> {
        let theta = self.theta;
        let st = self.state_mut(node).ok()?;
        let alloc = st.free.take(req)?;
        st.refresh(&theta);
        Some(alloc)
    }

    /// Gives back what [`take`](Self::take) took, capped at `capacity`.
    pub fn give_back(
        &mut self,
        node: NodeId,
        req: &ResourceRequest,
        alloc: &GpuAlloc,
        capacity: &NodeResources,
    ) -> bool {
        let theta = self.theta;
        let Ok(st) = self.state_mut(node) else {
            return false;
        };
        st.free.give_back(req, alloc, capacity);
        st.refresh(&theta);
        true
    }

    /// The node `policy` picks for `q`.
    pub fn place<P: Policy + ?Sized>(
        &mut self,
        q: &PlacementQuery<'_>,
        policy: &mut P,
    ) -> Option<NodeId> {
        policy.select(&mut self.space(q)).map(|p| p.node)
    }

    /// Every fitting node in `dir` order.
    pub fn ordered_fits(&mut self, q: &PlacementQuery<'_>, dir: Dir) -> Vec<NodeId> {
        let mut space = self.space(q);
        let mut out = Vec::new();
        let mut last: Option<Pos> = None;
        while let Some(p) = space.first(dir, last.as_ref()) {
            out.push(p.node);
            last = Some(p);
        }
        out
    }

    fn space<'a>(&'a self, q: &'a PlacementQuery<'a>) -> ScanSpace<'a> {
        ScanSpace { scan: self, q }
    }

    fn state_mut(&mut self, node: NodeId) -> Result<&mut NodeState, IndexError> {
        match self.by_id.get(&node) {
            Some(i) => Ok(&mut self.nodes[*i]),
            None => Err(IndexError::UnknownNode(node)),
        }
    }
}

struct ScanSpace<'a> {
    scan: &'a LinearScan,
    q: &'a PlacementQuery<'a>,
}

impl FitSpace for ScanSpace<'_> {
    fn order(&self) -> super::coord::DimOrder {
        self.q.order
    }

    fn first(&mut self, dir: Dir, after: Option<&Pos>) -> Option<Pos> {
        best_of(self.scan.nodes.iter(), self.q, dir, after)
    }

    fn draw(&mut self, rng: &mut SplitMix64) -> Draw {
        let nodes = &self.scan.nodes;
        match self.q.candidates {
            Some(c) if c.is_empty() => Draw::Empty,
            Some(c) => {
                let id = c.as_slice()[rng.below(c.len() as u64) as usize];
                match self.scan.by_id.get(&id) {
                    Some(i) => judge(&nodes[*i], self.q),
                    None => Draw::Miss(None),
                }
            }
            None if nodes.is_empty() => Draw::Empty,
            None => judge(&nodes[rng.below(nodes.len() as u64) as usize], self.q),
        }
    }
}
