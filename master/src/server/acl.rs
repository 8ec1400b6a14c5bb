//! The token requests (docs/SECURITY.md): `acl bootstrap`, `acl token create|list|revoke`.
//!
//! The leader generates each token's secret and proposes only its salted hash, so the
//! secret is never in the Raft log or a snapshot; the answer carries it this once. Who may
//! send these is decided before (`authz`: administrators only).

use super::reply::{not_found, unexpected};
use super::{now_ms, Master};
use hetsched_common::protocol::{ClientResponse, ErrorKind, ErrorReply, NewToken, TokenRole};
use hetsched_master_core::state::{Command, Outcome, TokenRecord};

/// The user the bootstrap token acts as (the administrator, like the `client.root`
/// certificate).
pub const BOOTSTRAP_USER: &str = super::authz::ROOT_USER;

/// Longest user name a token may carry.
const MAX_USER_LEN: usize = 128;

impl Master {
    /// The first administrator token; refused once one was bootstrapped.
    pub(super) async fn acl_bootstrap(&self) -> Result<ClientResponse, ErrorReply> {
        self.require_leader()?;
        self.new_token(BOOTSTRAP_USER.into(), TokenRole::Admin, None, true)
            .await
    }

    /// A token for `user` with `role`, valid for `ttl_ms` when given.
    pub(super) async fn create_token(
        &self,
        user: String,
        role: TokenRole,
        ttl_ms: Option<u64>,
    ) -> Result<ClientResponse, ErrorReply> {
        self.require_leader()?;
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
        self.new_token(user, role, ttl_ms, false).await
    }

    async fn new_token(
        &self,
        user: String,
        role: TokenRole,
        ttl_ms: Option<u64>,
        bootstrap: bool,
    ) -> Result<ClientResponse, ErrorReply> {
        let g = hetsched_common::tokens::generate()
            .map_err(|e| ErrorReply::new(ErrorKind::Internal, e))?;
        let expires_ms = ttl_ms.map(|t| now_ms().saturating_add(t));
        let token = TokenRecord {
            accessor: g.accessor.clone(),
            user: user.clone(),
            role,
            salt: g.salt,
            hash: g.hash,
            created_ms: 0,
            expires_ms,
        };
        match self
            .propose(Command::CreateToken { token, bootstrap }, None)
            .await?
        {
            Outcome::Ignored(_) => {
                tracing::info!(%user, %role, accessor = %g.accessor, bootstrap, "token created");
                Ok(ClientResponse::Token(NewToken {
                    token: g.token,
                    user,
                    role,
                    accessor: g.accessor,
                    expires_ms,
                }))
            }
            Outcome::Rejected(why) if bootstrap => Err(ErrorReply::new(
                ErrorKind::PermissionDenied,
                format!("permission denied: {why}"),
            )),
            Outcome::Rejected(why) => Err(ErrorReply::new(ErrorKind::Invalid, why)),
            o => Err(unexpected(o)),
        }
    }

    /// Every token, without secrets.
    pub(super) fn tokens(&self) -> ClientResponse {
        let s = self.shared.read_state();
        ClientResponse::Tokens(s.acl().tokens.values().map(|t| t.info()).collect())
    }

    /// Revokes a token by accessor (or by the whole token, whose accessor it names).
    pub(super) async fn revoke_token(
        &self,
        accessor: String,
    ) -> Result<ClientResponse, ErrorReply> {
        self.require_leader()?;
        let accessor = hetsched_common::tokens::parse(&accessor)
            .map(|(a, _)| a.to_string())
            .unwrap_or(accessor);
        if !self
            .shared
            .read_state()
            .acl()
            .tokens
            .contains_key(&accessor)
        {
            return Err(not_found(format!("no such token: {accessor}")));
        }
        match self
            .propose(
                Command::RevokeToken {
                    accessor: accessor.clone(),
                },
                None,
            )
            .await?
        {
            Outcome::Ignored(_) => {
                tracing::info!(%accessor, "token revoked");
                Ok(ClientResponse::Done)
            }
            Outcome::Rejected(why) => Err(not_found(why)),
            o => Err(unexpected(o)),
        }
    }
}
