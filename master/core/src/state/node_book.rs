//! The node book: the slaves the cluster knows. It owns the node table, the registration
//! keys that make a re-registering slave the same node, and the next node id; it registers
//! nodes, brings them up and down, drains them, and gives back what a node holds for a task
//! that left it (a booked engine unit, cores held for it by compressions). Which tasks a node
//! holds, and their grants, change with the tasks, by the rules that move tasks
//! (`grants.rs` and the handlers that use it), since every such change is also a task's.

use super::command::{Command, Outcome};
use super::model::{Booking, Drain, Node, NodeLiveness};
use hetsched_common::protocol::NodeCounts;
use hetsched_common::{Attempt, EngineKind, JobId, NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// Nodes by id, registration keys and the next node id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeBook {
    /// Nodes by id.
    nodes: BTreeMap<NodeId, Node>,
    /// Registration key → node id.
    keys: BTreeMap<u64, NodeId>,
    /// The last node id handed out.
    next: u64,
}

impl NodeBook {
    /// The book a snapshot describes.
    pub(super) fn from_snapshot(
        nodes: BTreeMap<NodeId, Node>,
        keys: BTreeMap<u64, NodeId>,
        next: u64,
    ) -> Self {
        Self { nodes, keys, next }
    }

    /// Nodes by id.
    pub fn all(&self) -> &BTreeMap<NodeId, Node> {
        &self.nodes
    }

    /// Registration key → node id (for snapshots).
    pub(super) fn keys(&self) -> &BTreeMap<u64, NodeId> {
        &self.keys
    }

    /// The last node id handed out (for snapshots).
    pub(super) fn next_id(&self) -> u64 {
        self.next
    }

    /// Test hook, only with the `forge` feature: the node table, mutable.
    #[cfg(feature = "forge")]
    pub(super) fn all_mut(&mut self) -> &mut BTreeMap<NodeId, Node> {
        &mut self.nodes
    }

    /// One node.
    pub fn get(&self, id: &NodeId) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// One node, to change what it holds.
    pub(super) fn get_mut(&mut self, id: &NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id)
    }

    /// Whether `id` is a registered node.
    pub fn contains_key(&self, id: &NodeId) -> bool {
        self.nodes.contains_key(id)
    }

    /// Every node, by id.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Node> {
        self.nodes.values()
    }

    /// How many nodes are registered.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node is registered.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Registers a slave, or re-registers the one its key names (`Command::RegisterNode`):
    /// a new node gets the next id and its capacity; a known one keeps its id, and takes
    /// the new capacity only while it holds nothing.
    pub(super) fn register(&mut self, registration: Command) -> Outcome {
        let Command::RegisterNode {
            key,
            node: claimed,
            name,
            addr,
            capacity,
            labels,
            partitions,
        } = registration
        else {
            return Outcome::Rejected("not a registration".into());
        };
        let known = self.keys.get(&key).copied();
        if let (Some(c), Some(k)) = (claimed, known) {
            if c != k {
                return Outcome::Rejected(format!(
                    "registration key belongs to {k}, not the claimed {c}"
                ));
            }
        }
        match known {
            Some(id) => {
                let Some(n) = self.nodes.get_mut(&id) else {
                    return Outcome::Rejected(format!("{id} is missing from the node table"));
                };
                n.name = name;
                n.addr = addr;
                n.labels = labels;
                n.partitions = partitions;
                n.liveness = NodeLiveness::Up;
                // A node's capacity can only change while it holds nothing: its free vector
                // is capacity minus its tasks' grants and its stopping (preempted) attempts'
                // holdings, and must stay consistent. A slave agent restarted while
                // preempted attempts still stop there holds no tasks but still those.
                if n.tasks.is_empty() && n.queued.is_empty() && n.stopping.is_empty() {
                    n.free = capacity.clone();
                    n.capacity = capacity;
                }
                Outcome::Registered { node: id }
            }
            None => {
                self.next += 1;
                let id = NodeId(self.next);
                self.keys.insert(key, id);
                self.nodes.insert(
                    id,
                    Node {
                        id,
                        key,
                        name,
                        addr,
                        labels,
                        free: capacity.clone(),
                        capacity,
                        liveness: NodeLiveness::Up,
                        tasks: BTreeSet::new(),
                        partitions,
                        stopping: Vec::new(),
                        drain: None,
                        compress_reserves: Vec::new(),
                        queued: Vec::new(),
                        steals_in: 0,
                        steals_out: 0,
                        booked: BTreeMap::new(),
                    },
                );
                Outcome::Registered { node: id }
            }
        }
    }

    /// Brings a down node back up.
    pub(super) fn up(&mut self, node: NodeId) -> Outcome {
        match self.nodes.get_mut(&node) {
            Some(n) if n.liveness == NodeLiveness::Down => {
                n.liveness = NodeLiveness::Up;
                Outcome::NodeUp { node }
            }
            Some(_) => Outcome::Ignored("node already up".into()),
            None => Outcome::Rejected(format!("unknown {node}")),
        }
    }

    /// Declares a node down; returns the preempted attempts still stopping there (their
    /// holdings go back with them), or why nothing changed.
    pub(super) fn down(&mut self, node: NodeId) -> Result<Vec<(TaskId, Attempt)>, Outcome> {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Err(Outcome::Rejected(format!("unknown {node}")));
        };
        if n.liveness == NodeLiveness::Down {
            return Err(Outcome::Ignored("node already down".into()));
        }
        n.liveness = NodeLiveness::Down;
        Ok(n.stopping.iter().map(|s| (s.task, s.attempt)).collect())
    }

    /// Starts (or moves the deadline of) a node's drain.
    pub(super) fn drain(&mut self, node: NodeId, at_ms: u64, deadline_ms: Option<u64>) -> Outcome {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Outcome::Rejected(format!("unknown {node}"));
        };
        // Draining again moves the deadline (or removes it) but keeps when it began.
        let since_ms = n.drain.as_ref().map_or(at_ms, |d| d.since_ms);
        n.drain = Some(Drain {
            since_ms,
            deadline_ms,
        });
        Outcome::DrainChanged { node }
    }

    /// Ends a node's drain.
    pub(super) fn undrain(&mut self, node: NodeId) -> Outcome {
        match self.nodes.get_mut(&node) {
            Some(n) => {
                n.drain = None;
                Outcome::DrainChanged { node }
            }
            None => Outcome::Rejected(format!("unknown {node}")),
        }
    }

    /// Draining nodes whose deadline is at or before `now_ms` and that still hold tasks.
    pub fn drains_due(&self, now_ms: u64) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|n| !n.tasks.is_empty())
            .filter(|n| {
                n.drain
                    .as_ref()
                    .and_then(|d| d.deadline_ms)
                    .is_some_and(|d| d <= now_ms)
            })
            .map(|n| n.id)
            .collect()
    }

    /// The node a user means by `name`: a registered name, an id (`3`) or `node-3`. A name
    /// wins over an id when both match.
    pub fn resolve(&self, name: &str) -> Option<NodeId> {
        let name = name.trim();
        if let Some(n) = self.nodes.values().find(|n| n.name == name) {
            return Some(n.id);
        }
        name.parse::<NodeId>()
            .ok()
            .filter(|id| self.nodes.contains_key(id))
    }

    /// A job's locality names resolved to node ids (sorted, deduplicated).
    pub(super) fn resolve_all(&self, names: &[String]) -> Result<Vec<NodeId>, String> {
        let mut ids = Vec::with_capacity(names.len());
        for n in names {
            ids.push(
                self.resolve(n)
                    .ok_or_else(|| format!("no node named {n:?} is registered"))?,
            );
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// How many nodes are up, down and draining.
    pub fn counts(&self) -> NodeCounts {
        let up = self.nodes.values().filter(|n| n.is_up()).count() as u64;
        NodeCounts {
            total: self.nodes.len() as u64,
            up,
            down: self.nodes.len() as u64 - up,
            draining: self.nodes.values().filter(|n| n.drain.is_some()).count() as u64,
        }
    }

    /// The jobs of the preempted attempts still stopping somewhere: they hold resources
    /// sized by their job's request until they stop, so those jobs must stay.
    pub(super) fn stopping_jobs(&self) -> BTreeSet<JobId> {
        self.nodes
            .values()
            .flat_map(|n| n.stopping.iter().map(|s| s.job))
            .collect()
    }

    /// Gives a booked unit back on `node` (its GPU device returns with the allocation).
    pub(super) fn unbook(&mut self, node: NodeId, booking: Option<Booking>) {
        let (Some(b), Some(n)) = (booking, self.nodes.get_mut(&node)) else {
            return;
        };
        if let Some(c) = n.booked.get_mut(&b.kind) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                n.booked.remove(&b.kind);
            }
        }
        if b.extra && !matches!(b.kind, EngineKind::Cpu | EngineKind::Gpu) {
            let cap = n.capacity.engines.get(&b.kind).copied().unwrap_or(0);
            let e = n.free.engines.entry(b.kind).or_insert(0);
            *e = (*e + 1).min(cap);
        }
    }

    /// `task` left `node`: the cores compressions held there for it return to `free`.
    pub(super) fn end_reserves_for(&mut self, node: NodeId, task: TaskId) {
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let mut back = 0;
        n.compress_reserves.retain(|r| {
            let mine = r.gpu_task == task;
            if mine {
                back += r.cpu_milli;
            }
            !mine
        });
        n.free.cpu_milli = (n.free.cpu_milli + back).min(n.capacity.cpu_milli);
    }
}

#[cfg(test)]
#[path = "node_book_tests.rs"]
mod tests;
