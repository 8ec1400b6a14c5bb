//! API tokens (docs/SECURITY.md): their text form, the salted hash the masters keep, and
//! their generation.
//!
//! A token is `hst.ACCESSOR.SECRET` (lowercase hex, no spaces or quotes, so it fits an
//! `export` line and an `Authorization: Bearer` header). Only `SHA-256(salt ‖ secret)` is
//! replicated: a fast hash is enough for a 256-bit random secret (nothing to brute-force),
//! and tokens are checked on every request (the master also caches verified ones).

use sha2::{Digest, Sha256};

/// The first part of every token.
pub const PREFIX: &str = "hst";

/// A token's accessor and secret, or `None` when `token` is not of the token form.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let mut parts = token.trim().split('.');
    let (p, accessor, secret) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (p == PREFIX && parts.next().is_none() && hex(accessor) && hex(secret))
        .then_some((accessor, secret))
}

/// The stored hash of `secret` under `salt` (hex).
pub fn hash(salt: &str, secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(b":");
    h.update(secret.as_bytes());
    to_hex(&h.finalize())
}

/// Whether `secret` hashes to `stored` under `salt` (compared in constant time).
pub fn verify(salt: &str, stored: &str, secret: &str) -> bool {
    let got = hash(salt, secret);
    got.len() == stored.len()
        && got
            .bytes()
            .zip(stored.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// A freshly generated token: the text handed to its holder once, and what is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// `hst.ACCESSOR.SECRET`.
    pub token: String,
    /// The public name.
    pub accessor: String,
    /// The salt (hex).
    pub salt: String,
    /// `hash(salt, secret)`.
    pub hash: String,
}

/// Generates a token from the operating system's random source.
#[cfg(feature = "net")]
pub fn generate() -> Result<Generated, String> {
    let rng = rustls::crypto::ring::default_provider().secure_random;
    let mut buf = [0u8; 8 + 16 + 32];
    rng.fill(&mut buf)
        .map_err(|_| "the system random source failed".to_string())?;
    let accessor = to_hex(&buf[..8]);
    let salt = to_hex(&buf[8..24]);
    let secret = to_hex(&buf[24..]);
    Ok(Generated {
        token: format!("{PREFIX}.{accessor}.{secret}"),
        hash: hash(&salt, &secret),
        accessor,
        salt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_parse_and_verify() {
        let g = generate().expect("random");
        let (accessor, secret) = parse(&g.token).expect("token form");
        assert_eq!(accessor, g.accessor);
        assert!(verify(&g.salt, &g.hash, secret));
        assert!(!verify(&g.salt, &g.hash, "00"));
        assert_ne!(generate().expect("random").token, g.token);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for t in [
            "",
            "hst",
            "hst.ab",
            "xyz.ab.cd",
            "hst.ab.cd.ef",
            "hst.a b.cd",
            "hst..cd",
        ] {
            assert!(parse(t).is_none(), "{t:?}");
        }
    }
}
