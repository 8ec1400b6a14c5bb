//! The token requests (docs/SECURITY.md): `acl bootstrap`, `acl token create|list|revoke`.
//!
//! The leader generates each token's secret and proposes only its salted hash, so the
//! secret is never in the Raft log or a snapshot; the answer carries it this once. Who may
//! send these is decided before (`authz`: administrators only). [`Acl`] decides (what a
//! request may carry, the command, the answer to its outcome); `client_api` proposes.

use super::reply::{not_found, unexpected};
use hetsched_common::protocol::{ClientResponse, ErrorKind, ErrorReply, NewToken, TokenRole};
use hetsched_common::tokens::Generated;
use hetsched_master_core::state::{ClusterState, Command, Outcome, TokenRecord};

/// The user the bootstrap token acts as (the administrator, like the `client.root`
/// certificate).
pub const BOOTSTRAP_USER: &str = super::authz::ROOT_USER;

/// Longest user name a token may carry.
const MAX_USER_LEN: usize = 128;

/// A token to create: the command that stores its hash, and the answer once it applied.
#[derive(Debug)]
pub(super) struct TokenToCreate {
    /// `CreateToken`, without the secret.
    pub command: Command,
    /// The answer when it applied (it carries the secret, this once).
    answer: NewToken,
    bootstrap: bool,
}

impl TokenToCreate {
    /// The answer to the proposal's outcome.
    pub fn answer(self, o: Outcome) -> Result<ClientResponse, ErrorReply> {
        let t = self.answer;
        match o {
            Outcome::Ignored(_) => {
                tracing::info!(user = %t.user, role = %t.role, accessor = %t.accessor, bootstrap = self.bootstrap, "token created");
                Ok(ClientResponse::Token(t))
            }
            Outcome::Rejected(why) if self.bootstrap => Err(ErrorReply::new(
                ErrorKind::PermissionDenied,
                format!("permission denied: {why}"),
            )),
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            o => Err(unexpected(o)),
        }
    }
}

/// The token requests' decisions, over the applied state's ACL.
pub(super) struct Acl<'a> {
    state: &'a ClusterState,
}

impl<'a> Acl<'a> {
    /// Decisions against `state`.
    pub fn new(state: &'a ClusterState) -> Self {
        Self { state }
    }

    /// A fresh token secret, from the operating system's random source.
    pub fn secret() -> Result<Generated, ErrorReply> {
        hetsched_common::tokens::generate().map_err(|e| ErrorReply::new(ErrorKind::Internal, e))
    }

    /// The first administrator token (`g`: its freshly generated secret).
    pub fn bootstrap(g: Generated) -> TokenToCreate {
        token(g, BOOTSTRAP_USER.into(), TokenRole::Admin, None, true)
    }

    /// A token for `user` with `role`, valid for `ttl_ms` from `now_ms` when given.
    pub fn create(
        g: Generated,
        user: String,
        role: TokenRole,
        ttl_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<TokenToCreate, ErrorReply> {
        if user.is_empty()
            || user.len() > MAX_USER_LEN
            || user.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ErrorReply::new(
                ErrorKind::Invalid,
                format!("user {user:?}: 1 to {MAX_USER_LEN} characters, no spaces"),
            ));
        }
        if ttl_ms == Some(0) {
            return Err(ErrorReply::new(
                ErrorKind::Invalid,
                "--ttl must be positive",
            ));
        }
        let expires_ms = ttl_ms.map(|t| now_ms.saturating_add(t));
        Ok(token(g, user, role, expires_ms, false))
    }

    /// Every token, without secrets.
    pub fn tokens(&self) -> ClientResponse {
        ClientResponse::Tokens(self.state.acl().tokens.values().map(|t| t.info()).collect())
    }

    /// The `RevokeToken` of a token named by accessor (or by the whole token, whose
    /// accessor it names), or not found.
    pub fn revoke(&self, accessor: String) -> Result<Command, ErrorReply> {
        let accessor = hetsched_common::tokens::parse(&accessor)
            .map(|(a, _)| a.to_string())
            .unwrap_or(accessor);
        if !self.state.acl().tokens.contains_key(&accessor) {
            return Err(not_found(format!("no such token: {accessor}")));
        }
        Ok(Command::RevokeToken { accessor })
    }

    /// The answer to a revocation's outcome.
    pub fn revoked(o: Outcome) -> Result<ClientResponse, ErrorReply> {
        match o {
            Outcome::Ignored(_) => {
                tracing::info!("token revoked");
                Ok(ClientResponse::Done)
            }
            Outcome::Rejected(why) => Err(not_found(why)),
            o => Err(unexpected(o)),
        }
    }
}

fn token(
    g: Generated,
    user: String,
    role: TokenRole,
    expires_ms: Option<u64>,
    bootstrap: bool,
) -> TokenToCreate {
    let record = TokenRecord {
        accessor: g.accessor.clone(),
        user: user.clone(),
        role,
        salt: g.salt,
        hash: g.hash,
        created_ms: 0,
        expires_ms,
    };
    TokenToCreate {
        command: Command::CreateToken {
            token: record,
            bootstrap,
        },
        answer: NewToken {
            token: g.token,
            user,
            role,
            accessor: g.accessor,
            expires_ms,
        },
        bootstrap,
    }
}

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
