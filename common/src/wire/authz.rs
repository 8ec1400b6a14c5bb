//! Which certificate role may send which message kind on a secured link
//! (docs/CONTRACT.md, "Security"). Checked by the framed server before any handler runs, so
//! a new request kind inherits its family's rule.
//!
//! - Raft traffic only from master certificates.
//! - Slave requests (register, heartbeats, reports) only from slave certificates; the master
//!   also checks the name (a slave registers and reports only as itself).
//! - Commands to a slave (assign, stop, logs) only from master certificates.
//! - Peer (forwarded) calls only from slave certificates.
//! - Client requests from anyone who completed the handshake; the master then decides by
//!   token or client certificate.
//! - Replies are never requests: refused.

use super::peer::Peer;
use crate::certs::Role;
use crate::protocol::{ErrorKind, ErrorReply, Message};

/// The role a message kind needs, `None` for client requests (decided per request).
pub fn required_role(msg: &Message) -> Result<Option<Role>, &'static str> {
    match msg {
        Message::Raft { .. } => Ok(Some(Role::Master)),
        Message::Slave(_) => Ok(Some(Role::Slave)),
        Message::ToSlave(_) => Ok(Some(Role::Master)),
        Message::Peer(_) => Ok(Some(Role::Slave)),
        Message::Client(_) => Ok(None),
        Message::ClientReply(_)
        | Message::SlaveReply(_)
        | Message::ToSlaveReply(_)
        | Message::PeerReply(_)
        | Message::Error(_) => Err("a reply is not a request"),
    }
}

/// Admits `msg` from `peer` on a secured link, or says why not.
pub fn admit(msg: &Message, peer: &Peer) -> Result<(), ErrorReply> {
    let need = required_role(msg).map_err(|why| {
        ErrorReply::new(
            ErrorKind::PermissionDenied,
            format!("permission denied: {why}"),
        )
    })?;
    match need {
        None => Ok(()),
        Some(role) if peer.has_role(role) => Ok(()),
        Some(role) => Err(ErrorReply::new(
            ErrorKind::PermissionDenied,
            format!(
                "permission denied: {} needs a {role} certificate; {} presented {}",
                kind_name(msg),
                peer.addr,
                peer.identity
                    .as_ref()
                    .map(|i| format!("a {} certificate ({})", i.role, i.name))
                    .unwrap_or_else(|| "none".to_string())
            ),
        )),
    }
}

fn kind_name(msg: &Message) -> &'static str {
    match msg {
        Message::Raft { .. } => "Raft traffic",
        Message::Slave(_) => "a slave request",
        Message::ToSlave(_) => "a command to a slave",
        Message::Peer(_) => "a forwarded call",
        Message::Client(_) => "a client request",
        _ => "a reply",
    }
}
