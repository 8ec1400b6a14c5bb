//! Snapshots in the store: what a snapshot's `data` holds ([`SnapshotData`]), the snapshot
//! file (written atomically, never backwards), a local snapshot taken note of once its file is
//! durable (with the log compaction it allows), and a leader's snapshot replacing the log.
//!
//! Why a file and not a sled value: see the module doc of `storage`.

use super::{entry_key, sled_err, SledStorage, KEY_ADDRS, KEY_CONF_STATE, KEY_HARD_STATE};
use crate::Error;
use protobuf::Message as _;
use raft::eraftpb::Snapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a Raft snapshot's `data` holds: the member addresses (so a joining member learns how
/// to reach its peers) and the state machine's own snapshot (`None` only in the bootstrap
/// snapshot, which stands for the empty state and is never sent).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotData {
    /// Member id → cluster address.
    pub members: BTreeMap<u64, String>,
    /// `StateMachine::snapshot()` at the snapshot's index.
    #[serde(with = "serde_bytes_opt")]
    pub state: Option<Vec<u8>>,
}

mod serde_bytes_opt {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().map(|b| serde_bytes::Bytes::new(b)).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<serde_bytes::ByteBuf>::deserialize(d)?.map(|b| b.into_vec()))
    }
}

impl SnapshotData {
    /// Encodes for a snapshot's `data`.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        rmp_serde::to_vec(self).map_err(|e| Error::Storage(format!("encode snapshot: {e}")))
    }

    /// Decodes a snapshot's `data` (peer bytes or disk contents: errors, never panics).
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        rmp_serde::from_slice(bytes).map_err(|e| format!("undecodable snapshot data: {e}"))
    }
}

/// The snapshot file. Writes are serialised and never go backwards, so a local snapshot
/// written in the background cannot replace a newer one installed from the leader meanwhile.
pub struct SnapshotFile {
    pub(super) path: std::path::PathBuf,
    /// Index of the snapshot the file holds.
    pub(super) written: std::sync::Mutex<u64>,
}

impl SnapshotFile {
    /// Replaces the file atomically and durably (temporary file, fsync, rename, directory
    /// fsync) with the snapshot at `index`. Returns false (writing nothing) when the file
    /// already holds a snapshot at least as recent.
    pub fn write(&self, index: u64, bytes: &[u8]) -> Result<bool, Error> {
        use std::io::Write as _;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if *written >= index {
            return Ok(false);
        }
        let io = |what: &str, e: std::io::Error| Error::Storage(format!("snapshot {what}: {e}"));
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
        f.write_all(bytes).map_err(|e| io("write", e))?;
        f.sync_data().map_err(|e| io("fsync", e))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| io("rename", e))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("dir fsync", e))?;
        }
        *written = index;
        Ok(true)
    }
}

pub(super) fn has_state(snap: &Snapshot) -> bool {
    snap.get_metadata().index > 0
        && SnapshotData::decode(&snap.data).is_ok_and(|d| d.state.is_some())
}

impl SledStorage {
    /// The snapshot file, for writing a local snapshot off the Raft thread.
    pub fn snapshot_file(&self) -> std::sync::Arc<SnapshotFile> {
        self.snap_file.clone()
    }

    /// Stores a snapshot taken locally at an applied index (file written synchronously), and
    /// compacts the log up to `compact_to`.
    #[cfg(test)]
    pub fn store_snapshot(&mut self, snap: Snapshot, compact_to: u64) -> Result<(), Error> {
        let bytes = snap
            .write_to_bytes()
            .map_err(|e| Error::Storage(format!("encode snapshot: {e}")))?;
        self.snap_file.write(snap.get_metadata().index, &bytes)?;
        self.snapshot_written(snap, compact_to)
    }

    /// Takes note of a local snapshot whose file is durable (see [`SnapshotFile::write`]) and
    /// compacts the log up to `compact_to` (inclusive; at most the snapshot's index) in one
    /// sled batch. The file went first: a crash leaves a snapshot with an uncompacted log,
    /// never a compacted log without its snapshot.
    pub fn snapshot_written(&mut self, snap: Snapshot, compact_to: u64) -> Result<(), Error> {
        let index = snap.get_metadata().index;
        if index <= self.snapshot.get_metadata().index {
            // A leader's snapshot was installed meanwhile.
            return Ok(());
        }
        let compact_to = compact_to.min(index).min(self.last_index_now());
        let mut batch = sled::Batch::default();
        for i in self.first_index..=compact_to {
            batch.remove(&entry_key(i));
        }
        self.tree.apply_batch(batch).map_err(sled_err)?;
        if compact_to >= self.first_index {
            let drop = (compact_to + 1 - self.first_index) as usize;
            self.terms.drain(..drop.min(self.terms.len()));
            self.first_index = compact_to + 1;
        }
        self.snapshot_has_state = has_state(&snap);
        self.snapshot = snap;
        Ok(())
    }

    /// Installs a snapshot received from the leader (or the bootstrap one): the whole log is
    /// replaced by it, the commit index and configuration follow it. Written, not flushed.
    pub fn apply_snapshot(
        &mut self,
        snap: Snapshot,
        addrs: &BTreeMap<u64, String>,
    ) -> Result<(), Error> {
        let meta = snap.get_metadata().clone();
        let index = meta.index;
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(meta.term);
        hs.commit = index;
        self.snap_file.write(
            index,
            &snap
                .write_to_bytes()
                .map_err(|e| Error::Storage(format!("encode snapshot: {e}")))?,
        )?;
        let mut batch = sled::Batch::default();
        for i in self.first_index..=self.last_index_now() {
            batch.remove(&entry_key(i));
        }
        batch.insert(
            KEY_HARD_STATE,
            hs.write_to_bytes()
                .map_err(|e| Error::Storage(format!("encode hard state: {e}")))?,
        );
        batch.insert(
            KEY_CONF_STATE,
            meta.get_conf_state()
                .write_to_bytes()
                .map_err(|e| Error::Storage(format!("encode conf state: {e}")))?,
        );
        batch.insert(
            KEY_ADDRS,
            rmp_serde::to_vec(addrs)
                .map_err(|e| Error::Storage(format!("encode address map: {e}")))?,
        );
        self.tree.apply_batch(batch).map_err(sled_err)?;
        self.hard_state = hs;
        self.conf_state = meta.get_conf_state().clone();
        self.terms.clear();
        self.first_index = index + 1;
        self.snapshot_has_state = has_state(&snap);
        self.snapshot = snap;
        Ok(())
    }
}
