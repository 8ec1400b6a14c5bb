//! What must hold, on real processes with the master's default flags (the shipped default
//! `--queueing` and `--policy`): a mixed CPU/GPU burst on 3 slaves (two with GPUs, one
//! without) ends, every task succeeded, and replaying the committed log through
//! `ClusterState::apply` (hetsched-chaos's replay check) finds no node over capacity at any
//! index.

mod support;

use hetsched::local::{ClusterSpec, SlaveSpec};
use hetsched_chaos::replay::{replay, LogItem, MasterLog};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use std::time::Duration;
use support::{test_spec, wait_for, wire_call_direct, Cluster};

/// Every committed entry from index 1.
fn export(admin: &str) -> MasterLog {
    let mut log = MasterLog {
        master: 1,
        items: Vec::new(),
    };
    let mut from = 1;
    loop {
        let p = match wire_call_direct(
            admin,
            ClientRequest::ExportLog { from, max_bytes: 0 },
            Duration::from_secs(10),
        ) {
            Ok(Message::ClientReply(ClientResponse::LogPage(p))) => p,
            other => panic!("a log page: {other:?}"),
        };
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
            return log;
        }
        assert!(p.next > from, "pages must move on");
        from = p.next;
    }
}

#[test]
fn a_mixed_burst_under_the_default_queueing_ends_and_never_overcommits_a_node() {
    let gpu = SlaveSpec {
        cpus: 4,
        mem_mib: 4096,
        gpus: 2,
        extra_args: Vec::new(),
    };
    let cpu = SlaveSpec {
        gpus: 0,
        ..gpu.clone()
    };
    let c = Cluster::launch(
        "default-queueing-burst",
        ClusterSpec {
            masters: 1,
            master_args: Vec::new(),
            master_http: false,
            slaves: vec![gpu.clone(), gpu, cpu],
            ..test_spec()
        },
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(3, Duration::from_secs(60));
    let submit = |args: &[&str]| -> u64 {
        c.json(args).expect("submit")["job_id"]
            .as_u64()
            .expect("job id")
    };
    // More than fits at once: 16 one-CPU tasks, 6 one-GPU tasks and 2 two-GPU tasks on 12
    // CPUs and 4 GPUs.
    let jobs = [
        submit(&[
            "submit", "--user", "a", "--cpus", "1", "--count", "16", "--", "sleep", "1",
        ]),
        submit(&[
            "submit", "--user", "b", "--cpus", "1", "--gpus", "1", "--count", "6", "--", "sleep",
            "1",
        ]),
        submit(&[
            "submit", "--user", "b", "--cpus", "2", "--gpus", "2", "--count", "2", "--", "sleep",
            "1",
        ]),
    ];
    for job in jobs {
        wait_for(
            &format!("job {job} to succeed"),
            Duration::from_secs(120),
            || {
                c.json(&["tasks", "--job", &job.to_string()])
                    .and_then(|v| v.as_array().cloned())
                    .filter(|t| !t.is_empty() && t.iter().all(|t| t["state"] == "succeeded"))
            },
        );
    }
    let r = replay(&export(&c.admin_addrs[0]), None);
    assert!(r.commands > 0, "{r:?}");
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}
