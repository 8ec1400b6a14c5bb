//! `raft::Storage` over sled.
//!
//! One sled tree holds everything: the entries and the hard state of one `Ready` go to disk
//! in an order that any crash leaves consistent (see `SledStorage::append`), and a snapshot
//! with the compaction it allows in one atomic batch:
//!
//! | key                     | value                                              |
//! |-------------------------|----------------------------------------------------|
//! | `b'e'` + index (u64 BE) | term (u64 BE) + protobuf `Entry`                    |
//! | `b"hs"`                 | protobuf `HardState`                               |
//! | `b"cs"`                 | protobuf `ConfState`                               |
//! | `b"addrs"`              | msgpack map member id → cluster address             |
//!
//! The snapshot (protobuf `Snapshot`, data: [`SnapshotData`]) is the file
//! `raft-snapshot.bin` next to sled's files, not a sled value. Measured: sled keeps large
//! values as blobs and rewrote the blob with its tree node, so next to the hard state
//! (rewritten every Ready) 8 MiB snapshots grew a data dir to 950 MiB within 30,000 entries;
//! alone in its own tree, one 32 MiB insert still took 0.5–1.4 s of the Raft thread. The file
//! is written to a temporary name, fsynced and renamed before the sled batch that compacts
//! the log, so a crash never leaves a compacted log without its snapshot; `open` repairs the
//! other window, a snapshot installed from the leader whose log replacement did not reach the
//! disk.
//!
//! The term prefix lets a restart rebuild the in-memory term index without decoding entries.
//! Writes made here are visible to raft-rs at once (sled serves them from memory); they become
//! durable only on `sled::Db::flush`, which the node runs on its storage thread — see the
//! `node` module for the rule that ties flushes to sending messages.
//!
//! A bootstrapped member starts from a snapshot at (index 1, term 1) holding the initial
//! voters and no state, with an empty log: a member that joins later (empty log) can then
//! never be caught up from the log — the initial configuration is in no entry — and always
//! receives a real snapshot (see the rules of `raft::Storage::snapshot` in `log.rs`).
//!
//! This module opens the store and holds its state; the rest is split by concern:
//!
//! - `log`: appending entries, and the `raft::Storage` reads raft-rs makes;
//! - `snapshot`: the snapshot's data and file, local snapshots with the compaction they
//!   allow, and installing a leader's snapshot;
//! - `export`: paging the applied log out for the chaos tool.

mod export;
mod log;
mod snapshot;
#[cfg(test)]
mod tests;

pub use snapshot::{SnapshotData, SnapshotFile};

use crate::Error;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, HardState, Snapshot, SnapshotMetadata};
use raft::StorageError;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::Path;

const KEY_HARD_STATE: &[u8] = b"hs";
const KEY_CONF_STATE: &[u8] = b"cs";
const KEY_ADDRS: &[u8] = b"addrs";
const ENTRY_PREFIX: u8 = b'e';
const TREE: &str = "raft";
const SNAPSHOT_FILE: &str = "raft-snapshot.bin";

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = ENTRY_PREFIX;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

fn store_err(e: impl std::fmt::Display) -> raft::Error {
    raft::Error::Store(StorageError::Other(e.to_string().into()))
}

/// The Raft log, hard state, conf state, snapshot and member addresses of one member, kept in
/// sled.
pub struct SledStorage {
    db: sled::Db,
    tree: sled::Tree,
    snap_file: std::sync::Arc<SnapshotFile>,
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (metadata index 0 when there is none).
    snapshot: Snapshot,
    /// Index of the first entry in `terms` (snapshot index + 1 while the log is empty).
    first_index: u64,
    /// Term of every stored entry, `terms[i]` for index `first_index + i`: raft-rs asks for
    /// terms far more often than for entries, and this answers without touching sled.
    terms: Vec<u64>,
    /// Set when raft-rs asked for a snapshot that the stored one cannot serve (too old, or its
    /// configuration lacks the recipient): the node takes a fresh one after the Ready.
    snapshot_wanted: Cell<bool>,
    /// The stored snapshot carries a state machine state (the bootstrap one does not).
    snapshot_has_state: bool,
}

/// What `open` found.
pub struct Opened {
    /// The storage.
    pub storage: SledStorage,
    /// True when the data dir held no Raft state and was bootstrapped from the peer list.
    pub bootstrapped: bool,
    /// Addresses stored by earlier runs (conf changes, snapshots).
    pub addrs: BTreeMap<u64, String>,
    /// The state machine snapshot to restore before replaying the log, if any.
    pub state: Option<Vec<u8>>,
}

/// How long [`open_db`] waits for sled's directory lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the sled database in `dir`, waiting up to [`LOCK_WAIT`] for its lock.
///
/// Why wait: sled releases the lock only when its last background thread lets go of a
/// dropped `Db`, a moment after the drop, so reopening a store in the same process (a member
/// restarted in place) can find it still held. A lock held longer than that belongs to another
/// process: a second master on the same data directory, reported as such.
fn open_db(dir: &Path) -> Result<sled::Db, Error> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        let opened = sled::Config::new()
            .path(dir)
            // The node flushes explicitly (off the Raft thread); sled's own periodic flush
            // would only add unsynchronised fsyncs.
            .flush_every_ms(None)
            .open();
        match opened {
            Ok(db) => return Ok(db),
            // sled reports a held lock as an `Other` I/O error naming it.
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if std::time::Instant::now() >= deadline {
                    return Err(Error::Storage(format!(
                        "open {}: the data directory is locked by another process \
                         (is another master running on it?)",
                        dir.display()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(Error::Storage(format!("open {}: {e}", dir.display()))),
        }
    }
}

impl SledStorage {
    /// Opens (or creates) the store in `dir`. An empty store is bootstrapped with `voters` as
    /// its configuration (unless `voters` is `None`: a joining member waits for the cluster),
    /// and that is flushed before returning.
    pub fn open(
        dir: &Path,
        voters: Option<&[u64]>,
        addrs: &BTreeMap<u64, String>,
    ) -> Result<Opened, Error> {
        let db = open_db(dir)?;
        let tree = db
            .open_tree(TREE)
            .map_err(|e| Error::Storage(format!("open tree: {e}")))?;
        let snap_path = dir.join(SNAPSHOT_FILE);

        let mut hard_state = match tree.get(KEY_HARD_STATE).map_err(sled_err)? {
            Some(v) => HardState::parse_from_bytes(&v)
                .map_err(|e| Error::Storage(format!("corrupt hard state: {e}")))?,
            None => HardState::default(),
        };
        let conf_state = match tree.get(KEY_CONF_STATE).map_err(sled_err)? {
            Some(v) => Some(
                ConfState::parse_from_bytes(&v)
                    .map_err(|e| Error::Storage(format!("corrupt conf state: {e}")))?,
            ),
            None => None,
        };
        let snapshot = match std::fs::read(&snap_path) {
            Ok(v) => Snapshot::parse_from_bytes(&v)
                .map_err(|e| Error::Storage(format!("corrupt snapshot file: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Snapshot::default(),
            Err(e) => return Err(Error::Storage(format!("read {}: {e}", snap_path.display()))),
        };
        let stored_addrs: BTreeMap<u64, String> = match tree.get(KEY_ADDRS).map_err(sled_err)? {
            Some(v) => rmp_serde::from_slice(&v)
                .map_err(|e| Error::Storage(format!("corrupt address map: {e}")))?,
            None => BTreeMap::new(),
        };
        let snap_index = snapshot.get_metadata().index;
        let state = if snap_index > 0 {
            SnapshotData::decode(&snapshot.data)
                .map_err(|e| Error::Storage(format!("stored snapshot: {e}")))?
                .state
        } else {
            None
        };

        // Rebuild the term index and check that the log has no holes.
        let mut first_index = 0;
        let mut terms = Vec::new();
        for kv in tree.scan_prefix([ENTRY_PREFIX]) {
            let (k, v) = kv.map_err(sled_err)?;
            let index = decode_index(&k)
                .ok_or_else(|| Error::Storage(format!("corrupt entry key {k:?}")))?;
            let term = decode_term(&v)
                .ok_or_else(|| Error::Storage(format!("corrupt entry at index {index}")))?;
            if terms.is_empty() {
                first_index = index;
            } else if index != first_index + terms.len() as u64 {
                return Err(Error::Storage(format!(
                    "log has a hole before index {index} (expected {})",
                    first_index + terms.len() as u64
                )));
            }
            terms.push(term);
        }
        // A snapshot installed from the leader replaces the whole log; if a crash kept the
        // snapshot but not the log's removal, the old log is stale unless it agrees with the
        // snapshot at its index (then, by log matching, everything before is the leader's).
        if snap_index > 0 && !terms.is_empty() {
            let last = first_index + terms.len() as u64 - 1;
            let stale = if last < snap_index {
                // Entirely covered by the snapshot.
                true
            } else if snap_index >= first_index {
                terms[(snap_index - first_index) as usize] != snapshot.get_metadata().term
            } else {
                false
            };
            if stale {
                tracing::warn!(
                    snap_index,
                    first_index,
                    last,
                    "log disagrees with (or ends before) the stored snapshot; dropping it"
                );
                let mut batch = sled::Batch::default();
                for i in first_index..=last {
                    batch.remove(&entry_key(i));
                }
                tree.apply_batch(batch).map_err(sled_err)?;
                terms.clear();
            }
        }
        if terms.is_empty() {
            first_index = snap_index + 1;
        } else if first_index > snap_index + 1 {
            return Err(Error::Storage(format!(
                "log starts at index {first_index}, after the snapshot at {snap_index}"
            )));
        }
        // The snapshot holds only committed state; a commit index below it (a flush that
        // caught the snapshot but not the hard state) is raised to it.
        if hard_state.commit < snap_index {
            hard_state.commit = snap_index;
        }

        let mut storage = SledStorage {
            db,
            tree,
            snap_file: std::sync::Arc::new(SnapshotFile {
                path: snap_path,
                written: std::sync::Mutex::new(snap_index),
            }),
            hard_state,
            conf_state: conf_state.clone().unwrap_or_default(),
            snapshot,
            first_index,
            terms,
            snapshot_wanted: Cell::new(false),
            snapshot_has_state: state.is_some(),
        };
        let empty = conf_state.is_none()
            && storage.terms.is_empty()
            && snap_index == 0
            && storage.hard_state == HardState::default();
        let bootstrapped = empty && voters.is_some();
        if let (true, Some(voters)) = (bootstrapped, voters) {
            let mut cs = ConfState::default();
            cs.set_voters(voters.to_vec());
            let data = SnapshotData {
                members: addrs.clone(),
                state: None,
            };
            let mut snap = Snapshot {
                data: data.encode()?.into(),
                ..Default::default()
            };
            let meta = snap.mut_metadata();
            meta.index = 1;
            meta.term = 1;
            meta.set_conf_state(cs);
            storage.apply_snapshot(snap, addrs)?;
            storage
                .db
                .flush()
                .map_err(|e| Error::Storage(format!("flush: {e}")))?;
        }
        Ok(Opened {
            storage,
            bootstrapped,
            addrs: stored_addrs,
            state,
        })
    }

    /// The sled handle, for flushing from another thread.
    pub fn db(&self) -> sled::Db {
        self.db.clone()
    }

    /// Index of the last entry (the snapshot's index when the log is empty).
    pub fn last_index_now(&self) -> u64 {
        self.first_index + self.terms.len() as u64 - 1
    }

    /// Index of the first entry still in the log.
    pub fn first_index_now(&self) -> u64 {
        self.first_index
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The configuration as last applied.
    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// Metadata of the latest snapshot (index 0: none).
    pub fn snapshot_metadata(&self) -> &SnapshotMetadata {
        self.snapshot.get_metadata()
    }

    /// True (once) when raft-rs asked for a snapshot the stored one could not serve.
    pub fn take_snapshot_wanted(&self) -> bool {
        self.snapshot_wanted.replace(false)
    }

    /// Replaces the configuration (written, not flushed).
    pub fn set_conf_state(&mut self, cs: ConfState) -> Result<(), Error> {
        let bytes = cs
            .write_to_bytes()
            .map_err(|e| Error::Storage(format!("encode conf state: {e}")))?;
        self.tree.insert(KEY_CONF_STATE, bytes).map_err(sled_err)?;
        self.conf_state = cs;
        Ok(())
    }

    /// Records the member address map (written, not flushed).
    pub fn set_addrs(&mut self, addrs: &BTreeMap<u64, String>) -> Result<(), Error> {
        let bytes = rmp_serde::to_vec(addrs)
            .map_err(|e| Error::Storage(format!("encode address map: {e}")))?;
        self.tree.insert(KEY_ADDRS, bytes).map_err(sled_err)?;
        Ok(())
    }
}

fn sled_err(e: sled::Error) -> Error {
    Error::Storage(e.to_string())
}

fn decode_index(k: &[u8]) -> Option<u64> {
    if k.len() != 9 || k[0] != ENTRY_PREFIX {
        return None;
    }
    Some(u64::from_be_bytes(k[1..].try_into().ok()?))
}

fn decode_term(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}
