//! `over-commit` by log replay: each master's applied Raft log, as its admin port exports it
//! (`ClientRequest::ExportLog`: the snapshot state when the log is compacted, then every
//! command), is replayed through [`Replica::apply`], and after every index the checker
//! adds up what each node holds — the resources of the tasks assigned to or running on it and
//! of preempted attempts still stopping there — from the tasks and job specs themselves (not
//! from the node's `free` vector, which the code under test keeps) and compares it with the
//! node's capacity. A replay that ends at the index a master reported also compares the
//! replayed state's hash with the master's (`state-diverged`: apply is not deterministic, or
//! the log is not what the master applied). `early-start` (issue 51, `early_start.rs`) is
//! checked on the same replay, at every entry that assigns tasks.

use crate::checker::{Rule, Violation};
use crate::early_start;
use crate::history::MasterView;
use hetsched_common::{NodeId, TaskState};
use hetsched_master_core::state::{fnv1a64, ClusterState, CommandEnvelope, Outcome, Replica};

/// Most `early-start` violations reported per master log (a broken gate breaks it often).
const MAX_EARLY_STARTS: usize = 10;
use std::collections::BTreeMap;

/// One item of an exported log, in index order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogItem {
    /// The state at `index` (the log before it was compacted): replay starts over from it.
    Snapshot {
        /// Its index.
        index: u64,
        /// `Replica` bytes (the snapshot document).
        state: Vec<u8>,
    },
    /// A committed command.
    Command {
        /// Its index.
        index: u64,
        /// `CommandEnvelope` bytes.
        bytes: Vec<u8>,
    },
}

/// One master's exported log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterLog {
    /// Master id.
    pub master: u64,
    /// Its items, in the order the pages came.
    pub items: Vec<LogItem>,
}

/// What replaying one master's log found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Replayed {
    /// Master id.
    pub master: u64,
    /// Commands applied.
    pub commands: u64,
    /// Snapshots restored.
    pub snapshots: u64,
    /// The replayed state's applied index (its last command's).
    pub last_index: u64,
    /// Hash of the replayed state (as `status` prints it).
    pub state_hash: String,
    /// Violations found.
    pub violations: Vec<Violation>,
}

/// What one node holds at one index: milli-cores, MiB, and thousandths per GPU device.
#[derive(Default)]
struct Held {
    cpu_milli: u64,
    mem_mib: u64,
    gpus: BTreeMap<u32, u64>,
    tasks: Vec<u64>,
}

/// Nodes holding more than their capacity in `s`, one line each.
pub fn over_committed(s: &ClusterState) -> Vec<(NodeId, String)> {
    let mut held: BTreeMap<NodeId, Held> = BTreeMap::new();
    // `cpu_milli`: the attempt's CPUs when changed live (S3.2 search, S3.6 compression),
    // else what the job asks for.
    let mut add = |node: NodeId, job, task: u64, gpus: &[(u32, u32)], cpu_milli: Option<u64>| {
        let Some(j) = s.jobs().get(&job) else {
            return;
        };
        let h = held.entry(node).or_default();
        h.cpu_milli += cpu_milli.unwrap_or(j.spec.resources.cpu_milli);
        h.mem_mib += j.spec.resources.mem_mib;
        for (dev, share) in gpus {
            *h.gpus.entry(*dev).or_default() += u64::from(*share);
        }
        h.tasks.push(task);
    };
    for t in s.tasks().values() {
        if matches!(t.status.state, TaskState::Assigned | TaskState::Running) {
            if let Some(node) = t.status.node {
                // S0.3: a task waiting in its slave's local queue holds nothing yet; one
                // reported running from there runs on the machine all the same (a slave
                // that started it before the leader promoted it) and is counted.
                let queued = s
                    .nodes()
                    .get(&node)
                    .is_some_and(|n| n.queued.contains(&t.id));
                if !queued || t.status.state == TaskState::Running {
                    add(node, t.job, t.id.0, &t.gpus, t.cpu_milli);
                }
            }
        }
    }
    for n in s.nodes().values() {
        for st in &n.stopping {
            add(n.id, st.job, st.task.0, &st.gpus, st.cpu_milli);
        }
    }
    // S3.6: cores a compression freed are held for the GPU task, out of anyone's reach.
    for n in s.nodes().values() {
        let reserved: u64 = n.compress_reserves.iter().map(|r| r.cpu_milli).sum();
        if reserved > 0 {
            held.entry(n.id).or_default().cpu_milli += reserved;
        }
    }
    let mut out = Vec::new();
    for (node, h) in held {
        let Some(n) = s.nodes().get(&node) else {
            out.push((
                node,
                format!(
                    "{node} is missing from the node table but holds tasks {:?}",
                    h.tasks
                ),
            ));
            continue;
        };
        let cap = &n.capacity;
        let mut over = Vec::new();
        if h.cpu_milli > cap.cpu_milli {
            over.push(format!("{} of {} milli-cores", h.cpu_milli, cap.cpu_milli));
        }
        if h.mem_mib > cap.mem_mib {
            over.push(format!("{} of {} MiB", h.mem_mib, cap.mem_mib));
        }
        for (dev, share) in &h.gpus {
            if *share > 1000 || *dev as usize >= cap.gpus.len() {
                over.push(format!(
                    "{share}/1000 of GPU {dev} ({} devices)",
                    cap.gpus.len()
                ));
            }
        }
        if !over.is_empty() {
            out.push((
                node,
                format!("{node} holds {} (tasks {:?})", over.join(", "), h.tasks),
            ));
        }
    }
    out
}

/// Replays one master's log, checking every index; `view` (the master's last word on its
/// applied index and state hash) adds the hash comparison when the replay ends there.
pub fn replay(log: &MasterLog, view: Option<&MasterView>) -> Replayed {
    let master = log.master;
    let mut r = Replayed {
        master,
        ..Default::default()
    };
    let mut state = Replica::new();
    // Each node is reported once per master (its first over-committed index): a bug that
    // over-commits usually stays so for many entries.
    let mut flagged: BTreeMap<NodeId, ()> = BTreeMap::new();
    let mut early = 0usize;
    for item in &log.items {
        let index = match item {
            LogItem::Snapshot {
                index,
                state: bytes,
            } => {
                match Replica::from_bytes(bytes) {
                    Ok(s) => state = s,
                    Err(e) => {
                        r.violations.push(Violation {
                            rule: Rule::OverCommit,
                            detail: format!(
                                "master-{master}'s exported snapshot at index {index} cannot be \
                                 replayed: {e}"
                            ),
                        });
                        return r;
                    }
                }
                r.snapshots += 1;
                *index
            }
            LogItem::Command { index, bytes } => {
                if *index <= state.last_index() {
                    // A page re-read after a snapshot moved past it.
                    continue;
                }
                // Like the master: an undecodable entry is applied as a rejection.
                match CommandEnvelope::decode(bytes) {
                    Ok(env) => {
                        // Issue 51: `early-start`, what the entry assigns against what the
                        // log had committed before it.
                        let before = early_start::before(&state, &env.command);
                        let outcome = state.apply(*index, env);
                        let submitted = match outcome {
                            Outcome::SubmittedPlaced { job, .. } => Some(job),
                            _ => None,
                        };
                        for what in early_start::after(&state, &before, submitted) {
                            if early < MAX_EARLY_STARTS {
                                early += 1;
                                r.violations.push(Violation {
                                    rule: Rule::EarlyStart,
                                    detail: format!(
                                        "master-{master}'s log at index {index}: {what}"
                                    ),
                                });
                            }
                        }
                    }
                    Err(_) => state.skip_undecodable(*index),
                }
                r.commands += 1;
                *index
            }
        };
        r.last_index = index;
        for (node, what) in over_committed(&state) {
            if flagged.insert(node, ()).is_none() {
                r.violations.push(Violation {
                    rule: Rule::OverCommit,
                    detail: format!("master-{master}'s log at index {index}: {what}"),
                });
            }
        }
    }
    // The state's own last index (its last command; a snapshot's or the log's tail of no-ops
    // does not move it) is what a master's status reports as its applied index.
    r.last_index = state.last_index();
    // What a master's status hashes: the state's document, without the accounting book
    // (issue 53: the records are the snapshot's, not the state's).
    r.state_hash = format!("{:016x}", fnv1a64(&state.state_document()));
    if let Some(v) = view.filter(|v| v.applied_index == r.last_index && r.last_index > 0) {
        if v.state_hash != r.state_hash {
            r.violations.push(Violation {
                rule: Rule::StateDiverged,
                detail: format!(
                    "master-{master}'s log replayed to index {} hashes {}, the master said {}",
                    r.last_index, r.state_hash, v.state_hash
                ),
            });
        }
    }
    r
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hetsched_common::{JobSpec, NodeResources, ResourceRequest, TaskId};
    use hetsched_master_core::state::{Assign, Command, Plan};

    fn cmd(c: Command) -> Vec<u8> {
        CommandEnvelope {
            at_ms: 1_000,
            request: None,
            command: c,
        }
        .encode()
    }

    /// A node `n1` of `cpu_milli` milli-cores and 4 GiB (also the `early-start` tests').
    pub(crate) fn register(cpu_milli: u64) -> Command {
        Command::RegisterNode {
            key: 7,
            node: None,
            name: "n1".into(),
            addr: "127.0.0.1:1".into(),
            capacity: NodeResources {
                cpu_milli,
                mem_mib: 4096,
                ..Default::default()
            },
            labels: Default::default(),
            partitions: Vec::new(),
        }
    }

    fn submit(count: u32, cpu_milli: u64) -> Command {
        Command::SubmitJob {
            spec: JobSpec {
                name: "j".into(),
                user: "alice".into(),
                resources: ResourceRequest {
                    cpu_milli,
                    mem_mib: 32,
                    ..Default::default()
                },
                count,
                command: vec!["true".into()],
                ..Default::default()
            },
        }
    }

    fn assign(tasks: &[u64]) -> Command {
        Command::ApplyPlan(Plan {
            assignments: tasks
                .iter()
                .map(|t| Assign {
                    task: TaskId(*t),
                    node: NodeId(1),
                    queued: false,
                    engine: None,
                    borrowed: false,
                })
                .collect(),
            ..Default::default()
        })
    }

    /// A healthy log: one node of 2000 milli-cores, two tasks of 1000 placed on it.
    fn healthy() -> Vec<LogItem> {
        [register(2000), submit(2, 1000), assign(&[1, 2])]
            .into_iter()
            .enumerate()
            .map(|(i, c)| LogItem::Command {
                index: i as u64 + 2,
                bytes: cmd(c),
            })
            .collect()
    }

    #[test]
    fn a_healthy_log_replays_clean_and_matches_the_masters_hash() {
        let log = MasterLog {
            master: 1,
            items: healthy(),
        };
        let first = replay(&log, None);
        assert!(first.violations.is_empty(), "{first:?}");
        assert_eq!((first.commands, first.last_index), (3, 4));
        let view = MasterView {
            master: 1,
            applied_index: 4,
            state_hash: first.state_hash.clone(),
        };
        assert!(replay(&log, Some(&view)).violations.is_empty());
        let wrong = MasterView {
            state_hash: "0000000000000000".into(),
            ..view
        };
        let v = replay(&log, Some(&wrong)).violations;
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].rule, Rule::StateDiverged);
    }

    /// S0.3: tasks queued on a slave beyond its free resources hold nothing, so a node with
    /// one running and three queued tasks is not over-committed; the same tasks running are.
    #[test]
    fn tasks_queued_on_a_slave_hold_nothing_in_the_replay() {
        let mut s = ClusterState::new();
        let queued_plan = Command::ApplyPlan(Plan {
            assignments: (1..=4)
                .map(|t| Assign {
                    task: TaskId(t),
                    node: NodeId(1),
                    queued: t > 1,
                    engine: None,
                    borrowed: false,
                })
                .collect(),
            queue_depth: 4,
            ..Default::default()
        });
        for (i, c) in [register(1000), submit(4, 1000), queued_plan]
            .into_iter()
            .enumerate()
        {
            s.apply(
                i as u64 + 2,
                CommandEnvelope::decode(&cmd(c)).expect("decode"),
            );
        }
        assert_eq!(
            s.nodes()[&NodeId(1)].queued.len(),
            3,
            "three wait in the queue"
        );
        assert!(over_committed(&s).is_empty(), "{:?}", over_committed(&s));
        // A slave that starts a queued task before the leader promoted it (what promotion
        // rules out) runs it beside the first: it counts.
        let mut early = s.clone();
        early.apply(
            5,
            CommandEnvelope::decode(&cmd(Command::TaskStarted {
                node: NodeId(1),
                task: TaskId(2),
                attempt: 1,
            }))
            .expect("decode"),
        );
        assert_eq!(over_committed(&early).len(), 1, "started from the queue");
        // Forged: the queue forgotten, the four now count as holding their cores.
        if let Some(n) = s.forge_nodes_mut().get_mut(&NodeId(1)) {
            n.queued.clear();
        }
        assert_eq!(over_committed(&s).len(), 1);
    }

    /// The log of a master whose state over-commits a node: a snapshot in which node-1 shrank
    /// to 1000 milli-cores under its two running 1000 milli-core tasks, then the log goes on.
    #[test]
    fn a_hand_made_log_that_over_commits_is_flagged_under_over_commit() {
        let mut s = ClusterState::new();
        for item in healthy() {
            if let LogItem::Command { index, bytes } = item {
                s.apply(index, CommandEnvelope::decode(&bytes).expect("decode"));
            }
        }
        assert!(over_committed(&s).is_empty());
        if let Some(n) = s.forge_nodes_mut().get_mut(&NodeId(1)) {
            n.capacity.cpu_milli = 1000;
        }
        let mut items = vec![LogItem::Snapshot {
            index: 4,
            state: s.to_bytes(),
        }];
        items.push(LogItem::Command {
            index: 5,
            bytes: cmd(submit(1, 500)),
        });
        let r = replay(&MasterLog { master: 2, items }, None);
        assert_eq!(r.violations.len(), 1, "{r:?}");
        assert_eq!(r.violations[0].rule, Rule::OverCommit);
        let d = &r.violations[0].detail;
        assert!(d.contains("master-2's log at index 4"), "{d}");
        assert!(d.contains("2000 of 1000 milli-cores"), "{d}");
    }

    #[test]
    fn apply_refusing_a_misfit_keeps_the_replay_clean_and_a_forged_state_is_caught() {
        // Capacity 2000, three tasks of 1000 placed at once: apply refuses the third (the
        // real check), so the replay stays clean; a snapshot that claims otherwise is caught.
        let mut items = healthy();
        items.push(LogItem::Command {
            index: 5,
            bytes: cmd(submit(1, 1000)),
        });
        items.push(LogItem::Command {
            index: 6,
            bytes: cmd(assign(&[3])),
        });
        let r = replay(
            &MasterLog {
                master: 1,
                items: items.clone(),
            },
            None,
        );
        assert!(r.violations.is_empty(), "{r:?}");
        // Forced through a state edit between the two halves of the log.
        let mut s = ClusterState::new();
        for item in &items[..4] {
            if let LogItem::Command { index, bytes } = item {
                s.apply(*index, CommandEnvelope::decode(bytes).expect("decode"));
            }
        }
        if let Some(t) = s.forge_tasks_mut().get_mut(&TaskId(3)) {
            t.status.state = TaskState::Running;
            t.status.node = Some(NodeId(1));
        }
        let r = replay(
            &MasterLog {
                master: 3,
                items: vec![LogItem::Snapshot {
                    index: 5,
                    state: s.to_bytes(),
                }],
            },
            None,
        );
        assert_eq!(r.violations.len(), 1, "{r:?}");
        assert!(r.violations[0].detail.contains("3000 of 2000"), "{r:?}");
    }

    /// Found by `chaos run --scenario mixed --seed 7`: a slave agent killed and restarted while
    /// preempted attempts were still stopping on its node re-registered; the registration reset
    /// the node's free resources to its capacity although those attempts still held theirs, and
    /// the next plan placed tasks on top of them. The replay names the index.
    #[test]
    fn a_reregistration_does_not_forget_stopping_attempts() {
        use hetsched_common::priority::{Principal, PriorityConfig, PriorityEntry, Quota};
        use hetsched_master_core::state::{Preemption, TaskRef};
        let priorities = Command::SetPriorityConfig {
            config: PriorityConfig {
                entries: vec![PriorityEntry {
                    who: Principal::User("alice".into()),
                    partition: "default".into(),
                    priority: 10,
                    quota: Quota::default(),
                }],
                ..Default::default()
            },
        };
        let mut low = submit(1, 2000);
        if let Command::SubmitJob { spec } = &mut low {
            spec.user = "bob".into();
        }
        let high = submit(1, 2000);
        let preempt = Command::ApplyPlan(Plan {
            preempt: vec![Preemption {
                preemptor: TaskId(2),
                node: NodeId(1),
                victims: vec![TaskRef {
                    task: TaskId(1),
                    node: NodeId(1),
                    attempt: 1,
                }],
                take_back: false,
            }],
            ..Default::default()
        });
        let mut again = register(2000);
        if let Command::RegisterNode { node, .. } = &mut again {
            *node = Some(NodeId(1));
        }
        let items: Vec<LogItem> = [
            priorities,
            register(2000),
            low,
            assign(&[1]),
            high,
            preempt,
            again,
            assign(&[2]),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, c)| LogItem::Command {
            index: i as u64 + 2,
            bytes: cmd(c),
        })
        .collect();
        let r = replay(&MasterLog { master: 1, items }, None);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    #[test]
    fn an_undecodable_snapshot_is_a_violation_not_a_panic() {
        let r = replay(
            &MasterLog {
                master: 1,
                items: vec![LogItem::Snapshot {
                    index: 9,
                    state: vec![0xc1, 0xff],
                }],
            },
            None,
        );
        assert_eq!(r.violations.len(), 1);
        assert!(r.violations[0].detail.contains("cannot be replayed"));
    }
}
