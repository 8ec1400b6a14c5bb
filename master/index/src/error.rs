//! Errors of the placement index.

use super::coord::Dim;
use hetsched_common::{NodeId, TaskId};

/// What the index refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// A granularity θ of zero (every θ must be at least 1).
    #[error("granularity of {dim:?} must be at least 1")]
    ZeroGranularity {
        /// The dimension.
        dim: Dim,
    },
    /// A dimension order that is not a permutation of the dimensions.
    #[error("dimension order {0:?} names a dimension twice")]
    BadOrder(Vec<Dim>),
    /// A node the index does not hold.
    #[error("{0} is not in the index")]
    UnknownNode(NodeId),
    /// A node already holds a reservation for another task (one reservation per node).
    #[error("{node} already holds a reservation for {holder}")]
    AlreadyReserved {
        /// The node.
        node: NodeId,
        /// The task holding it.
        holder: TaskId,
    },
}
