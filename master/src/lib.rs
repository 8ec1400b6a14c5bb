//! hetsched master: the I/O shell around the pure core (`hetsched-master-core`): the server
//! (client, slave and admin listeners, the HTTP API), the senders to slaves, the executor of
//! the leader's duties, and back-pressure on admission. Everything that decides lives in the
//! core crate; this crate owns sockets, timers, threads and the consensus node.

pub mod backpressure;
pub mod http_input;
pub mod server;
