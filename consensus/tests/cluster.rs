//! Three real members (sled data dirs, TCP on 127.0.0.1) in one process.

mod common;

use common::*;
use hetsched_consensus::{ProposeError, Role, MAX_COMMAND_SIZE};
use std::time::Duration;

const ELECTION_WAIT: Duration = Duration::from_secs(20);
const CONVERGE_WAIT: Duration = Duration::from_secs(20);

#[test]
fn leader_elected_proposals_apply_everywhere_and_followers_refuse() {
    init_tracing();
    let rt = runtime();
    let (_peers, _dirs, members) = start_cluster("basic");
    let refs: Vec<&Member> = members.iter().collect();
    let leader_id = wait_until("a leader all agree on", ELECTION_WAIT, || {
        agreed_leader(&refs)
    });
    let leader = &members[(leader_id - 1) as usize];

    // Every proposal on the leader resolves with the state machine's output.
    let mut sum = 0;
    for v in 1..=20u64 {
        sum += v;
        let out = propose(&rt, &leader.consensus, v).expect("leader proposal applies");
        assert_eq!(out, (v as usize, sum));
    }
    let expected: Vec<u64> = (1..=20).collect();
    for m in &members {
        wait_until(
            &format!("member {} to apply 1..=20", m.id),
            CONVERGE_WAIT,
            || (m.applied() == expected).then_some(()),
        );
    }

    // Followers refuse and name the leader.
    for m in members.iter().filter(|m| m.id != leader_id) {
        assert_eq!(m.status().role, Role::Follower);
        match propose(&rt, &m.consensus, 99) {
            Err(ProposeError::NotLeader { leader }) => assert_eq!(leader, Some(leader_id)),
            other => panic!("follower {} answered {other:?}", m.id),
        }
    }

    // Oversized commands are refused before reaching Raft.
    let big = vec![0u8; MAX_COMMAND_SIZE + 1];
    let r = rt.block_on(leader.consensus.propose(big));
    assert!(matches!(r, Err(ProposeError::TooLarge(n)) if n == MAX_COMMAND_SIZE + 1));

    // Garbage from a "peer" is dropped, not fatal.
    let follower = members
        .iter()
        .find(|m| m.id != leader_id)
        .expect("a follower");
    follower.consensus.step(
        leader_id,
        vec![vec![0xff, 0xff, 0xff], Vec::new(), vec![8, 200]],
    );
    let out = propose(&rt, &leader.consensus, 21).expect("still replicating");
    assert_eq!(out, (21, sum + 21));
    wait_until("the follower to apply 21", CONVERGE_WAIT, || {
        (follower.applied().len() == 21).then_some(())
    });

    // Status is consistent with what was applied.
    let st = leader.status();
    assert_eq!(st.id, leader_id);
    assert!(st.commit_index >= 21 && st.applied_index >= 21, "{st:?}");
    assert!(leader.consensus.peer_addr(leader_id).is_some());
    assert!(leader.consensus.peer_addr(42).is_none());
}

#[test]
fn failover_then_restart_replays_the_log() {
    init_tracing();
    let rt = runtime();
    let (peers, dirs, mut members) = start_cluster("failover");
    let refs: Vec<&Member> = members.iter().collect();
    let first_leader = wait_until("a first leader", ELECTION_WAIT, || agreed_leader(&refs));
    let leader = &members[(first_leader - 1) as usize];
    for v in 1..=10u64 {
        propose(&rt, &leader.consensus, v).expect("applies");
    }
    // Every member has it before the crash, so whoever wins next holds all ten.
    for m in &members {
        wait_until("all apply 1..=10", CONVERGE_WAIT, || {
            (m.applied().len() == 10).then_some(())
        });
    }

    // Crash the leader: its System, listener and connections go away.
    let pos = members
        .iter()
        .position(|m| m.id == first_leader)
        .expect("leader");
    let old = members.remove(pos);
    let watcher = members[0].consensus.watch();
    old.kill();

    let refs: Vec<&Member> = members.iter().collect();
    let second_leader = wait_until("a new leader among the survivors", ELECTION_WAIT, || {
        agreed_leader(&refs).filter(|&l| l != first_leader)
    });
    assert_ne!(second_leader, first_leader);
    // The watch channel saw the change too.
    let seen = watcher.borrow().clone();
    assert!(seen.term > 0, "{seen:?}");

    let leader = members
        .iter()
        .find(|m| m.id == second_leader)
        .expect("new leader");
    for v in 11..=15u64 {
        let (len, _) = propose(&rt, &leader.consensus, v).expect("new leader commits");
        assert_eq!(len, v as usize);
    }

    // Restart the crashed member from its data dir with an empty state machine: it replays
    // its log and catches up with what it missed.
    let restarted = start_member(
        first_leader,
        &peers,
        dirs[(first_leader - 1) as usize].0.clone(),
        None,
    );
    members.push(restarted);
    let expected: Vec<u64> = (1..=15).collect();
    for m in &members {
        wait_until(
            &format!("member {} to converge", m.id),
            CONVERGE_WAIT,
            || (m.applied() == expected).then_some(()),
        );
    }
    // And it takes part again: a later proposal reaches it.
    let leader = members
        .iter()
        .find(|m| m.id == second_leader)
        .expect("leader");
    propose(&rt, &leader.consensus, 16).expect("applies");
    let back = members
        .iter()
        .find(|m| m.id == first_leader)
        .expect("restarted");
    wait_until("the restarted member to apply 16", CONVERGE_WAIT, || {
        (back.applied().last() == Some(&16)).then_some(())
    });
    assert_eq!(back.status().role, Role::Follower);
}

#[test]
fn hundreds_of_concurrent_proposals_apply_exactly_once() {
    init_tracing();
    let rt = runtime();
    // An election while the 500 are in flight drops some of them with an unknown outcome;
    // this test is about exactly-once application, not timing, so a loaded machine's stalls
    // must not cause one: elections after 2-4 s.
    let (_peers, _dirs, members) = start_cluster_with("concurrent", |c| c.election_ticks = 20);
    let refs: Vec<&Member> = members.iter().collect();
    let leader_id = wait_until("a leader", ELECTION_WAIT, || agreed_leader(&refs));
    let leader = members[(leader_id - 1) as usize].consensus.clone();

    const N: u64 = 500;
    let results = rt.block_on(async {
        let tasks: Vec<_> = (1..=N)
            .map(|v| {
                let c = leader.clone();
                tokio::spawn(async move { (v, c.propose(cmd(v)).await) })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(
                tokio::time::timeout(Duration::from_secs(30), t)
                    .await
                    .expect("proposal answered")
                    .expect("task"),
            );
        }
        out
    });
    let mut lens: Vec<usize> = Vec::new();
    for (v, r) in results {
        let (len, _) = r.unwrap_or_else(|e| panic!("proposal {v} failed: {e}"));
        lens.push(len);
    }
    // Each proposal got its own slot in the applied sequence.
    lens.sort_unstable();
    assert_eq!(lens, (1..=N as usize).collect::<Vec<_>>());

    let reference = members[(leader_id - 1) as usize].applied();
    let mut sorted = reference.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (1..=N).collect::<Vec<_>>(),
        "each value applied exactly once"
    );
    for m in &members {
        wait_until(
            &format!("member {} to apply the same sequence", m.id),
            CONVERGE_WAIT,
            || (m.applied() == reference).then_some(()),
        );
    }
}

#[test]
fn stop_fails_later_proposals_and_releases_the_data_dir() {
    init_tracing();
    let rt = runtime();
    let (peers, listeners) = three_peers();
    let dir = TempDir::new("stop");
    // A single member of a 3-member config cannot win an election alone.
    let member = start_member(1, &peers, dir.0.clone(), listeners.into_iter().next());
    assert!(matches!(
        propose(&rt, &member.consensus, 1),
        Err(ProposeError::NotLeader { leader: None })
    ));
    member.consensus.stop();
    let c = member.consensus.clone();
    wait_until("the node to stop", Duration::from_secs(10), || {
        c.is_stopped().then_some(())
    });
    assert!(matches!(
        propose(&rt, &member.consensus, 2),
        Err(ProposeError::Stopped)
    ));
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), member.consensus.stopped())
            .await
            .expect("stopped() resolves");
    });
}

#[test]
fn restarted_member_alone_replays_its_committed_log() {
    init_tracing();
    let rt = runtime();
    let (peers, dirs, members) = start_cluster("replay");
    let refs: Vec<&Member> = members.iter().collect();
    let leader_id = wait_until("a leader", ELECTION_WAIT, || agreed_leader(&refs));
    for v in 1..=10u64 {
        propose(&rt, &members[(leader_id - 1) as usize].consensus, v).expect("applies");
    }
    let expected: Vec<u64> = (1..=10).collect();
    for m in &members {
        wait_until("all apply 1..=10", CONVERGE_WAIT, || {
            (m.applied() == expected).then_some(())
        });
    }
    for m in members {
        m.kill();
    }
    // With every peer down, only its own log can bring the state machine back.
    for id in 1..=3u64 {
        let m = start_member(id, &peers, dirs[(id - 1) as usize].0.clone(), None);
        wait_until(
            &format!("member {id} to replay 1..=10"),
            CONVERGE_WAIT,
            || (m.applied() == expected).then_some(()),
        );
        let st = m.status();
        assert_eq!(st.applied_index, st.commit_index, "{st:?}");
        assert_ne!(st.role, Role::Leader, "alone it cannot lead: {st:?}");
        m.kill();
    }
}

/// A leader cut off from both followers holds an uncommitted proposal, steps down
/// (check_quorum), and the followers come back. Whatever the answer, it must be true:
/// `Ok` ⇒ applied once everywhere, `Dropped` ⇒ applied nowhere, `Unknown` ⇒ at most once.
#[test]
fn proposal_outcome_after_losing_quorum_is_truthful() {
    init_tracing();
    let rt = runtime();
    let (peers, dirs, mut members) = start_cluster("quorum");
    let refs: Vec<&Member> = members.iter().collect();
    let leader_id = wait_until("a leader", ELECTION_WAIT, || agreed_leader(&refs));
    for v in 1..=3u64 {
        propose(&rt, &members[(leader_id - 1) as usize].consensus, v).expect("applies");
    }
    for m in &members {
        wait_until("all apply 1..=3", CONVERGE_WAIT, || {
            (m.applied().len() == 3).then_some(())
        });
    }

    let pos = members
        .iter()
        .position(|m| m.id == leader_id)
        .expect("leader");
    let leader = members.remove(pos);
    let follower_ids: Vec<u64> = members.iter().map(|m| m.id).collect();
    for m in members.drain(..) {
        m.kill();
    }
    let c = leader.consensus.clone();
    let pending = rt.spawn(async move { c.propose(cmd(100)).await });
    wait_until("the lone leader to step down", ELECTION_WAIT, || {
        (leader.status().role != Role::Leader).then_some(())
    });
    for id in follower_ids {
        members.push(start_member(
            id,
            &peers,
            dirs[(id - 1) as usize].0.clone(),
            None,
        ));
    }
    members.push(leader);

    let outcome = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), pending).await })
        .expect("answered within 30 s")
        .expect("task");
    eprintln!("outcome of the stranded proposal: {outcome:?}");

    // Settle: a new proposal through whoever leads now, then compare every member.
    let refs: Vec<&Member> = members.iter().collect();
    let now_leader = wait_until("a leader again", ELECTION_WAIT, || agreed_leader(&refs));
    let lm = members.iter().find(|m| m.id == now_leader).expect("leader");
    propose(&rt, &lm.consensus, 200).expect("applies");
    let reference = wait_until("the new leader to apply 200", CONVERGE_WAIT, || {
        let a = lm.applied();
        (a.last() == Some(&200)).then_some(a)
    });
    for m in &members {
        wait_until(
            &format!("member {} to converge", m.id),
            CONVERGE_WAIT,
            || (m.applied() == reference).then_some(()),
        );
    }
    let count = reference.iter().filter(|&&v| v == 100).count();
    match outcome {
        Ok(_) => assert_eq!(count, 1, "Ok but applied {count} times: {reference:?}"),
        Err(ProposeError::Dropped) => assert_eq!(count, 0, "Dropped but applied: {reference:?}"),
        Err(ProposeError::Unknown) => assert!(count <= 1, "applied twice: {reference:?}"),
        Err(e) => panic!("unexpected answer {e:?}"),
    }
}

/// A burst far larger than one input batch: it must commit in bounded Readies without
/// outlasting the election timeout (no leader change during the burst).
#[test]
fn burst_commits_without_a_leader_change() {
    init_tracing();
    let rt = runtime();
    let (_peers, _dirs, members) = start_cluster("burst");
    let refs: Vec<&Member> = members.iter().collect();
    let leader_id = wait_until("a leader", ELECTION_WAIT, || agreed_leader(&refs));
    let lm = &members[(leader_id - 1) as usize];
    let term_before = lm.status().term;
    let leader = lm.consensus.clone();

    const N: u64 = 20_000;
    let started = std::time::Instant::now();
    let failures = rt.block_on(async {
        let tasks: Vec<_> = (1..=N)
            .map(|v| {
                let c = leader.clone();
                tokio::spawn(async move { c.propose(cmd(v)).await.is_err() })
            })
            .collect();
        let mut failures = 0;
        for t in tasks {
            if tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("answered")
                .expect("task")
            {
                failures += 1;
            }
        }
        failures
    });
    let elapsed = started.elapsed();
    eprintln!(
        "{N} proposals applied on the leader in {elapsed:?} ({:.0}/s, debug build)",
        N as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(failures, 0);
    assert_eq!(
        lm.status().term,
        term_before,
        "leadership changed during the burst"
    );
    assert_eq!(lm.status().leader, Some(leader_id));
    for m in &members {
        wait_until(
            &format!("member {} to apply the burst", m.id),
            CONVERGE_WAIT,
            || (m.applied().len() == N as usize).then_some(()),
        );
    }
}

/// Stopping only the leader's Raft actor (its listener stays up and swallows traffic) is
/// enough for the others to elect a new leader, which commits.
#[test]
fn stopping_the_leader_node_hands_over_leadership() {
    init_tracing();
    let rt = runtime();
    let (_peers, _dirs, members) = start_cluster("stopnode");
    let refs: Vec<&Member> = members.iter().collect();
    let first = wait_until("a leader", ELECTION_WAIT, || agreed_leader(&refs));
    let old = &members[(first - 1) as usize];
    propose(&rt, &old.consensus, 1).expect("applies");
    old.consensus.stop();
    let c = old.consensus.clone();
    wait_until("the old leader to stop", ELECTION_WAIT, || {
        c.is_stopped().then_some(())
    });
    assert!(matches!(
        propose(&rt, &old.consensus, 2),
        Err(ProposeError::Stopped)
    ));

    let rest: Vec<&Member> = members.iter().filter(|m| m.id != first).collect();
    let second = wait_until("a new leader", ELECTION_WAIT, || {
        agreed_leader(&rest).filter(|&l| l != first)
    });
    let lm = &members[(second - 1) as usize];
    let (len, sum) = propose(&rt, &lm.consensus, 3).expect("new leader commits");
    assert_eq!((len, sum), (2, 4));
    for m in &rest {
        wait_until("survivors apply [1, 3]", CONVERGE_WAIT, || {
            (m.applied() == vec![1, 3]).then_some(())
        });
    }
}
