//! Snapshots, membership, linearizable reads and injected faults, on real members (sled data
//! dirs, TCP on 127.0.0.1) in one process. Fault schedules are seeded; seeds are printed.

mod common;

use common::*;
use hetsched_consensus::{Consensus, FaultConfig, ProposeError, RaftConfig, Role};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn isolated() -> FaultConfig {
    FaultConfig {
        isolated: true,
        ..Default::default()
    }
}

fn small_snapshots(entries: u64, tail: u64) -> impl Fn(&mut RaftConfig) + Clone {
    move |c: &mut RaftConfig| {
        c.snapshot_entries = entries;
        c.snapshot_tail = tail;
    }
}

fn start_cluster_with(
    name: &str,
    tweak: impl Fn(&mut RaftConfig) + Clone,
) -> (BTreeMap<u64, String>, Vec<TempDir>, Vec<Member>) {
    let (peers, listeners) = three_peers();
    let dirs: Vec<TempDir> = (1..=3)
        .map(|id| TempDir::new(&format!("{name}-{id}")))
        .collect();
    let members = listeners
        .into_iter()
        .zip(1u64..)
        .map(|(l, id)| {
            start_member_with(
                id,
                &peers,
                dirs[(id - 1) as usize].0.clone(),
                Some(l),
                tweak.clone(),
            )
        })
        .collect();
    (peers, dirs, members)
}

fn by_id(members: &[Member], id: u64) -> &Member {
    members.iter().find(|m| m.id == id).expect("member")
}

fn converge(members: &[&Member], reference: &[u64]) {
    for m in members {
        wait_until(&format!("member {} to converge", m.id), WAIT, || {
            (m.applied() == reference).then_some(())
        });
    }
}

/// Isolating the leader: it cannot commit, its reads are never served, the majority elects a
/// new leader and commits; after healing every member holds the same sequence.
#[test]
fn isolated_leader_cannot_commit_or_serve_reads_and_heals() {
    init_tracing();
    let rt = runtime();
    let seed = hetsched_common::rng::seed_from_env("HETSCHED_TEST_SEED");
    eprintln!("seed {seed}");
    let (_peers, _dirs, members) = start_cluster("partition");
    let refs: Vec<&Member> = members.iter().collect();
    let old = wait_until("a leader", WAIT, || agreed_leader(&refs));
    let om = by_id(&members, old);
    for v in 1..=5 {
        propose(&rt, &om.consensus, v).expect("applies");
    }
    let idx = rt
        .block_on(om.consensus.read_index())
        .expect("a healthy leader serves reads");
    assert!(idx >= 5);

    om.consensus.set_faults(FaultConfig { seed, ..isolated() });
    // A proposal on the isolated leader cannot commit.
    let c = om.consensus.clone();
    let stranded = rt.spawn(async move { c.propose(cmd(100)).await });
    // Reads on the isolated (soon deposed) leader: never Ok.
    let c = om.consensus.clone();
    let reads = rt.spawn(async move {
        let mut answers = Vec::new();
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            answers.push(c.read_index().await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        answers
    });

    let rest: Vec<&Member> = members.iter().filter(|m| m.id != old).collect();
    let new = wait_until("a new leader in the majority", WAIT, || {
        agreed_leader(&rest).filter(|&l| l != old)
    });
    let nm = by_id(&members, new);
    for v in 6..=10 {
        propose(&rt, &nm.consensus, v).expect("the majority commits");
    }
    assert!(
        !om.applied().contains(&6),
        "the isolated member saw the majority's entries"
    );
    let answers = rt.block_on(reads).expect("reads task");
    assert!(!answers.is_empty());
    for a in &answers {
        assert!(
            a.is_err(),
            "a partitioned leader served a read: {answers:?}"
        );
    }
    // The new leader serves reads, at least at what it committed.
    let idx = rt.block_on(nm.consensus.read_index()).expect("read");
    assert!(idx >= nm.status().applied_index.min(idx));
    // Followers refuse reads.
    let f = rest.iter().find(|m| m.id != new).expect("follower");
    assert!(matches!(
        rt.block_on(f.consensus.read_index()),
        Err(ProposeError::NotLeader { leader: Some(l) }) if l == new
    ));

    om.consensus.set_faults(FaultConfig::default());
    let outcome = rt
        .block_on(async { tokio::time::timeout(WAIT, stranded).await })
        .expect("answered")
        .expect("task");
    assert!(
        outcome.is_err(),
        "isolated proposal acknowledged: {outcome:?}"
    );
    propose(&rt, &nm.consensus, 11).expect("applies");
    let reference = nm.applied();
    assert!(!reference.contains(&100) || !matches!(outcome, Err(ProposeError::Dropped)));
    converge(&refs, &reference);
    assert_eq!(om.status().role, Role::Follower);
}

/// A follower cut off while the leader compacts past it is caught up by a snapshot.
#[test]
fn follower_cut_off_past_compaction_catches_up_by_snapshot() {
    init_tracing();
    let rt = runtime();
    let (_peers, _dirs, members) = start_cluster_with("snapcatch", small_snapshots(100, 20));
    let refs: Vec<&Member> = members.iter().collect();
    let leader = wait_until("a leader", WAIT, || agreed_leader(&refs));
    let lm = by_id(&members, leader);
    let fm = members.iter().find(|m| m.id != leader).expect("follower");
    propose(&rt, &lm.consensus, 1).expect("applies");
    wait_until("the follower applies 1", WAIT, || {
        (fm.applied() == vec![1]).then_some(())
    });
    fm.consensus.set_faults(isolated());
    const N: u64 = 600;
    rt.block_on(async {
        let tasks: Vec<_> = (2..=N)
            .map(|v| {
                let c = lm.consensus.clone();
                tokio::spawn(async move { c.propose(cmd(v)).await })
            })
            .collect();
        for t in tasks {
            tokio::time::timeout(WAIT, t)
                .await
                .expect("answered")
                .expect("task")
                .expect("the majority commits");
        }
    });
    let behind = fm.status().applied_index;
    let ls = wait_until("the leader to compact past the follower", WAIT, || {
        let ls = lm.consensus.stats();
        (ls.snapshots >= 1 && ls.first_index > behind + 1).then_some(ls)
    });
    eprintln!("leader stats after {N} proposals: {ls:?}");
    let healed = Instant::now();
    fm.consensus.set_faults(FaultConfig::default());
    // Concurrent proposals apply in the leader's order.
    let reference = lm.applied();
    assert_eq!(reference.len(), N as usize);
    converge(&[fm], &reference);
    eprintln!("snapshot catch-up took {:?}", healed.elapsed());
    let fs = fm.consensus.stats();
    assert!(fs.snapshots_received >= 1, "{fs:?}");
    assert!(lm.consensus.stats().snapshots_sent >= 1);
    // And it keeps replicating from the log afterwards.
    propose(&rt, &lm.consensus, N + 1).expect("applies");
    wait_until("the follower applies the next entry", WAIT, || {
        (fm.applied().last() == Some(&(N + 1))).then_some(())
    });
}

/// Stopping every member and starting them again: each restores its snapshot and replays
/// only the log tail, and the cluster goes on.
#[test]
fn whole_cluster_restart_restores_snapshot_and_log_tail() {
    init_tracing();
    let rt = runtime();
    let tweak = small_snapshots(50, 10);
    let (peers, dirs, members) = start_cluster_with("restart", tweak.clone());
    let refs: Vec<&Member> = members.iter().collect();
    let leader = wait_until("a leader", WAIT, || agreed_leader(&refs));
    const N: u64 = 130;
    for v in 1..=N {
        propose(&rt, &by_id(&members, leader).consensus, v).expect("applies");
    }
    let reference: Vec<u64> = (1..=N).collect();
    converge(&refs, &reference);
    for m in &members {
        // Snapshots are written in the background; compaction follows.
        wait_until(&format!("member {} to compact", m.id), WAIT, || {
            let st = m.consensus.stats();
            (st.snapshots >= 1 && st.first_index > 1).then_some(())
        });
    }
    for m in members {
        m.kill();
    }
    let members: Vec<Member> = (1..=3u64)
        .map(|id| {
            start_member_with(
                id,
                &peers,
                dirs[(id - 1) as usize].0.clone(),
                None,
                tweak.clone(),
            )
        })
        .collect();
    for m in &members {
        // Restored from the snapshot before any peer could send anything.
        let st = m.consensus.stats();
        assert!(st.first_index > 1, "restarted from a compacted log: {st:?}");
    }
    let refs: Vec<&Member> = members.iter().collect();
    converge(&refs, &reference);
    let leader = wait_until("a leader after the restart", WAIT, || agreed_leader(&refs));
    propose(&rt, &by_id(&members, leader).consensus, N + 1).expect("applies");
    let mut reference = reference;
    reference.push(N + 1);
    converge(&refs, &reference);
}

/// Proposals from a client that follows NotLeader redirects; records every acknowledged value.
fn load(
    rt: &tokio::runtime::Runtime,
    handles: Arc<Mutex<BTreeMap<u64, Consensus<Toy>>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u64>> {
    rt.spawn(async move {
        let mut acked = Vec::new();
        let mut target = 1u64;
        let mut v = 1_000u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let c = {
                let hs = handles.lock().unwrap_or_else(|p| p.into_inner());
                match hs.get(&target).or_else(|| hs.values().next()) {
                    Some(c) => c.clone(),
                    None => break,
                }
            };
            v += 1;
            match tokio::time::timeout(Duration::from_secs(10), c.propose(cmd(v))).await {
                Ok(Ok(_)) => acked.push(v),
                Ok(Err(ProposeError::NotLeader { leader: Some(l) })) => target = l,
                Ok(Err(_)) | Err(_) => {
                    // Try the next member.
                    target = {
                        let hs = handles.lock().unwrap_or_else(|p| p.into_inner());
                        hs.keys()
                            .copied()
                            .find(|&k| k > target)
                            .or_else(|| hs.keys().next().copied())
                            .unwrap_or(1)
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        acked
    })
}

/// Add a 4th member (joining with an empty data dir), remove a follower, then remove the
/// leader, all under a stream of proposals: no acknowledged proposal is lost.
#[test]
fn add_and_remove_members_under_load_loses_nothing() {
    init_tracing();
    let rt = runtime();
    let tweak = small_snapshots(200, 20);
    let (mut peers, listeners) = three_peers();
    let l4 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr4 = l4.local_addr().expect("addr").to_string();
    let dirs: Vec<TempDir> = (1..=4)
        .map(|id| TempDir::new(&format!("members-{id}")))
        .collect();
    let mut members: Vec<Member> = listeners
        .into_iter()
        .zip(1u64..)
        .map(|(l, id)| {
            start_member_with(
                id,
                &peers,
                dirs[(id - 1) as usize].0.clone(),
                Some(l),
                tweak.clone(),
            )
        })
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    let leader = wait_until("a leader", WAIT, || agreed_leader(&refs));
    assert_eq!(
        by_id(&members, leader)
            .consensus
            .members()
            .iter()
            .map(|m| (m.id, m.voter))
            .collect::<Vec<_>>(),
        vec![(1, true), (2, true), (3, true)]
    );

    let handles: Arc<Mutex<BTreeMap<u64, Consensus<Toy>>>> = Arc::new(Mutex::new(
        members
            .iter()
            .map(|m| (m.id, m.consensus.clone()))
            .collect(),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = load(&rt, handles.clone(), stop.clone());
    wait_until("some load applied", WAIT, || {
        (by_id(&members, leader).applied().len() > 300).then_some(())
    });

    // 4 joins: empty dir, no bootstrap; it knows the current members' addresses.
    peers.insert(4, addr4.clone());
    let m4 = start_member_with(4, &peers, dirs[3].0.clone(), Some(l4), |c| {
        tweak(c);
        c.join = true;
    });
    assert!(m4.consensus.members().is_empty(), "a joiner starts empty");
    let lc = by_id(&members, leader).consensus.clone();
    rt.block_on(lc.add_member(4, addr4.clone()))
        .expect("add member 4");
    // One configuration change at a time (and no duplicates).
    assert!(matches!(
        rt.block_on(lc.add_member(4, addr4.clone())),
        Err(ProposeError::Invalid(_))
    ));
    assert_eq!(lc.peer_addr(4).as_deref(), Some(addr4.as_str()));
    wait_until("member 4 to catch up", WAIT, || {
        let st = m4.status();
        (st.applied_index > 0 && st.leader == Some(leader)).then_some(())
    });
    assert!(
        m4.consensus.stats().snapshots_received >= 1,
        "{:?}",
        m4.consensus.stats()
    );
    handles
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(4, m4.consensus.clone());
    members.push(m4);

    // Remove a follower.
    let gone = (1..=3).find(|&id| id != leader).expect("a follower");
    rt.block_on(lc.remove_member(gone))
        .expect("remove a follower");
    handles
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&gone);
    wait_until("the leader to drop the removed member", WAIT, || {
        (!lc.members().iter().any(|m| m.id == gone)).then_some(())
    });
    assert!(lc.peer_addr(gone).is_none());

    // Remove the leader: leadership moves first, the caller is told where to retry.
    let new_leader = match rt.block_on(lc.remove_member(leader)) {
        Err(ProposeError::NotLeader { leader: Some(l) }) => l,
        other => panic!("removing the leader answered {other:?}"),
    };
    assert_ne!(new_leader, leader);
    let nc = by_id(&members, new_leader).consensus.clone();
    wait_until("the new leader to remove the old one", WAIT, || {
        match rt.block_on(nc.remove_member(leader)) {
            Ok(()) => Some(()),
            Err(ProposeError::Invalid(_)) | Err(ProposeError::NotLeader { .. }) => None,
            Err(e) => panic!("remove on the new leader: {e:?}"),
        }
    });
    handles
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&leader);

    // Some more load on the 2-member cluster, then stop it.
    let before = nc.status().applied_index;
    wait_until("load continues after the changes", WAIT, || {
        (nc.status().applied_index > before + 100).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = rt
        .block_on(async { tokio::time::timeout(WAIT, loader).await })
        .expect("load stops")
        .expect("load task");
    eprintln!(
        "{} proposals acknowledged under membership changes",
        acked.len()
    );
    assert!(acked.len() > 300);

    let remaining: Vec<&Member> = members
        .iter()
        .filter(|m| m.id != gone && m.id != leader)
        .collect();
    assert_eq!(remaining.len(), 2);
    let reference = by_id(&members, new_leader).applied();
    converge(&remaining, &reference);
    let set: std::collections::BTreeSet<u64> = reference.iter().copied().collect();
    assert_eq!(set.len(), reference.len(), "a value applied twice");
    for v in &acked {
        assert!(set.contains(v), "acknowledged proposal {v} lost");
    }
    let ids: Vec<u64> = nc.members().iter().map(|m| m.id).collect();
    let mut expected: Vec<u64> = remaining.iter().map(|m| m.id).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);

    // Leadership transfer on request.
    let other = remaining
        .iter()
        .map(|m| m.id)
        .find(|&id| id != new_leader)
        .expect("other");
    rt.block_on(nc.transfer_leader(other)).expect("transfer");
    // The old leader heard from the new one; the new one's own status follows its turn.
    let om = by_id(&members, other);
    wait_until("the transferee to report leading", WAIT, || {
        (om.status().role == Role::Leader).then_some(())
    });
}

/// A lossy, slow network (seeded drops and a delay on every member): proposals still commit
/// and every member converges; healing restores normal service.
#[test]
fn lossy_delayed_network_still_converges() {
    init_tracing();
    let rt = runtime();
    let seed = hetsched_common::rng::seed_from_env("HETSCHED_TEST_SEED");
    eprintln!("seed {seed}");
    let (_peers, _dirs, members) = start_cluster("lossy");
    let refs: Vec<&Member> = members.iter().collect();
    wait_until("a leader", WAIT, || agreed_leader(&refs));
    for m in &members {
        m.consensus.set_faults(FaultConfig {
            seed: seed.wrapping_add(m.id),
            drop_rate: 0.1,
            delay: Duration::from_millis(15),
            ..Default::default()
        });
    }
    let mut acked = Vec::new();
    for v in 1..=40u64 {
        // Leadership may move under loss: follow redirects, retry what was not acknowledged.
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "value {v} never committed");
            let Some(l) = refs.iter().find(|m| m.status().role == Role::Leader) else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            match rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), l.consensus.propose(cmd(v))).await
            }) {
                Ok(Ok(_)) => {
                    acked.push(v);
                    break;
                }
                // Dropped/Unknown/NotLeader/timeout: an unacknowledged value may still apply
                // once; only acknowledged ones are checked below.
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    for m in &members {
        m.consensus.set_faults(FaultConfig::default());
    }
    let leader = wait_until("a leader after healing", WAIT, || agreed_leader(&refs));
    propose(&rt, &by_id(&members, leader).consensus, 1_000).expect("applies");
    let reference = by_id(&members, leader).applied();
    converge(&refs, &reference);
    for v in &acked {
        assert!(reference.contains(v), "acknowledged {v} lost");
    }
}
