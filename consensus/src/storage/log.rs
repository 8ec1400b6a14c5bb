//! The log: appending a Ready's entries and hard state in an order that any crash leaves
//! consistent, and the `raft::Storage` reads raft-rs makes (entries, terms from the in-memory
//! index, the initial state, and which snapshot may be served).

use super::{decode_index, entry_key, sled_err, store_err, SledStorage, KEY_HARD_STATE};
use crate::Error;
use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

impl SledStorage {
    /// Appends `entries` (overwriting any conflicting suffix) and records `hs`. Written, not
    /// flushed: the caller flushes before acting on it.
    ///
    /// **Not a `sled::Batch`.** sled starts every batch by writing out its current IO buffer
    /// and ends it with the batch's manifest alone in another (`PageCache::pin_log`), and each
    /// buffer write ends with an `fdatasync` (see `vendor/sled`), so one Ready cost three
    /// syncs in a row on each member where one does
    /// (docs/perf-log/2026-11-28.md#one-sync-per-raft-flush). Plain writes in this order need no atomicity: the conflicting suffix is
    /// removed from its top down, the new entries written from the bottom up, the hard state
    /// last. sled recovers a prefix of its log (it stops at the first torn write), so a crash
    /// part-way leaves a contiguous log: the old one cut short, then some of the new entries,
    /// with the old hard state — what a member that crashed while receiving a shorter append
    /// would hold. Nothing of this Ready was acknowledged (messages wait for the flush), the
    /// old commit index is never past the kept log (committed entries never conflict), and a
    /// lost term or vote was never sent. etcd's WAL saves a Ready in the same order, entries
    /// then hard state, and syncs once.
    pub fn append(&mut self, entries: &[Entry], hs: Option<&HardState>) -> Result<(), Error> {
        let last_old = self.last_index_now();
        if let Some(first) = entries.first() {
            if first.index < self.first_index || first.index > last_old + 1 {
                return Err(Error::Storage(format!(
                    "append at {} does not fit the log [{}, {last_old}]",
                    first.index, self.first_index
                )));
            }
        }
        for w in append_writes(last_old, entries, hs) {
            self.write(w)?;
        }
        Ok(())
    }

    /// Makes one write of an append; memory follows once sled accepted it.
    pub(super) fn write(&mut self, w: LogWrite<'_>) -> Result<(), Error> {
        match w {
            LogWrite::Remove(index) => {
                self.tree.remove(entry_key(index)).map_err(sled_err)?;
                self.terms.pop();
            }
            LogWrite::Entry(e) => {
                let mut v = Vec::with_capacity(8 + e.compute_size() as usize);
                v.extend_from_slice(&e.term.to_be_bytes());
                e.write_to_vec(&mut v)
                    .map_err(|err| Error::Storage(format!("encode entry: {err}")))?;
                self.tree.insert(entry_key(e.index), v).map_err(sled_err)?;
                self.terms.push(e.term);
            }
            LogWrite::HardState(hs) => {
                let bytes = hs
                    .write_to_bytes()
                    .map_err(|e| Error::Storage(format!("encode hard state: {e}")))?;
                self.tree.insert(KEY_HARD_STATE, bytes).map_err(sled_err)?;
                self.hard_state = hs.clone();
            }
        }
        Ok(())
    }
}

/// One write of [`SledStorage::append`].
#[derive(Clone, Copy, Debug)]
pub(super) enum LogWrite<'a> {
    /// Remove the entry at this index (the top of the log).
    Remove(u64),
    /// Write this entry (just past the top of the log).
    Entry(&'a Entry),
    /// Record this hard state (last).
    HardState(&'a HardState),
}

/// The writes that append `entries` (which fit: their first index is at most one past
/// `last_old`) to a log ending at `last_old`, then record `hs`, in the order `append`
/// explains: the entries from the first new index on removed from the top down, the new
/// entries written from the bottom up, the hard state last. Every prefix of them leaves a
/// contiguous log (test: `every_prefix_of_an_append_reopens_as_a_contiguous_log`).
pub(super) fn append_writes<'a>(
    last_old: u64,
    entries: &'a [Entry],
    hs: Option<&'a HardState>,
) -> impl Iterator<Item = LogWrite<'a>> {
    // Nothing is removed without new entries.
    let from = entries.first().map_or(last_old + 1, |first| first.index);
    (from..=last_old)
        .rev()
        .map(LogWrite::Remove)
        .chain(entries.iter().map(LogWrite::Entry))
        .chain(hs.map(LogWrite::HardState))
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
