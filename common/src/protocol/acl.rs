//! Users, tokens and roles (docs/SECURITY.md): what the `acl` requests carry and answer.
//!
//! A token is `hst.ACCESSOR.SECRET`: the accessor names it in listings and revocations, the
//! secret is shown once, at creation, and the masters keep only a salted hash of it.

use serde::{Deserialize, Serialize};

/// What a token's holder may do (docs/SECURITY.md, the request table).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TokenRole {
    /// Its own jobs: submits only as itself, sees, cancels and reads the logs of its own.
    #[default]
    User,
    /// Also drains nodes and acts on every job.
    Operator,
    /// Also members, the priority configuration and tokens.
    Admin,
}

impl TokenRole {
    /// The role's name as the CLI and JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::User => "user",
            TokenRole::Operator => "operator",
            TokenRole::Admin => "admin",
        }
    }
}

impl std::fmt::Display for TokenRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TokenRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(TokenRole::User),
            "operator" => Ok(TokenRole::Operator),
            "admin" => Ok(TokenRole::Admin),
            other => Err(format!(
                "unknown role {other:?}: expected user, operator or admin"
            )),
        }
    }
}

/// A token just created (`acl bootstrap`, `acl token create --json`): the only time its
/// secret is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewToken {
    /// The whole token (`hst.ACCESSOR.SECRET`), for `HETSCHED_TOKEN` or `Authorization: Bearer`.
    pub token: String,
    /// The user it acts as.
    pub user: String,
    /// Its role.
    pub role: TokenRole,
    /// Its public name, for `acl token revoke`.
    pub accessor: String,
    /// End of validity, ms since the Unix epoch (`None`: no end).
    #[serde(default)]
    pub expires_ms: Option<u64>,
}

/// A token as listed (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its public name.
    pub accessor: String,
    /// The user it acts as.
    pub user: String,
    /// Its role.
    pub role: TokenRole,
    /// When it was created, ms since the Unix epoch.
    pub created_ms: u64,
    /// End of validity, ms since the Unix epoch (`None`: no end).
    #[serde(default)]
    pub expires_ms: Option<u64>,
}
