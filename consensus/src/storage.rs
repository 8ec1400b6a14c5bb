//! `raft::Storage` over sled.
//!
//! One sled tree holds everything, so that the entries and the hard state of one `Ready` go
//! to disk in one atomic batch (and a snapshot with the compaction it allows in another):
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
//! durable only on `sled::Db::flush`, which the node runs on its storage thread — see
//! `node.rs` for the rule that ties flushes to sending messages.
//!
//! A bootstrapped member starts from a snapshot at (index 1, term 1) holding the initial
//! voters and no state, with an empty log: a member that joins later (empty log) can then
//! never be caught up from the log — the initial configuration is in no entry — and always
//! receives a real snapshot (see [`SledStorage::snapshot`]'s rules).

use crate::Error;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::Path;

const KEY_HARD_STATE: &[u8] = b"hs";
const KEY_CONF_STATE: &[u8] = b"cs";
const KEY_ADDRS: &[u8] = b"addrs";
const ENTRY_PREFIX: u8 = b'e';
const TREE: &str = "raft";
const SNAPSHOT_FILE: &str = "raft-snapshot.bin";

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

    /// Appends `entries` (overwriting any conflicting suffix) and records `hs`, in one atomic
    /// sled batch. Written, not flushed: the caller flushes before acting on it.
    pub fn append(&mut self, entries: &[Entry], hs: Option<&HardState>) -> Result<(), Error> {
        let mut batch = sled::Batch::default();
        if let Some(first) = entries.first() {
            let first_new = first.index;
            let last_old = self.last_index_now();
            if first_new < self.first_index || first_new > last_old + 1 {
                return Err(Error::Storage(format!(
                    "append at {first_new} does not fit the log [{}, {last_old}]",
                    self.first_index
                )));
            }
            let last_new = first_new + entries.len() as u64 - 1;
            // Entries past the new tail belong to a deposed leader's term: remove them.
            for index in (last_new + 1)..=last_old {
                batch.remove(&entry_key(index));
            }
            for e in entries {
                let mut v = Vec::with_capacity(8 + e.compute_size() as usize);
                v.extend_from_slice(&e.term.to_be_bytes());
                e.write_to_vec(&mut v)
                    .map_err(|err| Error::Storage(format!("encode entry: {err}")))?;
                batch.insert(&entry_key(e.index), v);
            }
        }
        if let Some(hs) = hs {
            let bytes = hs
                .write_to_bytes()
                .map_err(|e| Error::Storage(format!("encode hard state: {e}")))?;
            batch.insert(KEY_HARD_STATE, bytes);
        }
        self.tree.apply_batch(batch).map_err(sled_err)?;

        // Memory follows only once sled accepted the batch.
        if let Some(first) = entries.first() {
            let keep = (first.index - self.first_index) as usize;
            self.terms.truncate(keep);
            self.terms.extend(entries.iter().map(|e| e.term));
        }
        if let Some(hs) = hs {
            self.hard_state = hs.clone();
        }
        Ok(())
    }
}

impl SledStorage {
    /// One page of the log up to `upto` (the applied index) from `from`, for export: when
    /// `from` lies in the compacted part, the stored snapshot's state stands for everything up
    /// to its index and the page goes on after it. At most `max_bytes` of entries (at least
    /// one); entries `is_command` refuses (no-ops, configuration changes) are left out but
    /// still move `next`.
    pub fn export(
        &self,
        from: u64,
        upto: u64,
        max_bytes: u64,
        is_command: impl Fn(&Entry) -> bool,
    ) -> Result<crate::LogPage, Error> {
        let mut low = from.max(1);
        let mut page = crate::LogPage {
            applied: upto,
            next: low,
            ..Default::default()
        };
        if low < self.first_index {
            let meta = self.snapshot.get_metadata();
            if self.snapshot_has_state {
                let data = SnapshotData::decode(&self.snapshot.data)
                    .map_err(|e| Error::Storage(format!("stored snapshot: {e}")))?;
                if let Some(state) = data.state {
                    page.snapshot = Some((meta.index, state));
                }
            }
            // With a state, the snapshot covers everything up to its index (the log may keep
            // a tail before it); without one (the bootstrap snapshot) nothing was compacted
            // that held a command.
            low = if page.snapshot.is_some() {
                meta.index + 1
            } else {
                self.first_index
            };
        }
        let high = upto.min(self.last_index_now()) + 1;
        if low >= high {
            page.next = low;
            return Ok(page);
        }
        let entries =
            raft::Storage::entries(self, low, high, max_bytes, GetEntriesContext::empty(false))
                .map_err(|e| Error::Storage(format!("read log [{low}, {high}): {e}")))?;
        page.next = entries.last().map_or(low, |e| e.index + 1);
        page.entries = entries
            .into_iter()
            .filter(|e| is_command(e))
            .map(|e| (e.index, e.data.to_vec()))
            .collect();
        Ok(page)
    }
}

/// The snapshot file. Writes are serialised and never go backwards, so a local snapshot
/// written in the background cannot replace a newer one installed from the leader meanwhile.
pub struct SnapshotFile {
    path: std::path::PathBuf,
    /// Index of the snapshot the file holds.
    written: std::sync::Mutex<u64>,
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

fn has_state(snap: &Snapshot) -> bool {
    snap.get_metadata().index > 0
        && SnapshotData::decode(&snap.data).is_ok_and(|d| d.state.is_some())
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

impl raft::Storage for SledStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into().unwrap_or(u64::MAX);
        if low < self.first_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index_now() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut out = Vec::with_capacity((high - low).min(1024) as usize);
        let mut size = 0u64;
        for kv in self.tree.range(entry_key(low)..entry_key(high)) {
            let (k, v) = kv.map_err(store_err)?;
            let index = decode_index(&k).ok_or_else(|| store_err("corrupt entry key"))?;
            let body = v
                .get(8..)
                .ok_or_else(|| store_err(format!("corrupt entry at {index}")))?;
            let e = Entry::parse_from_bytes(body)
                .map_err(|err| store_err(format!("corrupt entry at {index}: {err}")))?;
            if e.index != low + out.len() as u64 {
                return Err(store_err(format!("log hole at {}", low + out.len() as u64)));
            }
            size += u64::from(e.compute_size());
            // Like raft-rs's `limit_size`: always at least one entry.
            if !out.is_empty() && size > max_size {
                break;
            }
            out.push(e);
        }
        if out.is_empty() && high > low {
            return Err(store_err(format!("entries [{low}, {high}) missing")));
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            // Index 0 is the empty snapshot before index 1 (term 0).
            return Ok(meta.term);
        }
        if idx < self.first_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.terms
            .get((idx - self.first_index) as usize)
            .copied()
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first_index)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index_now())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // The stored snapshot serves only if it is recent enough, holds a state (the
        // bootstrap one does not), and names the recipient in its configuration (raft-rs
        // refuses a snapshot that does not: a member added after it was taken needs a newer
        // one). Otherwise the node takes one after this Ready and raft-rs asks again.
        let meta = self.snapshot.get_metadata();
        let cs = meta.get_conf_state();
        let names_to = cs
            .get_voters()
            .iter()
            .chain(cs.get_learners())
            .chain(cs.get_voters_outgoing())
            .any(|&id| id == to);
        if meta.index >= request_index && names_to && self.snapshot_has_state {
            Ok(self.snapshot.clone())
        } else {
            self.snapshot_wanted.set(true);
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage as _;

    struct Dir(std::path::PathBuf);
    impl Dir {
        fn new(name: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            Dir(std::env::temp_dir().join(format!(
                "hetsched-consensus-storage-{name}-{}-{nanos}",
                std::process::id()
            )))
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Default::default()
        }
    }

    fn ctx() -> GetEntriesContext {
        GetEntriesContext::empty(false)
    }

    #[test]
    fn fresh_dir_bootstraps_voters_and_empty_log() {
        let dir = Dir::new("fresh");
        let o = SledStorage::open(&dir.0, Some(&[1, 2, 3]), &BTreeMap::new()).expect("open");
        assert!(o.bootstrapped);
        let s = o.storage;
        let st = s.initial_state().expect("state");
        assert_eq!(st.conf_state.voters, vec![1, 2, 3]);
        // The bootstrap snapshot at (1, 1): empty log after it.
        assert_eq!((st.hard_state.term, st.hard_state.commit), (1, 1));
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (2, 1));
        assert_eq!(s.term(1).unwrap(), 1);
        assert!(matches!(
            s.term(2),
            Err(raft::Error::Store(StorageError::Unavailable))
        ));
        // It holds no state, so it is never served: a fresh one is wanted.
        assert!(s.snapshot(1, 2).is_err());
        assert!(s.take_snapshot_wanted());
    }

    #[test]
    fn append_overwrite_limit_and_reopen() {
        let dir = Dir::new("append");
        {
            // A joining member's store: nothing bootstrapped, the log starts at 1.
            let mut s = SledStorage::open(&dir.0, None, &BTreeMap::new())
                .expect("open")
                .storage;
            let mut cs = ConfState::default();
            cs.set_voters(vec![1]);
            s.set_conf_state(cs).expect("conf state");
            let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1, &[i as u8; 100])).collect();
            let hs = HardState {
                term: 1,
                commit: 2,
                ..Default::default()
            };
            s.append(&ents, Some(&hs)).expect("append");
            assert_eq!(s.last_index().unwrap(), 5);
            // A new leader of term 2 overwrites from index 4, leaving a shorter log.
            s.append(&[entry(4, 2, b"x")], None).expect("overwrite");
            assert_eq!(s.last_index().unwrap(), 4);
            assert_eq!(s.term(3).unwrap(), 1);
            assert_eq!(s.term(4).unwrap(), 2);
            // Size limit: at least one entry, then stop before exceeding it.
            let one = s.entries(1, 5, 1, ctx()).expect("entries");
            assert_eq!(one.len(), 1);
            let two = s
                .entries(1, 5, u64::from(ents[0].compute_size()) * 2, ctx())
                .expect("entries");
            assert_eq!(two.len(), 2);
            let all = s.entries(1, 5, None, ctx()).expect("entries");
            assert_eq!(
                all.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(),
                vec![(1, 1), (2, 1), (3, 1), (4, 2)]
            );
            assert!(s.entries(1, 6, None, ctx()).is_err());
            // An append that leaves a hole is refused.
            assert!(s.append(&[entry(9, 2, b"y")], None).is_err());
            s.db().flush().expect("flush");
        }
        let o = SledStorage::open(&dir.0, Some(&[7, 8, 9]), &BTreeMap::new()).expect("reopen");
        assert!(!o.bootstrapped, "a used dir is not bootstrapped again");
        let s = o.storage;
        let st = s.initial_state().expect("state");
        assert_eq!(st.conf_state.voters, vec![1]);
        assert_eq!((st.hard_state.term, st.hard_state.commit), (1, 2));
        assert_eq!(s.last_index().unwrap(), 4);
        assert_eq!(s.term(4).unwrap(), 2);
        let e = s.entries(4, 5, None, ctx()).expect("entry 4");
        assert_eq!(&e[0].data[..], b"x");
    }

    #[test]
    fn snapshot_compacts_and_survives_reopen() {
        let dir = Dir::new("snap");
        let addrs: BTreeMap<u64, String> = [(1, "a:1".to_string())].into();
        {
            let mut s = SledStorage::open(&dir.0, Some(&[1]), &addrs)
                .expect("open")
                .storage;
            let ents: Vec<Entry> = (2..=20).map(|i| entry(i, 1, b"v")).collect();
            let hs = HardState {
                term: 1,
                commit: 20,
                ..Default::default()
            };
            s.append(&ents, Some(&hs)).expect("append");
            let mut snap = Snapshot {
                data: SnapshotData {
                    members: addrs.clone(),
                    state: Some(b"state@15".to_vec()),
                }
                .encode()
                .expect("encode")
                .into(),
                ..Default::default()
            };
            snap.mut_metadata().index = 15;
            snap.mut_metadata().term = 1;
            snap.mut_metadata().set_conf_state(s.conf_state().clone());
            // Keep a tail of 5 entries before the snapshot.
            s.store_snapshot(snap, 10).expect("store");
            assert_eq!(s.first_index().unwrap(), 11);
            assert_eq!(s.last_index().unwrap(), 20);
            assert!(matches!(
                s.entries(5, 12, None, ctx()),
                Err(raft::Error::Store(StorageError::Compacted))
            ));
            assert_eq!(s.term(15).unwrap(), 1);
            assert_eq!(s.snapshot(12, 1).expect("served").get_metadata().index, 15);
            // Too old for the request, or the recipient is not in its configuration.
            assert!(s.snapshot(16, 1).is_err());
            assert!(s.snapshot(15, 9).is_err());
            assert!(s.take_snapshot_wanted());
            s.db().flush().expect("flush");
        }
        let o = SledStorage::open(&dir.0, Some(&[1]), &addrs).expect("reopen");
        assert_eq!(o.state.as_deref(), Some(&b"state@15"[..]));
        let s = o.storage;
        assert_eq!((s.first_index_now(), s.last_index_now()), (11, 20));
        assert_eq!(s.snapshot_metadata().index, 15);
        // A leader's snapshot replaces the whole log.
        let mut s = s;
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 40;
        snap.mut_metadata().term = 3;
        s.apply_snapshot(snap, &addrs).expect("apply");
        assert_eq!((s.first_index_now(), s.last_index_now()), (41, 40));
        assert_eq!(s.hard_state().commit, 40);
        assert_eq!(s.term(40).unwrap(), 3);
    }

    #[test]
    fn a_store_held_open_elsewhere_is_reported_as_locked() {
        let dir = Dir::new("locked");
        let held = SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new()).expect("open");
        let Err(e) = SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new()) else {
            panic!("a second open of a held store succeeded");
        };
        assert!(
            e.to_string().contains("locked by another process"),
            "unexpected error: {e}"
        );
        drop(held);
        // Released: the store opens again (waiting out sled's background threads).
        SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new()).expect("reopen after release");
    }

    #[test]
    fn export_pages_the_applied_log_and_starts_from_the_snapshot_once_compacted() {
        let dir = Dir::new("export");
        let addrs: BTreeMap<u64, String> = [(1, "a:1".to_string())].into();
        let mut s = SledStorage::open(&dir.0, Some(&[1]), &addrs)
            .expect("open")
            .storage;
        // Index 2 is a leader's empty no-op: not a command.
        let mut ents = vec![entry(2, 1, b"")];
        ents.extend((3..=20).map(|i| entry(i, 1, &[i as u8; 10])));
        s.append(&ents, None).expect("append");
        let all = |e: &Entry| !e.data.is_empty();
        // Nothing compacted yet: from 1 (the bootstrap snapshot holds no state).
        let p = s.export(1, 12, u64::MAX, all).expect("export");
        assert_eq!(p.snapshot, None);
        assert_eq!(p.entries.first().map(|e| e.0), Some(3));
        assert_eq!(
            p.entries.last().map(|e| e.0),
            Some(12),
            "only up to applied"
        );
        assert_eq!((p.next, p.applied), (13, 12));
        // Paged by size: at least one entry per page, and the pages join up.
        let p = s.export(13, 20, 1, all).expect("page");
        assert_eq!((p.entries.len(), p.next), (1, 14));
        // Compacted to 10 with a snapshot at 15: the snapshot stands for 1..=15.
        let mut snap = Snapshot {
            data: SnapshotData {
                members: addrs.clone(),
                state: Some(b"state@15".to_vec()),
            }
            .encode()
            .expect("encode")
            .into(),
            ..Default::default()
        };
        snap.mut_metadata().index = 15;
        snap.mut_metadata().term = 1;
        snap.mut_metadata().set_conf_state(s.conf_state().clone());
        s.store_snapshot(snap, 10).expect("store");
        let p = s.export(4, 20, u64::MAX, all).expect("export");
        assert_eq!(p.snapshot, Some((15, b"state@15".to_vec())));
        let idx: Vec<u64> = p.entries.iter().map(|e| e.0).collect();
        assert_eq!(idx, (16..=20).collect::<Vec<_>>());
        assert_eq!(p.next, 21);
        // Still in the log: no snapshot needed.
        let p = s.export(12, 20, u64::MAX, all).expect("export");
        assert_eq!(p.snapshot, None);
        assert_eq!(p.entries.first().map(|e| e.0), Some(12));
        // Past the applied index: an empty page.
        let p = s.export(21, 20, u64::MAX, all).expect("export");
        assert!(p.entries.is_empty() && p.snapshot.is_none());
        assert_eq!(p.next, 21);
    }

    #[test]
    fn a_snapshot_whose_log_replacement_was_lost_drops_the_stale_log() {
        let dir = Dir::new("repair");
        let addrs: BTreeMap<u64, String> = BTreeMap::new();
        let snap_at = |index: u64, term: u64| {
            let mut snap = Snapshot {
                data: SnapshotData {
                    members: BTreeMap::new(),
                    state: Some(vec![1]),
                }
                .encode()
                .expect("encode")
                .into(),
                ..Default::default()
            };
            snap.mut_metadata().index = index;
            snap.mut_metadata().term = term;
            snap.write_to_bytes().expect("encode")
        };
        {
            let mut s = SledStorage::open(&dir.0, Some(&[1]), &addrs)
                .expect("open")
                .storage;
            let ents: Vec<Entry> = (2..=10).map(|i| entry(i, 1, b"v")).collect();
            s.append(&ents, None).expect("append");
            // A snapshot agreeing with the log at its index keeps the log.
            s.snap_file.write(8, &snap_at(8, 1)).expect("write");
            s.db().flush().expect("flush");
        }
        {
            let s = SledStorage::open(&dir.0, Some(&[1]), &addrs)
                .expect("reopen")
                .storage;
            assert_eq!((s.first_index_now(), s.last_index_now()), (2, 10));
            // The leader's snapshot (term 2 at 8) landed, the log's removal did not.
            // (Forced: the guard would refuse an equal index.)
            *s.snap_file.written.lock().expect("lock") = 0;
            s.snap_file.write(8, &snap_at(8, 2)).expect("write");
            s.db().flush().expect("flush");
        }
        let s = SledStorage::open(&dir.0, Some(&[1]), &addrs)
            .expect("repaired")
            .storage;
        assert_eq!((s.first_index_now(), s.last_index_now()), (9, 8));
        assert_eq!(s.hard_state().commit, 8);
    }

    #[test]
    fn corrupt_disk_contents_are_errors_not_panics() {
        let dir = Dir::new("corrupt");
        {
            let s = SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new())
                .expect("open")
                .storage;
            s.tree
                .insert(KEY_HARD_STATE, &[0xff, 0xff][..])
                .expect("insert");
            s.db().flush().expect("flush");
        }
        assert!(matches!(
            SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new()),
            Err(Error::Storage(_))
        ));
        {
            let db = sled::open(&dir.0).expect("sled");
            let t = db.open_tree(TREE).expect("tree");
            t.remove(KEY_HARD_STATE).expect("remove");
            // An entry value too short to hold its term.
            t.insert(entry_key(1), &[1u8][..]).expect("insert");
            db.flush().expect("flush");
        }
        assert!(matches!(
            SledStorage::open(&dir.0, Some(&[1]), &BTreeMap::new()),
            Err(Error::Storage(_))
        ));
    }
}
