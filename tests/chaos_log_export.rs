//! The committed-log export the chaos checker replays (`ClientRequest::ExportLog`, admin
//! listener only), on a real master whose log was compacted: the first page starts with the
//! snapshot's state, the pages join up to the applied index, and replaying them through
//! `ClusterState::apply` (hetsched-chaos's `replay`) finds no over-commit and ends at the
//! master's own state hash.

mod support;

use hetsched_chaos::replay::{replay, LogItem, MasterLog};
use hetsched_chaos::MasterView;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, Message};
use std::time::Duration;
use support::{wait_for, wire_call_direct, Cluster};

fn page(admin: &str, from: u64) -> Option<hetsched_common::protocol::LogPage> {
    match wire_call_direct(
        admin,
        ClientRequest::ExportLog { from, max_bytes: 0 },
        Duration::from_secs(10),
    ) {
        Ok(Message::ClientReply(ClientResponse::LogPage(p))) => Some(p),
        _ => None,
    }
}

fn status(admin: &str) -> Option<hetsched_common::protocol::StatusInfo> {
    match wire_call_direct(
        admin,
        ClientRequest::Status { stale: true },
        Duration::from_secs(5),
    ) {
        Ok(Message::ClientReply(ClientResponse::Status(s))) => Some(s),
        _ => None,
    }
}

/// Every page from index 1, as the chaos tool reads them.
fn export(admin: &str) -> (MasterLog, u64) {
    let mut log = MasterLog {
        master: 1,
        items: Vec::new(),
    };
    let mut from = 1;
    loop {
        let p = page(admin, from).expect("a log page");
        if let Some(s) = p.snapshot {
            log.items.push(LogItem::Snapshot {
                index: s.index,
                state: s.state.into_vec(),
            });
        }
        log.items
            .extend(p.entries.into_iter().map(|e| LogItem::Command {
                index: e.index,
                bytes: e.command.into_vec(),
            }));
        if p.next > p.applied {
            return (log, p.applied);
        }
        assert!(p.next > from, "pages must move on: {from} -> {}", p.next);
        from = p.next;
    }
}

#[test]
fn a_compacted_log_exports_as_snapshot_then_commands_and_replays_to_the_masters_hash() {
    let c = Cluster::start_with(
        "chaos-log-export",
        1,
        1,
        2,
        &["--snapshot-entries", "300", "--job-gc-after", "off"],
    );
    c.wait_leader(Duration::from_secs(30));
    let admin = c.admin_addrs[0].clone();
    // Refused on the cluster port.
    match wire_call_direct(
        &c.master_addrs[0],
        ClientRequest::ExportLog {
            from: 1,
            max_bytes: 0,
        },
        Duration::from_secs(5),
    ) {
        Ok(Message::Error(e)) => assert_eq!(e.kind, ErrorKind::Forbidden, "{e:?}"),
        other => panic!("the cluster port must refuse log exports: {other:?}"),
    }
    wait_for("the slave to register", Duration::from_secs(60), || {
        c.json(&["nodes"])
            .and_then(|v| v.as_array().map(|a| !a.is_empty()))
            .filter(|up| *up)
    });
    let job = c
        .json(&["submit", "--cpus", "1", "--count", "3", "--", "true"])
        .expect("submit")["job_id"]
        .as_u64()
        .expect("job_id");
    // Past the snapshot tail (1000 entries kept before a snapshot), so the log is compacted.
    let threads: Vec<_> = (0..8u64)
        .map(|client| {
            let admin = admin.clone();
            std::thread::spawn(move || {
                for seq in 0..170 {
                    let _ = wire_call_direct(
                        &admin,
                        ClientRequest::BenchPropose {
                            client,
                            seq,
                            record: false,
                            payload: Default::default(),
                        },
                        Duration::from_secs(10),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("proposer thread");
    }
    wait_for("the job to finish", Duration::from_secs(60), || {
        c.json(&["tasks", "--job", &job.to_string()])
            .and_then(|v| v.as_array().cloned())
            .filter(|t| t.iter().all(|t| t["state"] == "succeeded"))
    });
    let first = wait_for(
        "the log to be compacted (a snapshot on the first page)",
        Duration::from_secs(60),
        || page(&admin, 1).filter(|p| p.snapshot.is_some()),
    );
    let snap = first.snapshot.expect("snapshot");
    assert!(snap.index >= 300, "snapshot at {}", snap.index);
    assert!(
        first.entries.first().is_none_or(|e| e.index > snap.index),
        "entries follow the snapshot"
    );
    // Nothing more applies now; export until the replay ends where the master's status is.
    let (r, view) = wait_for(
        "an export at the master's applied index",
        Duration::from_secs(30),
        || {
            let (log, applied) = export(&admin);
            let s = status(&admin)?;
            let view = MasterView {
                master: s.master_id.0,
                applied_index: s.applied_index,
                state_hash: s.state_hash,
            };
            (view.applied_index == applied).then(|| (replay(&log, Some(&view)), view))
        },
    );
    assert_eq!(r.snapshots, 1, "{r:?}");
    assert!(r.commands > 0, "{r:?}");
    assert_eq!(r.last_index, view.applied_index, "{r:?}");
    assert_eq!(
        r.state_hash, view.state_hash,
        "replayed state = the master's"
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A page past the end is empty and says so.
    let past = page(&admin, view.applied_index + 1).expect("page");
    assert!(past.entries.is_empty() && past.snapshot.is_none());
    assert!(past.next > past.applied);
}
