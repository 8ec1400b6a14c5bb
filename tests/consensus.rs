//! What must hold, on real master processes steered through the fault harness:
//! a minority cannot commit while the majority does and all converge after heal; a follower
//! cut off past compaction catches up by snapshot; a deposed, partitioned leader never
//! serves a linearizable read; masters are added and removed under load with no
//! acknowledged proposal lost; a whole-cluster restart restores from snapshot + log.

mod support;

use hetsched_common::protocol::{ClientRequest, ClientResponse, FaultSpec, Message};
use hetsched_common::MasterId;
use serde_json::Value;
use std::time::{Duration, Instant};
use support::*;

fn faults(addr: &str, spec: FaultSpec) {
    match wire_call(addr, ClientRequest::SetFaults(spec), Duration::from_secs(2)) {
        Ok(Message::ClientReply(ClientResponse::Done)) => {}
        other => panic!("set faults on {addr}: {other:?}"),
    }
}

fn isolate(addr: &str) {
    faults(
        addr,
        FaultSpec {
            isolated: true,
            ..Default::default()
        },
    );
}

fn heal(addr: &str) {
    faults(addr, FaultSpec::default());
}

/// Proposes through `addr` (which must lead); true when acknowledged.
fn propose(addr: &str, seq: u64) -> bool {
    matches!(
        wire_call(
            addr,
            ClientRequest::BenchPropose {
                client: 7,
                seq,
                record: true,
                payload: Default::default()
            },
            Duration::from_secs(2)
        ),
        Ok(Message::ClientReply(ClientResponse::Done))
    )
}

fn leader_addr(c: &Cluster) -> (u64, String) {
    let id = c.wait_leader(Duration::from_secs(30));
    (id, c.master_addrs[(id - 1) as usize].clone())
}

/// Proposes `n` recorded entries through whichever master leads; returns the acked seqs.
fn load(c: &Cluster, from: u64, n: u64) -> Vec<u64> {
    let mut acked = Vec::new();
    let mut seq = from;
    let deadline = Instant::now() + Duration::from_secs(60);
    // The leader is looked up again only when a proposal is refused: a status round trip
    // per proposal (a CLI process and a TLS handshake each) would dominate the run.
    let (_, mut addr) = leader_addr(c);
    while (acked.len() as u64) < n {
        assert!(Instant::now() < deadline, "load did not complete");
        if propose(&addr, seq) {
            acked.push(seq);
        } else {
            addr = leader_addr(c).1;
        }
        seq += 1;
    }
    acked
}

fn check_none_lost(c: &Cluster, acked: &[u64]) {
    let (_, addr) = leader_addr(c);
    match wire_call(
        &addr,
        ClientRequest::BenchCheck {
            client: 7,
            acked: acked.to_vec(),
        },
        Duration::from_secs(5),
    ) {
        Ok(Message::ClientReply(ClientResponse::BenchChecked { missing, .. })) => {
            assert!(
                missing.is_empty(),
                "acknowledged proposals lost: {missing:?}"
            )
        }
        other => panic!("bench check: {other:?}"),
    }
}

fn guarded(c: &Cluster, f: impl FnOnce()) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    if let Err(p) = r {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

#[test]
fn minority_cannot_commit_and_deposed_leader_never_serves_linearizable_reads() {
    let c = Cluster::start("partition", 3, 0, 1);
    guarded(&c, || {
        let (old, old_addr) = leader_addr(&c);
        isolate(&old_addr);
        // The isolated old leader can neither commit nor confirm a read.
        assert!(!propose(&old_addr, 1), "an isolated leader committed");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Message::ClientReply(ClientResponse::Status(s))) = wire_call(
                &old_addr,
                ClientRequest::Status { stale: false },
                Duration::from_secs(2),
            ) {
                panic!("a deposed, partitioned leader served a linearizable read: {s:?}");
            }
        }
        // The majority elects a new leader and commits.
        let new = wait_for(
            "a new leader in the majority",
            Duration::from_secs(30),
            || {
                c.master_addrs.iter().enumerate().find_map(|(i, a)| {
                    if *a == old_addr {
                        return None;
                    }
                    match wire_call(
                        a,
                        ClientRequest::Status { stale: false },
                        Duration::from_secs(2),
                    ) {
                        Ok(Message::ClientReply(ClientResponse::Status(s)))
                            if s.leader == Some(MasterId(i as u64 + 1)) =>
                        {
                            Some(a.clone())
                        }
                        _ => None,
                    }
                })
            },
        );
        assert_ne!(new, old_addr);
        for seq in 10..30 {
            assert!(propose(&new, seq), "the majority could not commit");
        }
        // A stale read from the isolated master is labelled stale.
        match wire_call(
            &old_addr,
            ClientRequest::Status { stale: true },
            Duration::from_secs(2),
        ) {
            Ok(Message::ClientReply(ClientResponse::Status(s))) => assert!(s.stale),
            other => panic!("stale status: {other:?}"),
        }
        heal(&old_addr);
        c.wait_same_hash(Duration::from_secs(30));
        let _ = old;
    });
}

#[test]
fn follower_cut_off_past_compaction_catches_up_by_snapshot_and_restart_restores() {
    let mut c = Cluster::start_with("snapshot", 3, 0, 1, &["--snapshot-entries", "50"]);
    let (leader, _) = leader_addr(&c);
    let follower = (1..=3u64).find(|i| *i != leader).expect("a follower");
    let faddr = c.master_addrs[(follower - 1) as usize].clone();
    let mut acked = Vec::new();
    guarded(&c, || {
        isolate(&faddr);
        acked = load(&c, 1, 300);
        heal(&faddr);
        c.wait_same_hash(Duration::from_secs(60));
        let s = json_with(&faddr, &["status", "--local"]).expect("follower status");
        assert!(
            s["raft"]["first_index"].as_u64().unwrap_or(0) > 1,
            "the follower's log should start after a snapshot: {s}"
        );
        check_none_lost(&c, &acked);
    });
    // Whole-cluster restart: restored from snapshot + log tail.
    for p in c.masters.iter_mut() {
        p.kill9();
    }
    for p in c.masters.iter_mut() {
        p.restart().expect("restart");
    }
    guarded(&c, || {
        c.wait_same_hash(Duration::from_secs(60));
        check_none_lost(&c, &acked);
        for i in 0..3 {
            let s: Value = c.local_status(i).expect("status");
            assert!(s["raft"]["first_index"].as_u64().unwrap_or(0) > 1, "{s}");
        }
    });
}

#[test]
fn add_and_remove_masters_under_load_loses_nothing() {
    let c = Cluster::start_with("members", 3, 0, 1, &["--snapshot-entries", "100"]);
    let new_addr = format!("127.0.0.1:{}", free_port());
    let new_admin = format!("127.0.0.1:{}", free_port());
    register_admin(&new_addr, &new_admin);
    let new_dir = c.dir.path().join("master-4");
    let mut m4 = start_proc(
        "master-4",
        vec![
            "master".into(),
            "--id".into(),
            "4".into(),
            "--listen".into(),
            new_addr.clone(),
            "--join".into(),
            "--peers".into(),
            c.master_addrs
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{}={a}", i + 1))
                .chain(std::iter::once(format!("4={new_addr}")))
                .collect::<Vec<_>>()
                .join(","),
            "--data-dir".into(),
            new_dir.display().to_string(),
            "--snapshot-entries".into(),
            "100".into(),
            "--admin".into(),
            new_admin.clone(),
        ],
        c.dir.path(),
    );
    guarded(&c, || {
        let mut acked = load(&c, 1, 150);
        let out = c.cli(&["members", "add", "4", &new_addr]);
        assert!(
            out.status.success(),
            "members add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        acked.extend(load(&c, 1000, 100));
        // Master 4 catches up (by snapshot: the log was compacted past its start).
        wait_for("master 4 to catch up", Duration::from_secs(60), || {
            let s = json_with(&new_addr, &["status", "--local"])?;
            let l = c.json(&["status"])?;
            (s["applied_index"].as_u64()? >= l["raft"]["commit_index"].as_u64()?).then_some(())
        });
        // Remove the leader itself: leadership moves first.
        let (leader, _) = leader_addr(&c);
        let out = c.cli(&["members", "remove", &leader.to_string()]);
        assert!(
            out.status.success(),
            "members remove: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The client's master list still names the removed master; the other two answer.
        acked.extend(load(&c, 2000, 100));
        let members = c.json(&["members"]).expect("members");
        let ids: Vec<u64> = members
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|m| m["id"].as_u64())
            .collect();
        assert!(!ids.contains(&leader), "{leader} still a member: {members}");
        assert!(ids.contains(&4), "4 not a member: {members}");
        check_none_lost(&c, &acked);
        m4.kill9();
    });
}
