//! The slave's long-lived supervisor pool: the one way command tasks start. [`server`] is the
//! pool process (`hetsched supervise --pool DIR`), [`client`] the agent's side of it (and its
//! [`Launch`](super::Launch)), [`protocol`] the lines and files they share.

pub mod client;
pub mod protocol;
pub mod server;
