//! Durable state of a slave, in sled under `DATA/db`: the node's identity, every held task
//! (assignment, phase, the process group of a running one), and the acknowledged attempts.
//!
//! Layout (keys big-endian so trees iterate in id order):
//! - `meta`: `key` → u64 (random, non-zero), `node` → u64 (id from the master), `leader` →
//!   address of the last known leader (a hint for the next start).
//! - `tasks`: task id → [`StoredTask`] (named-field MessagePack; variants and fields are only
//!   ever added, so records written by an older slave keep decoding).
//! - `done`: task id → u32 attempt whose result the master acknowledged.
//!
//! Records that do not decode are skipped with an error log, never a panic: a slave with one
//! damaged record still serves everything else.

use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, NodeId, TaskId, TaskReason};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed.
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// A record could not be encoded.
    #[error("encoding a record failed: {0}")]
    Encode(String),
}

/// Phase of a stored task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StoredPhase {
    /// Accepted, not started.
    Queued,
    /// Started as process group `pgid` by an agent that predates supervisors. On restart its
    /// leftovers are killed and the attempt is reported lost (never run again).
    Running {
        /// Process group id (= pid of the group leader).
        pgid: i32,
    },
    /// Ended; result not yet acknowledged.
    Finished {
        /// Exit code.
        exit_code: i32,
        /// Why it ended (`None`: a normal exit, or a record from before reasons).
        #[serde(default)]
        reason: Option<TaskReason>,
        /// What it used (reported again after a restart); `None` in records from before
        /// usage readings, and where nothing was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<hetsched_common::protocol::UsageRecord>,
        /// One line more on why (the task's `reason_detail`: an image's failed step);
        /// reported again after a restart.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// Runs under the supervisor `pid` started at `start_time` (see [`crate::attempt::files`]);
    /// re-adopted on restart while that supervisor lives.
    Supervised {
        /// The supervisor's pid.
        pid: i32,
        /// Its `/proc` start time (against pid reuse).
        start_time: u64,
    },
}

/// One held task as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredTask {
    /// Arrival sequence number: restores the queue's FIFO order.
    pub seq: u64,
    /// The assignment.
    pub assignment: Assignment,
    /// Phase.
    pub phase: StoredPhase,
}

/// Everything loaded at start.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// Held tasks in arrival order.
    pub tasks: Vec<StoredTask>,
    /// Acknowledged attempts.
    pub done: Vec<(TaskId, Attempt)>,
}

/// The slave's sled database.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    meta: sled::Tree,
    tasks: sled::Tree,
    done: sled::Tree,
    /// The arrival sequence number of each stored task, read from the `tasks` tree at
    /// `open` and kept beside it by its writers (`put_task`, `remove_task`,
    /// `complete_task`): a task's start
    /// and end rewrite its record under the same number, and reading that number back from
    /// the record cost a lookup and a decode of the whole assignment twice per task.
    seqs: Arc<Mutex<HashMap<u64, u64>>>,
}

const KEY: &[u8] = b"key";
const NODE: &[u8] = b"node";
const LEADER: &[u8] = b"leader";

fn u64_of(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

impl Store {
    /// Opens (or creates) the store at `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new().path(dir).open()?;
        let tasks = db.open_tree("tasks")?;
        let mut seqs = HashMap::new();
        for kv in tasks.iter() {
            let (k, v) = kv?;
            if let (Some(task), Ok(t)) = (u64_of(&k), rmp_serde::from_slice::<StoredTask>(&v)) {
                seqs.insert(task, t.seq);
            }
        }
        Ok(Self {
            meta: db.open_tree("meta")?,
            tasks,
            done: db.open_tree("done")?,
            db,
            seqs: Arc::new(Mutex::new(seqs)),
        })
    }

    /// Opens the store, waiting up to `max_wait` for the data dir's lock. sled's background
    /// flusher keeps the lock for a moment after a `Db` is dropped, so a slave restarted in
    /// the same process (tests, embedded use) would otherwise fail at random; another live
    /// slave on the same dir still fails, after `max_wait`.
    pub async fn open_waiting(dir: &Path, max_wait: Duration) -> Result<Self, StoreError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            match Self::open(dir) {
                Err(StoreError::Sled(sled::Error::Io(e)))
                    if e.to_string().contains("could not acquire lock")
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                r => return r,
            }
        }
    }

    /// The node's key, made from `fresh` (a random source) and persisted on first use. A
    /// stored key that is missing, malformed or zero is replaced.
    pub fn key_or_init(&self, fresh: impl FnOnce() -> u64) -> Result<u64, StoreError> {
        if let Some(k) = self.meta.get(KEY)?.and_then(|v| u64_of(&v)) {
            if k != 0 {
                return Ok(k);
            }
        }
        let k = match fresh() {
            0 => 1,
            k => k,
        };
        self.meta.insert(KEY, &k.to_be_bytes())?;
        self.db.flush()?;
        Ok(k)
    }

    /// The node id the cluster gave this slave, if any.
    pub fn node(&self) -> Result<Option<NodeId>, StoreError> {
        Ok(self.meta.get(NODE)?.and_then(|v| u64_of(&v)).map(NodeId))
    }

    /// Persists the node id.
    pub async fn set_node(&self, node: NodeId) -> Result<(), StoreError> {
        self.meta.insert(NODE, &node.0.to_be_bytes())?;
        self.flush().await
    }

    /// The last known leader's address.
    pub fn leader_hint(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .meta
            .get(LEADER)?
            .and_then(|v| String::from_utf8(v.to_vec()).ok()))
    }

    /// Remembers the leader's address (not flushed: only a hint).
    pub fn set_leader_hint(&self, addr: &str) -> Result<(), StoreError> {
        self.meta.insert(LEADER, addr.as_bytes())?;
        Ok(())
    }

    /// Writes a task record (not flushed; call [`flush`](Self::flush) before acknowledging).
    pub fn put_task(&self, t: &StoredTask) -> Result<(), StoreError> {
        let v = rmp_serde::to_vec_named(t).map_err(|e| StoreError::Encode(e.to_string()))?;
        self.tasks.insert(t.assignment.task.0.to_be_bytes(), v)?;
        self.seqs().insert(t.assignment.task.0, t.seq);
        Ok(())
    }

    /// Stores `assignment`'s task in `phase`, under the sequence number its record already
    /// has (its arrival order is kept) or, for a task not stored yet, a new one. Not
    /// flushed: the next batch's flush carries it.
    pub fn put_phase(&self, assignment: Assignment, phase: StoredPhase) -> Result<(), StoreError> {
        let seq = match self.seq_of(assignment.task) {
            Some(s) => s,
            None => self.next_seq()?,
        };
        self.put_task(&StoredTask {
            seq,
            assignment,
            phase,
        })
    }

    /// The arrival sequence number of `task`'s stored record, if there is one (no read of
    /// the record: see `seqs`).
    pub fn seq_of(&self, task: TaskId) -> Option<u64> {
        self.seqs().get(&task.0).copied()
    }

    fn seqs(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        self.seqs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of `task`, if stored and readable.
    pub fn get_task(&self, task: TaskId) -> Result<Option<StoredTask>, StoreError> {
        Ok(self
            .tasks
            .get(task.0.to_be_bytes())?
            .and_then(|v| rmp_serde::from_slice(&v).ok()))
    }

    /// Forgets a task (stopped before it ran).
    pub fn remove_task(&self, task: TaskId) -> Result<(), StoreError> {
        self.tasks.remove(task.0.to_be_bytes())?;
        self.seqs().remove(&task.0);
        Ok(())
    }

    /// Forgets a task whose result was acknowledged, and remembers the attempt as done.
    pub fn complete_task(&self, task: TaskId, attempt: Attempt) -> Result<(), StoreError> {
        self.tasks.remove(task.0.to_be_bytes())?;
        self.seqs().remove(&task.0);
        self.done
            .insert(task.0.to_be_bytes(), &attempt.to_be_bytes())?;
        Ok(())
    }

    /// Forgets the done records of these tasks (pruned by the queue).
    pub fn forget_done(&self, tasks: &[TaskId]) -> Result<(), StoreError> {
        for t in tasks {
            self.done.remove(t.0.to_be_bytes())?;
        }
        Ok(())
    }

    /// A fresh arrival sequence number (monotonic across restarts).
    pub fn next_seq(&self) -> Result<u64, StoreError> {
        Ok(self.db.generate_id()?)
    }

    /// Makes every write so far durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.db.flush_async().await?;
        Ok(())
    }

    /// Flushes now and returns how many bytes were still unflushed (tests: whether an
    /// earlier flush covered every write).
    #[cfg(test)]
    pub(crate) fn flush_counting(&self) -> usize {
        self.db.flush().unwrap_or(usize::MAX)
    }

    /// Loads every held task (arrival order) and acknowledged attempt.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let mut out = Loaded::default();
        for kv in self.tasks.iter() {
            let (k, v) = kv?;
            match rmp_serde::from_slice::<StoredTask>(&v) {
                Ok(t) if u64_of(&k) == Some(t.assignment.task.0) => out.tasks.push(t),
                Ok(t) => tracing::error!(
                    task = %t.assignment.task,
                    "stored task under a foreign key; skipped"
                ),
                Err(e) => tracing::error!(error = %e, key = ?k, "unreadable stored task; skipped"),
            }
        }
        out.tasks.sort_by_key(|t| t.seq);
        for kv in self.done.iter() {
            let (k, v) = kv?;
            let attempt = <[u8; 4]>::try_from(v.as_ref()).ok().map(u32::from_be_bytes);
            match (u64_of(&k), attempt) {
                (Some(t), Some(a)) => out.done.push((TaskId(t), a)),
                _ => tracing::error!(key = ?k, "unreadable done record; skipped"),
            }
        }
        Ok(out)
    }
}

/// A plain `true` assignment of job 7 (tests of the store and of its users).
#[cfg(test)]
pub(crate) fn test_assignment(task: u64, attempt: Attempt) -> Assignment {
    Assignment {
        task: TaskId(task),
        job: hetsched_common::JobId(7),
        index: 0,
        attempt,
        command: vec!["true".into()],
        env: Default::default(),
        resources: hetsched_common::ResourceRequest::default(),
        gpus: vec![],
        queued: false,
        engine: None,
        job_name: String::new(),
        workdir: None,
        image: None,
        run_as: None,
        network: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{LocalQueue, Offer, Phase};

    fn asg(task: u64, attempt: Attempt) -> Assignment {
        test_assignment(task, attempt)
    }

    /// Rebuilds a queue from storage the way the agent does at start.
    fn queue_of(l: &Loaded) -> LocalQueue {
        let mut q = LocalQueue::new(1000);
        for t in &l.tasks {
            let phase = match t.phase {
                StoredPhase::Queued => Phase::Queued,
                StoredPhase::Running { .. } | StoredPhase::Supervised { .. } => Phase::Running,
                StoredPhase::Finished { exit_code, .. } => Phase::Finished { exit_code },
            };
            q.restore(t.assignment.clone(), phase);
        }
        for (t, a) in &l.done {
            q.restore_done(*t, *a);
        }
        q
    }

    /// A phase change keeps the task's arrival number; a task not stored yet gets a new one.
    #[test]
    fn put_phase_keeps_the_arrival_number_of_a_stored_task() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        s.put_phase(asg(1, 1), StoredPhase::Queued).expect("queued");
        s.put_phase(asg(2, 1), StoredPhase::Queued).expect("queued");
        let first = s.seq_of(TaskId(1)).expect("stored");
        assert!(s.seq_of(TaskId(2)).expect("stored") > first);
        let done = StoredPhase::Finished {
            exit_code: 0,
            reason: None,
            usage: None,
            detail: None,
        };
        s.put_phase(asg(1, 1), done).expect("finished");
        let t = s.get_task(TaskId(1)).expect("read").expect("stored");
        assert_eq!(t.seq, first);
        assert!(matches!(
            t.phase,
            StoredPhase::Finished { exit_code: 0, .. }
        ));
        s.put_phase(
            asg(3, 1),
            StoredPhase::Supervised {
                pid: 7,
                start_time: 1,
            },
        )
        .expect("supervised");
        assert!(s.seq_of(TaskId(3)).expect("stored") > first);
    }

    #[tokio::test]
    async fn identity_survives_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = Store::open(dir.path()).expect("open");
            assert_eq!(s.key_or_init(|| 0).expect("key"), 1, "zero is never a key");
            assert_eq!(s.node().expect("node"), None);
            s.set_node(NodeId(5)).await.expect("set node");
        }
        let s = Store::open_waiting(dir.path(), Duration::from_secs(5))
            .await
            .expect("reopen");
        assert_eq!(
            s.key_or_init(|| 99).expect("key"),
            1,
            "kept, not regenerated"
        );
        assert_eq!(s.node().expect("node"), Some(NodeId(5)));
    }

    #[tokio::test]
    async fn a_tasks_sequence_number_follows_its_record_across_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let put = |s: &Store, task: u64, seq: u64| {
            s.put_task(&StoredTask {
                seq,
                assignment: asg(task, 1),
                phase: StoredPhase::Queued,
            })
            .expect("put");
        };
        {
            let s = Store::open(dir.path()).expect("open");
            put(&s, 1, 10);
            put(&s, 2, 11);
            put(&s, 3, 12);
            put(&s, 3, 12);
            assert_eq!(s.seq_of(TaskId(1)), Some(10));
            s.remove_task(TaskId(1)).expect("remove");
            s.complete_task(TaskId(2), 1).expect("complete");
            assert_eq!(s.seq_of(TaskId(1)), None, "removed");
            assert_eq!(s.seq_of(TaskId(2)), None, "completed");
            assert_eq!(s.seq_of(TaskId(4)), None, "never stored");
            s.flush().await.expect("flush");
        }
        let s = Store::open_waiting(dir.path(), Duration::from_secs(5))
            .await
            .expect("reopen");
        assert_eq!(s.seq_of(TaskId(3)), Some(12), "read back at open");
        assert_eq!(s.seq_of(TaskId(2)), None);
        assert_eq!(
            s.seq_of(TaskId(3)),
            s.get_task(TaskId(3)).expect("get").map(|t| t.seq),
            "as its record says"
        );
    }

    #[tokio::test]
    async fn accepted_task_is_held_after_restart_and_duplicate_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = Store::open(dir.path()).expect("open");
            for (task, attempt) in [(3, 1), (1, 2)] {
                let seq = s.next_seq().expect("seq");
                s.put_task(&StoredTask {
                    seq,
                    assignment: asg(task, attempt),
                    phase: StoredPhase::Queued,
                })
                .expect("put");
            }
            s.flush().await.expect("flush");
        }
        let s = Store::open_waiting(dir.path(), Duration::from_secs(5))
            .await
            .expect("reopen");
        let loaded = s.load().expect("load");
        let ids: Vec<u64> = loaded.tasks.iter().map(|t| t.assignment.task.0).collect();
        assert_eq!(ids, vec![3, 1], "arrival order, not key order");
        let mut q = queue_of(&loaded);
        assert_eq!(q.offer(asg(1, 2)), Offer::Duplicate);
        assert_eq!(q.queued_len(), 2);
        assert_eq!(q.start_next().map(|a| a.task), Some(TaskId(3)));
    }

    #[tokio::test]
    async fn unacked_result_survives_restart_until_acked() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = Store::open(dir.path()).expect("open");
            s.put_task(&StoredTask {
                seq: s.next_seq().expect("seq"),
                assignment: asg(4, 1),
                phase: StoredPhase::Finished {
                    exit_code: 2,
                    reason: Some(TaskReason::Exit),
                    usage: None,
                    detail: None,
                },
            })
            .expect("put");
            s.put_task(&StoredTask {
                seq: s.next_seq().expect("seq"),
                assignment: asg(5, 1),
                phase: StoredPhase::Running { pgid: 12345 },
            })
            .expect("put");
            s.flush().await.expect("flush");
        }
        {
            let s = Store::open_waiting(dir.path(), Duration::from_secs(5))
                .await
                .expect("reopen");
            let loaded = s.load().expect("load");
            let q = queue_of(&loaded);
            assert_eq!(
                q.get(TaskId(4)).map(|e| e.phase),
                Some(Phase::Finished { exit_code: 2 })
            );
            assert_eq!(
                q.get(TaskId(5)).map(|e| e.phase),
                Some(Phase::Running),
                "a task running at the crash stays running: re-adopted or reported, never rerun"
            );
            s.complete_task(TaskId(4), 1).expect("complete");
            s.flush().await.expect("flush");
        }
        let s = Store::open_waiting(dir.path(), Duration::from_secs(5))
            .await
            .expect("reopen");
        let loaded = s.load().expect("load");
        assert_eq!(loaded.tasks.len(), 1);
        assert_eq!(loaded.done, vec![(TaskId(4), 1)]);
        let mut q = queue_of(&loaded);
        assert_eq!(
            q.offer(asg(4, 1)),
            Offer::Duplicate,
            "acked result not rerun"
        );
    }

    #[tokio::test]
    async fn garbage_record_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        s.tasks
            .insert(9u64.to_be_bytes(), &b"\xc1garbage"[..])
            .expect("insert");
        s.tasks.insert(b"short", &b"x"[..]).expect("insert");
        s.done.insert(b"bad", &b"y"[..]).expect("insert");
        s.meta.insert(KEY, &b"nope"[..]).expect("insert");
        let loaded = s.load().expect("load");
        assert!(loaded.tasks.is_empty());
        assert!(loaded.done.is_empty());
        assert_eq!(s.key_or_init(|| 42).expect("key"), 42);
    }
}
