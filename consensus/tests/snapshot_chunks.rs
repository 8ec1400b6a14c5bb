//! A snapshot far larger than one transport chunk (and than the 16 MiB frame cap) reaches a
//! follower that fell behind compaction, in chunks, and is reassembled and installed.
//! Its own test binary: the snapshot ballast is process-wide.

mod common;

use common::*;
use hetsched_consensus::FaultConfig;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn a_20_mib_snapshot_crosses_in_chunks() {
    init_tracing();
    let rt = runtime();
    SNAPSHOT_BALLAST.store(20 * 1024 * 1024, Ordering::Relaxed);
    let (peers, listeners) = three_peers();
    let dirs: Vec<TempDir> = (1..=3)
        .map(|id| TempDir::new(&format!("chunks-{id}")))
        .collect();
    let members: Vec<Member> = listeners
        .into_iter()
        .zip(1u64..)
        .map(|(l, id)| {
            start_member_with(
                id,
                &peers,
                dirs[(id - 1) as usize].0.clone(),
                Some(l),
                |c| {
                    c.snapshot_entries = 40;
                    c.snapshot_tail = 5;
                    // Taking, encoding and sending a 20 MiB snapshot stalls a debug build's
                    // raft thread for about a second on a loaded 2-core machine; with the
                    // default 0.5–1 s election timeout the other follower then campaigns,
                    // and each new leader starts the transfer over (seen in CI). This test is
                    // about chunking, not timing: give elections 2–4 s.
                    c.election_ticks = 20;
                },
            )
        })
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    let leader = wait_until("a leader", WAIT, || agreed_leader(&refs));
    let lm = &members[(leader - 1) as usize];
    let fm = members.iter().find(|m| m.id != leader).expect("follower");
    fm.consensus.set_faults(FaultConfig {
        isolated: true,
        ..Default::default()
    });
    for v in 1..=60 {
        propose(&rt, &lm.consensus, v).expect("applies");
    }
    wait_until("the leader to compact", WAIT, || {
        (lm.consensus.stats().first_index > 2).then_some(())
    });
    let healed = Instant::now();
    fm.consensus.set_faults(FaultConfig::default());
    let reference: Vec<u64> = (1..=60).collect();
    wait_until("the follower to install the snapshot", WAIT, || {
        (fm.applied() == reference).then_some(())
    });
    eprintln!(
        "20 MiB snapshot catch-up took {:?}; follower {:?}",
        healed.elapsed(),
        fm.consensus.stats()
    );
    assert!(fm.consensus.stats().snapshots_received >= 1);
}
