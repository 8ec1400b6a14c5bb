//! The node book: the slaves the cluster knows. It owns the node table, the registration
//! keys that make a re-registering slave the same node, and the next node id; it registers
//! nodes and brings them back up. What a node holds (its tasks, queue, stopping attempts,
//! free resources) lives in its [`Node`] entry but is changed by the rules that move tasks
//! (`ClusterState`), since every such change is also a task's.

use super::command::{Command, Outcome};
use super::model::{Node, NodeLiveness};
use hetsched_common::NodeId;
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
}

#[cfg(test)]
#[path = "node_book_tests.rs"]
mod tests;
