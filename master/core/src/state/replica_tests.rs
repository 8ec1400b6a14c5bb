use super::Replica;
use crate::sched::test_log::node;
use crate::state::{AccountingSettings, ClusterState, Command, CommandEnvelope, Outcome};
use hetsched_common::ClientRequestId;

fn env(request: Option<u64>, command: Command) -> CommandEnvelope {
    CommandEnvelope {
        at_ms: 50,
        request: request.map(ClientRequestId),
        command,
    }
}

fn bench(seq: u64) -> Command {
    Command::Bench {
        client: 3,
        seq,
        record: true,
        payload: Default::default(),
    }
}

#[test]
fn benchmark_traffic_counts_beside_the_cluster_state_and_leaves_it_alone() {
    let mut r = Replica::new();
    r.apply(1, env(None, node(1, 4, 0, &[])));
    let cluster = r.cluster().clone();
    assert_eq!(
        r.apply(2, env(None, bench(7))),
        Outcome::Ignored(String::new())
    );
    assert_eq!(r.bench()[&3].recorded, [7].into());
    assert_eq!(r.last_index(), 2, "the applied index moves");
    assert_eq!(r.nodes(), cluster.nodes());
    // The cluster state alone ignores it.
    let mut alone = cluster.clone();
    assert!(matches!(
        alone.apply(2, env(None, bench(7))),
        Outcome::Ignored(_)
    ));
    assert_eq!(alone.nodes(), cluster.nodes());
}

#[test]
fn a_retried_benchmark_request_applies_once() {
    let mut r = Replica::new();
    r.apply(1, env(Some(9), bench(1)));
    r.apply(2, env(Some(9), bench(1)));
    assert_eq!(r.bench()[&3].applied, 1);
    assert!(r.request_applied(ClientRequestId(9)));
}

#[test]
fn the_snapshot_keeps_the_counters_and_without_them_hashes_as_the_cluster_state() {
    let mut r = Replica::new();
    r.apply(1, env(None, node(1, 4, 0, &[])));
    assert_eq!(r.state_hash(), r.cluster().state_hash());
    assert_eq!(r.to_bytes(), r.cluster().to_bytes());
    r.apply(2, env(None, bench(4)));
    assert_ne!(r.state_hash(), r.cluster().state_hash());
    let back = Replica::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(back, r);
    assert_eq!(back.state_bytes(), r.to_bytes().len() as u64);
    // Read as a cluster state alone, the same bytes lose only the counters.
    let alone = ClusterState::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(&alone, r.cluster());
}

/// A replica with one node and a one-GPU task on it, the task's id and the node's.
fn running_gpu_task() -> (Replica, hetsched_common::TaskId, hetsched_common::NodeId) {
    use crate::sched::test_log::{spec, submit, submitted_tasks};
    use crate::state::{Assign, Plan};
    let mut r = Replica::new();
    r.apply(1, env(None, node(1, 4, 1, &[])));
    let n = *r.nodes().keys().next().expect("node");
    let t = submitted_tasks(r.apply(2, env(None, submit(spec(1, 2, 1)))))[0];
    let plan = Plan {
        assignments: vec![Assign::to(t, n)],
        ..Default::default()
    };
    assert!(matches!(
        r.apply(3, env(None, Command::ApplyPlan(plan))),
        Outcome::PlanApplied { rejected: 0, .. }
    ));
    (r, t, n)
}

#[test]
fn a_finish_reports_usage_is_recorded_beside_the_state_and_travels_in_the_snapshot() {
    use hetsched_common::protocol::{HistoryFilter, TaskReport, UsageRecord};
    let (mut r, t, n) = running_gpu_task();
    let hash = r.state_hash();
    let finished = |attempt| Command::TaskReports {
        node: n,
        reports: vec![TaskReport::Finished {
            task: t,
            attempt,
            exit_code: 0,
            reason: None,
            reason_detail: None,
            usage: Some(UsageRecord {
                elapsed_ms: Some(2_000),
                cpu_s: Some(1.9),
                max_mem_mib: Some(300),
                gpu_s: Some(2.0),
                ..UsageRecord::default()
            }),
        }],
    };
    // A report of an attempt the node never ran records nothing.
    r.apply(4, env(None, finished(7)));
    assert_eq!(r.accounting().len(), 0);
    r.apply(5, env(None, finished(1)));
    r.apply(6, env(None, finished(1)));
    let h = r.accounting().history(&HistoryFilter::default());
    assert_eq!(h.len(), 1, "{h:?}");
    let rec = &h[0];
    assert_eq!(
        (rec.user.as_str(), rec.node, rec.cpus, rec.gpus),
        ("u", n, 2.0, 1.0)
    );
    assert_eq!(
        (rec.cpu_s, rec.max_mem_mib, rec.elapsed_s),
        (Some(1.9), Some(300), Some(2.0))
    );
    assert!(rec.gpu_emulated, "the node's GPUs are emulated");
    // The node's one GPU is its dominant share (1 of 1) for 2 s; charged once.
    assert_eq!(rec.dominant_s, Some(2.0));
    let f = r
        .accounting()
        .fair_share(50, crate::state::DEFAULT_HALF_LIFE_MS, &Default::default());
    assert_eq!((f.len(), f[0].decayed_usage), (1, 2.0));
    assert_eq!((rec.ended_ms, rec.state.as_str()), (50, "succeeded"));
    // The state's hash and size never include the book; its snapshot does.
    let mut without = r.clone();
    without.accounting = Default::default();
    assert_eq!(r.state_hash(), without.state_hash());
    assert_eq!(r.state_bytes(), without.state_bytes());
    assert_eq!(r.state_document(), without.to_bytes());
    assert!(r.to_bytes().len() > without.to_bytes().len());
    assert_ne!(r.state_hash(), hash, "the task finished");
    let back = Replica::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(back, r);
    // Detail older than the retention folds as later entries apply.
    // A leader's barrier sets the retention (issue 53: a replicated setting).
    let mut plain = back.clone();
    plain.apply(
        7,
        CommandEnvelope {
            at_ms: 100,
            request: None,
            command: Command::LeaderBarrier {
                master: 1,
                accounting: None,
            },
        },
    );
    assert_eq!(
        plain.half_life_ms(),
        Some(7 * 86_400_000),
        "absent: unchanged"
    );
    let mut short = back;
    short.apply(
        7,
        CommandEnvelope {
            at_ms: 100,
            request: None,
            command: Command::LeaderBarrier {
                master: 1,
                accounting: Some(AccountingSettings {
                    retention_ms: 10,
                    half_life_ms: None,
                }),
            },
        },
    );
    assert_eq!((short.retention_ms(), short.half_life_ms()), (10, None));
    // They are state: in the snapshot (a follower installing it gets them) and the hash.
    let again = Replica::from_bytes(&short.to_bytes()).expect("decode");
    assert_eq!((again.retention_ms(), again.half_life_ms()), (10, None));
    assert_ne!(
        short.state_hash(),
        plain.state_hash(),
        "settings are in the state's hash"
    );
    assert_eq!(
        (short.accounting().len(), short.accounting().days_len()),
        (0, 1)
    );
}

/// Issue 53: a started attempt the master ends without a report — its node declared down,
/// or its slave no longer holding it — leaves a record with null readings (state `lost`),
/// once; one that never started leaves none.
#[test]
fn an_attempt_lost_with_its_node_leaves_a_record_with_null_readings() {
    use hetsched_common::protocol::HistoryFilter;
    // Assigned, never started: down with its node, no record.
    let (mut r, _, n) = running_gpu_task();
    r.apply(4, env(None, Command::NodeDown { node: n }));
    assert_eq!(r.accounting().len(), 0);
    let started = |r: &mut Replica, t, index| {
        let started = Command::TaskStarted {
            node: n,
            task: t,
            attempt: 1,
        };
        r.apply(index, env(None, started));
    };
    let (mut r, t, _) = running_gpu_task();
    started(&mut r, t, 4);
    r.apply(5, env(None, Command::NodeDown { node: n }));
    r.apply(6, env(None, Command::NodeDown { node: n }));
    let h = r.accounting().history(&HistoryFilter::default());
    assert_eq!(h.len(), 1, "{h:?}");
    let rec = &h[0];
    assert_eq!((rec.task, rec.node, rec.state.as_str()), (t, n, "lost"));
    assert_eq!(rec.reason, Some(hetsched_common::TaskReason::Lost));
    assert_eq!(
        (
            rec.elapsed_s,
            rec.cpu_s,
            rec.max_mem_mib,
            rec.gpu_s,
            rec.dominant_s
        ),
        (None, None, None, None, None),
        "nothing was measured"
    );
    assert!(rec.started_ms.is_some());
    // Its slave no longer holds it (reconciliation's TaskLost): the same.
    let (mut r, t, _) = running_gpu_task();
    started(&mut r, t, 4);
    let lost = Command::TaskLost {
        node: n,
        task: t,
        attempt: 1,
    };
    r.apply(5, env(None, lost));
    let h = r.accounting().history(&HistoryFilter::default());
    assert_eq!(
        h.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(),
        ["lost"]
    );
}

/// The cluster's capacity weighing each record is kept between entries (walking 10,000
/// nodes per finish report cost the leader 18 %, issue 54), and a node joining changes it:
/// the same 2-second one-GPU attempt weighs 2 GPU-seconds of one GPU, then half that once a
/// second one-GPU node registered.
#[test]
fn records_weigh_the_capacity_as_it_is_when_nodes_join() {
    use crate::sched::test_log::{spec, submit, submitted_tasks};
    use crate::state::{Assign, Plan};
    use hetsched_common::protocol::{HistoryFilter, TaskReport, UsageRecord};
    let finished = |node, task| Command::TaskReports {
        node,
        reports: vec![TaskReport::Finished {
            task,
            attempt: 1,
            exit_code: 0,
            reason: None,
            reason_detail: None,
            usage: Some(UsageRecord {
                elapsed_ms: Some(2_000),
                ..UsageRecord::default()
            }),
        }],
    };
    let (mut r, t, n) = running_gpu_task();
    r.apply(4, env(None, finished(n, t)));
    r.apply(5, env(None, node(2, 4, 1, &[])));
    let t2 = submitted_tasks(r.apply(6, env(None, submit(spec(1, 2, 1)))))[0];
    let plan = Plan {
        assignments: vec![Assign::to(t2, n)],
        ..Default::default()
    };
    r.apply(7, env(None, Command::ApplyPlan(plan)));
    r.apply(8, env(None, finished(n, t2)));
    let weights: Vec<_> = r
        .accounting()
        .history(&HistoryFilter::default())
        .iter()
        .map(|rec| rec.dominant_s)
        .collect();
    assert_eq!(weights, vec![Some(2.0), Some(1.0)]);
    // A replica rebuilt from the snapshot (nothing kept) weighs as the one that applied.
    let mut back = Replica::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(back, r);
    let t3 = submitted_tasks(back.apply(9, env(None, submit(spec(1, 2, 1)))))[0];
    let plan = Plan {
        assignments: vec![Assign::to(t3, n)],
        ..Default::default()
    };
    back.apply(10, env(None, Command::ApplyPlan(plan)));
    back.apply(11, env(None, finished(n, t3)));
    let last = back.accounting().history(&HistoryFilter::default());
    assert_eq!(last.last().and_then(|rec| rec.dominant_s), Some(1.0));
}

/// Issue 54's group commit: one `GroupedTaskReports` entry leaves the replica as the same
/// batches applied as `TaskReports` entries one by one — task states, grants, the jobs'
/// counts and the usage records — duplicates, a failure and an unknown node included.
#[test]
fn grouped_reports_apply_as_the_same_batches_one_entry_each() {
    use crate::sched::test_log::{spec, submit, submitted_tasks};
    use crate::state::{Assign, NodeReports, Plan};
    use hetsched_common::protocol::{TaskReport, UsageRecord};
    use hetsched_common::NodeId;
    let mut base = Replica::new();
    base.apply(1, env(None, node(1, 8, 0, &[])));
    base.apply(2, env(None, node(2, 8, 0, &[])));
    let nodes: Vec<NodeId> = base.nodes().keys().copied().collect();
    let tasks = submitted_tasks(base.apply(3, env(None, submit(spec(4, 2, 0)))));
    let plan = Plan {
        assignments: tasks
            .iter()
            .enumerate()
            .map(|(i, t)| Assign::to(*t, nodes[i % 2]))
            .collect(),
        ..Default::default()
    };
    base.apply(4, env(None, Command::ApplyPlan(plan)));
    let started = |i: usize| TaskReport::Started {
        task: tasks[i],
        attempt: 1,
    };
    let finished = |i: usize, exit_code| TaskReport::Finished {
        task: tasks[i],
        attempt: 1,
        exit_code,
        reason: None,
        reason_detail: None,
        usage: Some(UsageRecord {
            elapsed_ms: Some(1_000),
            cpu_s: Some(0.5),
            ..UsageRecord::default()
        }),
    };
    let groups = vec![
        NodeReports {
            node: nodes[0],
            reports: vec![started(0), finished(0, 0)],
        },
        NodeReports {
            node: nodes[1],
            reports: vec![started(1), started(3), finished(3, 2)],
        },
        // A re-send of a finish already in the entry, and a node the state does not know.
        NodeReports {
            node: nodes[0],
            reports: vec![finished(0, 0), started(2)],
        },
        NodeReports {
            node: NodeId(999),
            reports: vec![started(1)],
        },
        NodeReports {
            node: nodes[1],
            reports: vec![finished(1, 0)],
        },
    ];
    let mut one_by_one = base.clone();
    for (i, g) in groups.iter().enumerate() {
        let cmd = Command::TaskReports {
            node: g.node,
            reports: g.reports.clone(),
        };
        one_by_one.apply(5 + i as u64, env(None, cmd));
    }
    let mut grouped = base.clone();
    assert_eq!(
        grouped.apply(5, env(None, Command::GroupedTaskReports { groups })),
        Outcome::TaskUpdated
    );
    assert_eq!(grouped.cluster().tasks(), one_by_one.cluster().tasks());
    assert_eq!(grouped.nodes(), one_by_one.nodes());
    assert_eq!(grouped.cluster().jobs(), one_by_one.cluster().jobs());
    let all = hetsched_common::protocol::HistoryFilter::default();
    let records = grouped.accounting().history(&all);
    assert_eq!(records, one_by_one.accounting().history(&all));
    assert_eq!(records.len(), 3, "two successes and a failure, once each");
    // Started in an earlier group of the entry: the record has the start, as it would
    // after the start's own entry; started and finished in one batch: no start, as ever.
    let start = |i: usize| {
        records
            .iter()
            .find(|r| r.task == tasks[i])
            .map(|r| r.started_ms)
    };
    assert_eq!(
        (start(0), start(1), start(3)),
        (Some(None), Some(Some(50)), Some(None))
    );
}
