//! Encoding the state for snapshots, and the state hash replicas and the chaos checker compare.

use super::*;

impl ClusterState {
    /// A fixed hash (FNV-1a, 64 bit) of the canonical serialisation: equal on every replica
    /// that applied the same log.
    pub fn state_hash(&self) -> u64 {
        match rmp_serde::to_vec_named(self) {
            Ok(bytes) => fnv1a64(&bytes),
            Err(_) => 0,
        }
    }

    /// Serialised state (for snapshots).
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// State from [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Self, String> {
        let mut s: Self = rmp_serde::from_slice(b).map_err(|e| format!("bad snapshot: {e}"))?;
        s.rebuild_derived();
        Ok(s)
    }

    /// Size of the serialised state, bytes (`status --json` `"state_bytes"`).
    pub fn state_bytes(&self) -> u64 {
        rmp_serde::to_vec_named(self).map_or(0, |b| b.len() as u64)
    }
}
