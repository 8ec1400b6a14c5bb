//! Framing and connections.
//!
//! A frame is a big-endian `u32` length followed by that many bytes of a named-field
//! MessagePack [`Envelope`]. The envelope carries the protocol version and a request id, so a
//! connection carries many requests in flight and a reply finds its request (streamed replies
//! set `more` on every part but the last).
//!
//! Bad input never panics: a frame over the cap, a partial frame that stalls, bytes that are
//! not an envelope, or a foreign version each give a typed [`crate::Error`]; the server
//! answers with an [`crate::protocol::ErrorReply`] where it can, logs, closes that
//! connection, and keeps serving others.
//!
//! Security (docs/CONTRACT.md): `tls.rs` holds the process's TLS setup, which `io.rs` uses
//! for every connection it accepts or makes; `authz.rs` says which certificate role may
//! send which message kind.
//!
//! `codec.rs` is pure (always built); `io.rs` needs tokio and is built with the `net` feature
//! (on by default).

#[cfg(feature = "net")]
pub mod authz;
mod codec;
#[cfg(feature = "net")]
pub mod fdlimit;
#[cfg(feature = "net")]
mod frame_io;
#[cfg(feature = "net")]
mod io;
#[cfg(feature = "net")]
mod peer;
#[cfg(feature = "net")]
pub mod tls;
#[cfg(feature = "net")]
mod tls_accept;

pub use codec::{
    decode_payload, encode_frame, Envelope, FrameLimits, DEFAULT_MAX_FRAME,
    DEFAULT_PARTIAL_FRAME_TIMEOUT, PROTOCOL_VERSION,
};
#[cfg(feature = "net")]
pub use frame_io::{read_frame, write_frame};
#[cfg(feature = "net")]
pub use io::{serve, serve_tls, CallError, Connection, Handler};
#[cfg(feature = "net")]
pub use peer::Peer;
