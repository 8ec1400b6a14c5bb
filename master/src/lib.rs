//! hetsched master: the replicated cluster state (pure), the scheduling core (pure), and the
//! actors that connect them to consensus, slaves and clients.

pub mod admission;
pub mod duties;
pub mod forward;
pub mod plan;
pub mod sched;
pub mod server;
pub mod sim;
pub mod state;
