use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl $name {
            /// The raw number (always ≥ 1 for ids handed out by the cluster).
            pub fn get(self) -> u64 {
                self.0
            }
        }

        /// A bare number (`5`) or the display form (`job-5`), as docs/CONTRACT.md allows.
        impl std::str::FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> crate::Result<Self> {
                let t = s.trim();
                let digits = t.strip_prefix($prefix).unwrap_or(t);
                digits.parse::<u64>().map($name).map_err(|_| crate::Error::Invalid {
                    what: "id",
                    why: format!(
                        "{s:?} is not an id (expected a number or {}N)",
                        $prefix
                    ),
                })
            }
        }
    };
}

id_type!(
    /// A job: one submission of K identical tasks.
    JobId,
    "job-"
);
id_type!(
    /// A task: one unit of execution of a job. Equals `HETSCHED_TASK_ID` in the task's env.
    TaskId,
    "task-"
);
id_type!(
    /// A slave node, handed out by the cluster on first registration and kept by the slave.
    NodeId,
    "node-"
);
id_type!(
    /// A master (Raft peer). Must be ≥ 1: raft-rs reserves 0 for "none".
    MasterId,
    "master-"
);

/// A client-chosen id carried by every mutating command so that a retried request applies
/// at most once (the state machine remembers the ids it has applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientRequestId(pub u64);

/// Longest idempotency key, in bytes (docs/CONTRACT.md, "HTTP API").
pub const IDEMPOTENCY_KEY_MAX: usize = 64;

impl ClientRequestId {
    /// The bit that marks a request id made from a user-given idempotency key: such an
    /// outcome is kept 24 h rather than the retry window of automatic ids, and the leader
    /// scopes it to the job's user ([`scoped`](Self::scoped)). Automatic ids leave it clear
    /// ([`automatic`](Self::automatic)).
    pub const KEYED: u64 = 1 << 63;

    /// An automatic (random) request id: `bits` with the keyed bit cleared.
    pub fn automatic(bits: u64) -> Self {
        Self(bits & !Self::KEYED)
    }

    /// The request id a client sends for idempotency key `key` (1 to 64 bytes of visible
    /// ASCII: `!` to `~`), before the leader scopes it to the user; a decimal key is a key
    /// like any other.
    pub fn from_key(key: &str) -> Result<Self, String> {
        if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX {
            return Err(format!(
                "an idempotency key is 1 to {IDEMPOTENCY_KEY_MAX} bytes, not {}",
                key.len()
            ));
        }
        if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "an idempotency key is visible ASCII (! to ~), not {c:?}"
            ));
        }
        Ok(Self(Self::KEYED | (fnv1a(key.as_bytes()) >> 1)))
    }

    /// Whether this id came from an idempotency key.
    pub fn is_keyed(self) -> bool {
        self.0 & Self::KEYED != 0
    }

    /// A keyed id bound to `user`, so that two users' equal keys name two requests; an
    /// automatic id is returned as it is.
    pub fn scoped(self, user: &str) -> Self {
        if !self.is_keyed() {
            return self;
        }
        let mixed = crate::rng::SplitMix64::new(self.0 ^ fnv1a(user.as_bytes())).next_u64();
        Self(Self::KEYED | (mixed >> 1))
    }
}

/// FNV-1a, 64 bits: stable across builds and machines (every master derives the same id).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl fmt::Display for ClientRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{:016x}", self.0)
    }
}

/// Which execution of a task an assignment or report belongs to. A task that is lost,
/// preempted or moved is retried with attempt + 1; reports of older attempts are ignored.
pub type Attempt = u32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_bare_and_prefixed() {
        assert_eq!("5".parse::<JobId>().ok(), Some(JobId(5)));
        assert_eq!("job-5".parse::<JobId>().ok(), Some(JobId(5)));
        assert_eq!("task-17".parse::<TaskId>().ok(), Some(TaskId(17)));
        assert_eq!("node-3".parse::<NodeId>().ok(), Some(NodeId(3)));
        assert!("task-17".parse::<JobId>().is_err());
        assert!("lots".parse::<JobId>().is_err());
        assert!("-1".parse::<JobId>().is_err());
    }

    #[test]
    fn idempotency_keys_are_checked_keyed_and_scoped_per_user() {
        let k = ClientRequestId::from_key("sweep-7").expect("a key");
        assert!(k.is_keyed());
        assert_eq!(ClientRequestId::from_key("sweep-7"), Ok(k), "stable");
        assert!(
            ClientRequestId::from_key("12345").is_ok(),
            "numeric keys are keys"
        );
        assert!(ClientRequestId::from_key(&"x".repeat(64)).is_ok());
        assert!(ClientRequestId::from_key(&"x".repeat(65)).is_err());
        assert!(ClientRequestId::from_key("").is_err());
        assert!(ClientRequestId::from_key("a b").is_err());
        assert!(ClientRequestId::from_key("é").is_err());
        let (a, b) = (k.scoped("alice"), k.scoped("bob"));
        assert!(a.is_keyed() && b.is_keyed());
        assert_ne!(a, b, "per user");
        assert_eq!(a, k.scoped("alice"));
        let auto = ClientRequestId::automatic(u64::MAX);
        assert!(!auto.is_keyed());
        assert_eq!(auto.scoped("alice"), auto, "automatic ids are not scoped");
    }
}
