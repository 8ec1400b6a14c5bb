//! Who sent a request, as the framed server tells each handler: the remote address, the
//! identity of a verified certificate, and the token the request carried (docs/SECURITY.md).

use super::io::Connection;
use crate::certs::{Identity, Role};
use std::sync::Arc;

/// Who sent a request: the remote address (for logs) and, on a TLS link, the identity its
/// verified certificate carries (`None` on plain links and for clients without a
/// certificate).
#[derive(Clone)]
pub struct Peer {
    /// Remote address.
    pub addr: std::net::SocketAddr,
    /// Verified identity.
    pub identity: Option<Identity>,
    /// Whether the link is TLS (the server runs secured).
    pub secured: bool,
    /// The API token this request carried (client requests only; it decides the caller
    /// over the certificate's name).
    pub token: Option<String>,
    /// The way back to the peer over the connection the request came on: calls on it are
    /// requests from this server to the peer, answered on the same connection (a slave
    /// takes its leader's commands on its own link). Set by the framed server.
    pub link: Option<Arc<Connection>>,
}

impl PartialEq for Peer {
    /// Who the peer is; the way back is not part of it.
    fn eq(&self, other: &Self) -> bool {
        self.addr == other.addr
            && self.identity == other.identity
            && self.secured == other.secured
            && self.token == other.token
    }
}

impl Eq for Peer {}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("addr", &self.addr)
            .field("identity", &self.identity)
            .field("secured", &self.secured)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// A plain-TCP peer (insecure servers, in-process tests).
    pub fn plain(addr: std::net::SocketAddr) -> Self {
        Self {
            addr,
            identity: None,
            secured: false,
            token: None,
            link: None,
        }
    }

    /// Whether the peer's certificate has `role`.
    pub fn has_role(&self, role: Role) -> bool {
        self.identity.as_ref().is_some_and(|i| i.role == role)
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.identity {
            Some(i) => write!(f, "{} ({i})", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}
