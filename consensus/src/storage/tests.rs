//! Tests of the sled storage: bootstrap, append and overwrite, snapshots and compaction,
//! the crash repair in `open`, export paging, locking and corrupt disk contents.

use super::*;
use raft::eraftpb::Entry;
use raft::{GetEntriesContext, Storage as _};

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

/// A crash part-way through an append leaves a store that opens, with a contiguous log and a
/// commit index inside it, holding exactly the writes made so far (`append` writes without a
/// sled batch: see its docs). For seeded random logs and appends, some overwriting a
/// conflicting suffix: every prefix of the append's writes is made on a fresh store, flushed
/// and reopened.
#[test]
fn every_prefix_of_an_append_reopens_as_a_contiguous_log() {
    use super::log::append_writes;
    use hetsched_common::rng::SplitMix64;
    let mut prefixes = 0;
    for seed in 1..=8u64 {
        let mut rng = SplitMix64::new(seed);
        let pick = |rng: &mut SplitMix64, n: u64| rng.next_u64() % n;
        // The log before: 1..=n of term 1, committed up to c.
        let n = 2 + pick(&mut rng, 6);
        let c = 1 + pick(&mut rng, n);
        let old: Vec<Entry> = (1..=n).map(|i| entry(i, 1, &[i as u8; 40])).collect();
        let old_hs = HardState {
            term: 1,
            commit: c,
            ..Default::default()
        };
        // The append: a new leader's entries from past the commit index (a conflict when
        // that is inside the log), committing some of them.
        let first_new = c + 1 + pick(&mut rng, n - c + 1);
        let count = 1 + pick(&mut rng, 4);
        let new: Vec<Entry> = (first_new..first_new + count)
            .map(|i| entry(i, 2, &[0xee; 30]))
            .collect();
        let last_new = first_new + count - 1;
        let new_hs = HardState {
            term: 2,
            vote: 2,
            commit: c + pick(&mut rng, last_new - c + 1),
            ..Default::default()
        };
        let writes: Vec<_> = append_writes(n, &new, Some(&new_hs)).collect();
        for k in 0..=writes.len() {
            prefixes += 1;
            let why = format!("seed {seed}: log 1..={n} commit {c}, append {first_new}..={last_new}, first {k} of {} writes", writes.len());
            // What the first k writes leave: (index, term) and the hard state.
            let mut want: BTreeMap<u64, u64> = old.iter().map(|e| (e.index, e.term)).collect();
            let mut want_hs = old_hs.clone();
            for w in &writes[..k] {
                match w {
                    log::LogWrite::Remove(i) => {
                        want.remove(i);
                    }
                    log::LogWrite::Entry(e) => {
                        want.insert(e.index, e.term);
                    }
                    log::LogWrite::HardState(hs) => want_hs = (*hs).clone(),
                }
            }
            let dir = Dir::new("prefix");
            {
                let mut s = SledStorage::open(&dir.0, None, &BTreeMap::new())
                    .expect("open")
                    .storage;
                let mut cs = ConfState::default();
                cs.set_voters(vec![1, 2]);
                s.set_conf_state(cs).expect("conf state");
                s.append(&old, Some(&old_hs)).expect("the log before");
                for w in &writes[..k] {
                    s.write(*w).expect("write");
                }
                s.db().flush().expect("flush");
            }
            let s = SledStorage::open(&dir.0, None, &BTreeMap::new())
                .unwrap_or_else(|e| panic!("{why}: reopen: {e}"))
                .storage;
            let last = s.last_index().expect("last index");
            let got: BTreeMap<u64, u64> = (s.first_index().expect("first index")..=last)
                .map(|i| (i, s.term(i).expect("term")))
                .collect();
            assert_eq!(got, want, "{why}");
            let hs = s.initial_state().expect("state").hard_state;
            assert_eq!(hs, want_hs, "{why}");
            assert!(
                hs.commit <= last,
                "{why}: commit {} past the log's end {last}",
                hs.commit
            );
        }
    }
    assert!(prefixes > 40, "only {prefixes} prefixes tried");
}
