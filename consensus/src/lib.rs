//! Raft replication for hetsched masters: raft-rs `RawNode` driven by an actix actor, log and
//! hard state in sled, Raft messages carried in hetsched frames over TCP.
//!
//! The crate knows nothing of tasks: it replicates opaque commands into a [`StateMachine`].
//!
//! ```text
//!  client ──propose(bytes)──▶ RaftNode actor ──Ready──▶ sled (entries, hard state; fsync)
//!                               │    ▲                    │
//!                         msgs  │    │ step(msgs)         ▼
//!                               ▼    │              committed entries ──▶ StateMachine::apply
//!                            peers (TCP)                                   └─▶ resolves the proposal
//! ```
//!
//! # Wiring
//!
//! ```text
//! let consensus = Consensus::start(cfg, sm)?;          // inside an actix System
//! // the master's TCP listener, for every Message::Raft { from, msgs }:
//! consensus.step(from.get(), msgs.into_iter().map(|b| b.into_vec()).collect());
//! let out = consensus.propose(bytes).await?;           // resolves once applied
//! ```
//!
//! # Threads
//!
//! - the Raft actor on its own actix `Arbiter`: ticks, steps, proposals, the Ready cycle,
//!   sled writes (not flushes) and `StateMachine::apply`;
//! - `raft-N-flush`: sled flushes (fsync), coalesced, one per batch of Readies;
//! - `raft-N-snap`: encoding and fsyncing local snapshots;
//! - `raft-N-net`: a one-worker tokio runtime with one task per peer (frame encoding,
//!   connect with backoff, socket writes).
//!
//! Every method of [`Consensus`] may be called from any thread or runtime.
//!
//! # Proposals
//!
//! A proposal carries a proposal id in its entry's context; the leader remembers the (index,
//! term) raft-rs gave it. When that index is applied: same term and id → `Ok(output)`;
//! anything else there → [`ProposeError::Dropped`] (ours was overwritten, so it never
//! commits). A leader that steps down keeps its pending proposals for two election timeouts
//! in case their indexes apply meanwhile, then answers [`ProposeError::Unknown`].
//!
//! # Snapshots and compaction
//!
//! Once [`RaftConfig::snapshot_entries`] entries (or [`RaftConfig::snapshot_bytes`] bytes) were
//! applied since the last snapshot, the node takes [`StateMachine::snapshot`] at the applied
//! index (on the Raft thread: the state at that index) with its metadata, the configuration
//! and the member address map. A thread of its own writes it durably to
//! `raft-snapshot.bin` in the data dir (a file, not a sled value: see the `storage` module
//! for the measurements), then the log is compacted in sled up to `snapshot_tail` entries
//! before it. A follower behind the compacted log receives the snapshot: raft-rs emits one
//! `MsgSnapshot`, which the sender splits into 1 MiB chunks (format in the `chunk` module: a
//! zero byte no protobuf message starts with, then snapshot id, sequence, count and total
//! length) carried as ordinary entries of `Message::Raft { msgs }` — several frames when
//! large — and which [`Consensus::step`] reassembles before raft-rs sees it. The leader
//! reports delivery with `report_snapshot` (Finish once every chunk was written, Failure
//! otherwise). The receiver stores the snapshot (replacing its log), calls
//! [`StateMachine::restore`] and applies the entries after it. A restarting member restores
//! its snapshot before replaying the log tail.
//!
//! A fresh cluster starts from a bootstrap snapshot at index 1 (the initial voters, no
//! state), so the first entry is index 2 and a member that joins later (empty log) is always
//! caught up by a snapshot — the initial configuration is in no log entry.
//!
//! # Membership
//!
//! [`Consensus::add_member`] / [`Consensus::remove_member`] propose a `ConfChange` (the
//! address travels in its context and is persisted); one change at a time. The peer tasks and
//! [`Consensus::peer_addr`] follow applied changes. A member started with
//! [`RaftConfig::join`] and an empty data dir does not bootstrap: it waits with an empty
//! configuration until the leader (once the member is added) sends it a snapshot.
//!
//! # Reads
//!
//! [`Consensus::read_index`] is raft-rs ReadIndex (safe mode, no lease): reads queued in one
//! actor turn share one round; the answer comes once a quorum confirmed the leadership and the
//! read index is applied. A partitioned or deposed leader cannot get the confirmation.
//!
//! # Faults
//!
//! [`Consensus::set_faults`] drops (seeded), delays, cuts links or isolates this member: the
//! node filters what it sends, and [`Consensus::step`] drops what arrives from cut peers, so a
//! cut on one side severs both directions.
//!
//! # Layout
//!
//! - `handle`: [`Consensus`], the handle every other thread uses;
//! - `config`, `types`, `error`: the public configuration, data and errors (re-exported here);
//! - `node`: the Raft actor and its Ready cycle, split by concern inside;
//! - `storage`: the log, hard state, snapshot and addresses in sled (and the snapshot file);
//! - `transport`, `chunk`: peer tasks, and snapshots cut into frame-sized chunks;
//! - `fault`, `logger`: injected faults, and raft-rs's slog logs routed to `tracing`.

#![deny(missing_docs)]

mod chunk;
mod config;
mod error;
mod fault;
mod handle;
mod logger;
mod node;
mod storage;
mod transport;
mod types;

pub use config::{
    FaultConfig, RaftConfig, MAX_COMMAND_SIZE, MAX_COMMITTED_SIZE_PER_READY, MAX_INFLIGHT_MSGS,
    MAX_SIZE_PER_MSG, MAX_UNCOMMITTED_SIZE,
};
pub use error::{Error, ProposeError, Result};
pub use handle::Consensus;
pub use logger::TracingDrain;
pub use types::{ConsensusStats, LogPage, Member, RaftStatus, Role, StateMachine};
