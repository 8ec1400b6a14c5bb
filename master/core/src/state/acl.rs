//! Users' API tokens in the replicated state (docs/SECURITY.md): who holds which role.
//!
//! Only a salted hash of each token's secret is kept (the leader generates the secret and
//! proposes the hash; the secret never enters the log), so a snapshot or an exported log
//! gives no token away. Expiry is a field the masters compare with their clock when a
//! token is presented: `apply` reads no clock. `bootstrapped` makes `acl bootstrap` answer
//! once per cluster.

use hetsched_common::protocol::{TokenInfo, TokenRole};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One stored token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Public name (also the first part of the token).
    pub accessor: String,
    /// The user it acts as.
    pub user: String,
    /// Its role.
    pub role: TokenRole,
    /// Salt of the hash (hex).
    pub salt: String,
    /// `hetsched_common::tokens::hash(salt, secret)`.
    pub hash: String,
    /// Leader's clock at creation, ms.
    pub created_ms: u64,
    /// End of validity, ms (`None`: no end).
    #[serde(default)]
    pub expires_ms: Option<u64>,
}

impl TokenRecord {
    /// The listing view (no salt, no hash).
    pub fn info(&self) -> TokenInfo {
        TokenInfo {
            accessor: self.accessor.clone(),
            user: self.user.clone(),
            role: self.role,
            created_ms: self.created_ms,
            expires_ms: self.expires_ms,
        }
    }

    /// Whether the token is still valid at `now_ms`.
    pub fn valid_at(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| now_ms < e)
    }
}

/// Every token, by accessor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclBook {
    /// Tokens by accessor.
    #[serde(default)]
    pub tokens: BTreeMap<String, TokenRecord>,
    /// `acl bootstrap` has been answered.
    #[serde(default)]
    pub bootstrapped: bool,
}

impl AclBook {
    /// Stores a token (`bootstrap`: the first administrator token, refused once one was
    /// bootstrapped). The leader's clock stamps its creation. A note on what was done, or
    /// why nothing was.
    pub(super) fn create_token(
        &mut self,
        mut token: TokenRecord,
        bootstrap: bool,
        at_ms: u64,
    ) -> Result<String, String> {
        if bootstrap && self.bootstrapped {
            return Err(
                "the ACL is already bootstrapped: an administrator creates further tokens \
                 (acl token create)"
                    .into(),
            );
        }
        if token.accessor.is_empty() || token.user.is_empty() {
            return Err("a token needs an accessor and a user".into());
        }
        if self.tokens.contains_key(&token.accessor) {
            return Err(format!("token {} exists already", token.accessor));
        }
        token.created_ms = at_ms;
        self.bootstrapped |= bootstrap;
        let accessor = token.accessor.clone();
        self.tokens.insert(accessor.clone(), token);
        Ok(format!("token {accessor}"))
    }

    /// Removes a token; a note on what was done, or why nothing was.
    pub(super) fn revoke_token(&mut self, accessor: &str) -> Result<String, String> {
        match self.tokens.remove(accessor) {
            Some(_) => Ok(format!("token {accessor} revoked")),
            None => Err(format!("no such token: {accessor}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::*;
    use crate::state::{Command, CommandEnvelope};

    fn token(accessor: &str) -> TokenRecord {
        TokenRecord {
            accessor: accessor.into(),
            user: "alice".into(),
            role: TokenRole::User,
            salt: "00".into(),
            hash: "11".into(),
            created_ms: 0,
            expires_ms: Some(50),
        }
    }

    fn apply(s: &mut ClusterState, command: Command) -> Outcome {
        let index = s.last_index() + 1;
        s.apply(
            index,
            CommandEnvelope {
                at_ms: 10,
                request: None,
                command,
            },
        )
    }

    #[test]
    fn bootstrap_answers_once_and_tokens_revoke() {
        let mut s = ClusterState::new();
        let boot = |a: &str| Command::CreateToken {
            token: token(a),
            bootstrap: true,
        };
        assert!(matches!(apply(&mut s, boot("a1")), Outcome::Ignored(_)));
        assert!(matches!(apply(&mut s, boot("a2")), Outcome::Rejected(_)));
        let plain = Command::CreateToken {
            token: token("a3"),
            bootstrap: false,
        };
        assert!(matches!(apply(&mut s, plain), Outcome::Ignored(_)));
        assert_eq!(s.acl().tokens.len(), 2);
        assert_eq!(s.acl().tokens["a1"].created_ms, 10);
        assert!(s.acl().tokens["a1"].valid_at(49) && !s.acl().tokens["a1"].valid_at(50));
        let revoke = |a: &str| Command::RevokeToken { accessor: a.into() };
        assert!(matches!(apply(&mut s, revoke("a1")), Outcome::Ignored(_)));
        assert!(matches!(apply(&mut s, revoke("a1")), Outcome::Rejected(_)));
        // A snapshot round trip keeps the tokens.
        let bytes = rmp_serde::to_vec_named(&s).expect("encode");
        let back: ClusterState = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back.acl(), s.acl());
    }
}
