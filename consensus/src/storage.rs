//! `raft::Storage` over sled.
//!
//! One sled tree holds everything, so that the entries and the hard state of one `Ready` go
//! to disk in one atomic batch:
//!
//! | key                     | value                                              |
//! |-------------------------|----------------------------------------------------|
//! | `b'e'` + index (u64 BE) | term (u64 BE) + protobuf `Entry`                    |
//! | `b"hs"`                 | protobuf `HardState`                               |
//! | `b"cs"`                 | protobuf `ConfState`                               |
//!
//! The term prefix lets a restart rebuild the in-memory term index without decoding entries.
//! Writes made here are visible to raft-rs at once (sled serves them from memory); they become
//! durable only on `sled::Db::flush`, which the node runs on its storage thread — see
//! `node.rs` for the rule that ties flushes to sending messages.

use crate::Error;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use std::path::Path;

const KEY_HARD_STATE: &[u8] = b"hs";
const KEY_CONF_STATE: &[u8] = b"cs";
const ENTRY_PREFIX: u8 = b'e';
const TREE: &str = "raft";

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = ENTRY_PREFIX;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

fn store_err(e: impl std::fmt::Display) -> raft::Error {
    raft::Error::Store(StorageError::Other(e.to_string().into()))
}

/// The Raft log, hard state and conf state of one member, kept in sled.
pub struct SledStorage {
    db: sled::Db,
    tree: sled::Tree,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index of the first entry in `terms` (1 while the log has never been compacted).
    first_index: u64,
    /// Term of every stored entry, `terms[i]` for index `first_index + i`: raft-rs asks for
    /// terms far more often than for entries, and this answers without touching sled.
    terms: Vec<u64>,
}

/// What `open` found.
pub struct Opened {
    /// The storage.
    pub storage: SledStorage,
    /// True when the data dir held no Raft state and was bootstrapped from the peer list.
    pub bootstrapped: bool,
}

impl SledStorage {
    /// Opens (or creates) the store in `dir`. An empty store is bootstrapped with `voters` as
    /// its configuration, and that is flushed before returning.
    pub fn open(dir: &Path, voters: &[u64]) -> Result<Opened, Error> {
        let db = sled::Config::new()
            .path(dir)
            // The node flushes explicitly (off the Raft thread); sled's own periodic flush
            // would only add unsynchronised fsyncs.
            .flush_every_ms(None)
            .open()
            .map_err(|e| Error::Storage(format!("open {}: {e}", dir.display())))?;
        let tree = db
            .open_tree(TREE)
            .map_err(|e| Error::Storage(format!("open tree: {e}")))?;

        let hard_state = match tree.get(KEY_HARD_STATE).map_err(sled_err)? {
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
        if terms.is_empty() {
            first_index = 1;
        }
        if first_index != 1 {
            // Compaction (and snapshots) come later; until then a log must start at 1.
            return Err(Error::Storage(format!(
                "log starts at index {first_index}, but snapshots are not supported yet"
            )));
        }

        let mut storage = SledStorage {
            db,
            tree,
            hard_state,
            conf_state: conf_state.clone().unwrap_or_default(),
            first_index,
            terms,
        };
        let bootstrapped = conf_state.is_none()
            && storage.terms.is_empty()
            && storage.hard_state == HardState::default();
        if bootstrapped {
            let mut cs = ConfState::default();
            cs.set_voters(voters.to_vec());
            storage.set_conf_state(cs)?;
            storage
                .db
                .flush()
                .map_err(|e| Error::Storage(format!("flush: {e}")))?;
        } else if conf_state.is_none() {
            return Err(Error::Storage(
                "data dir holds a log but no configuration".into(),
            ));
        }
        Ok(Opened {
            storage,
            bootstrapped,
        })
    }

    /// The sled handle, for flushing from another thread.
    pub fn db(&self) -> sled::Db {
        self.db.clone()
    }

    /// Index of the last entry (0 when empty).
    pub fn last_index_now(&self) -> u64 {
        self.first_index + self.terms.len() as u64 - 1
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
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
        if idx == 0 {
            // The (empty) snapshot before index 1.
            return Ok(0);
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

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // The log is never compacted yet, so a follower never needs one.
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
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
        let o = SledStorage::open(&dir.0, &[1, 2, 3]).expect("open");
        assert!(o.bootstrapped);
        let s = o.storage;
        let st = s.initial_state().expect("state");
        assert_eq!(st.conf_state.voters, vec![1, 2, 3]);
        assert_eq!(st.hard_state, HardState::default());
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (1, 0));
        assert_eq!(s.term(0).unwrap(), 0);
        assert!(matches!(
            s.term(1),
            Err(raft::Error::Store(StorageError::Unavailable))
        ));
    }

    #[test]
    fn append_overwrite_limit_and_reopen() {
        let dir = Dir::new("append");
        {
            let mut s = SledStorage::open(&dir.0, &[1]).expect("open").storage;
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
        let o = SledStorage::open(&dir.0, &[7, 8, 9]).expect("reopen");
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
    fn corrupt_disk_contents_are_errors_not_panics() {
        let dir = Dir::new("corrupt");
        {
            let s = SledStorage::open(&dir.0, &[1]).expect("open").storage;
            s.tree
                .insert(KEY_HARD_STATE, &[0xff, 0xff][..])
                .expect("insert");
            s.db().flush().expect("flush");
        }
        assert!(matches!(
            SledStorage::open(&dir.0, &[1]),
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
            SledStorage::open(&dir.0, &[1]),
            Err(Error::Storage(_))
        ));
    }
}
