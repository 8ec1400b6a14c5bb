//! Configuration of one member ([`RaftConfig`], checked by `validate` before anything
//! starts), the injected faults ([`FaultConfig`]), and the fixed raft-rs limits every member
//! runs with.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Largest command [`crate::Consensus::propose`] accepts. Raft sends an entry whole even when it is
/// larger than `max_size_per_msg`, so this keeps one entry well inside a 16 MiB frame.
pub const MAX_COMMAND_SIZE: usize = 4 * 1024 * 1024;
/// raft-rs `max_size_per_msg`: append messages stay far below the frame cap.
pub const MAX_SIZE_PER_MSG: u64 = 1024 * 1024;
/// raft-rs `max_inflight_msgs`.
pub const MAX_INFLIGHT_MSGS: usize = 256;
/// raft-rs `max_committed_size_per_ready`: bounds the apply work of one Ready.
pub const MAX_COMMITTED_SIZE_PER_READY: u64 = 4 * 1024 * 1024;
/// raft-rs `max_uncommitted_size`: past it, proposals fail with [`crate::ProposeError::Dropped`].
pub const MAX_UNCOMMITTED_SIZE: u64 = 256 * 1024 * 1024;

/// Configuration of one Raft member.
#[derive(Clone, Debug)]
pub struct RaftConfig {
    /// This member's id (≥ 1).
    pub id: u64,
    /// Every initial member (this one included) and its cluster address. Used to bootstrap
    /// an empty data dir (afterwards the configuration comes from the log) and as the address
    /// book until the log or a snapshot says otherwise. With `join`, it must name this member
    /// and the current members (so this member can answer the leader before it receives the
    /// snapshot that carries the full address map).
    pub peers: BTreeMap<u64, String>,
    /// Where sled keeps the log.
    pub data_dir: PathBuf,
    /// Raft tick interval.
    pub tick: Duration,
    /// Election timeout in ticks (randomised by raft-rs between this and twice this).
    pub election_ticks: usize,
    /// Heartbeat interval in ticks.
    pub heartbeat_ticks: usize,
    /// Start with an empty configuration and wait to be added by the cluster
    /// (`hetsched master --join`): `peers` is not used to bootstrap.
    pub join: bool,
    /// Take a snapshot and compact the log once this many entries were applied since the
    /// last snapshot (0 = never).
    pub snapshot_entries: u64,
    /// ... or once the log holds this many bytes since the last snapshot (0 = no byte limit).
    pub snapshot_bytes: u64,
    /// Entries kept before a snapshot's index when the log is compacted, so a follower
    /// slightly behind catches up from the log instead of a snapshot.
    pub snapshot_tail: u64,
}

impl RaftConfig {
    /// A configuration with the usual timing: 100 ms ticks, an election timeout of 5 ticks
    /// (0.5–1 s once raft-rs randomises it), a heartbeat every tick.
    pub fn new(id: u64, peers: BTreeMap<u64, String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            id,
            peers,
            data_dir: data_dir.into(),
            tick: Duration::from_millis(100),
            election_ticks: 5,
            heartbeat_ticks: 1,
            join: false,
            snapshot_entries: 10_000,
            snapshot_bytes: 64 * 1024 * 1024,
            snapshot_tail: 1_000,
        }
    }
}

/// Faults injected into this member's Raft traffic (both directions), for tests and the
/// chaos tool. Seeded, so a run replays. The default is a healthy network.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Seed of the drop decisions.
    pub seed: u64,
    /// Probability of dropping each message, 0.0–1.0.
    pub drop_rate: f64,
    /// Extra delay on every outgoing message.
    pub delay: Duration,
    /// Peers whose links are cut (nothing sent to or accepted from them).
    pub cut: std::collections::BTreeSet<u64>,
    /// Cut from every peer.
    pub isolated: bool,
}

pub(crate) fn validate(cfg: &RaftConfig) -> Result<()> {
    if cfg.id == 0 {
        return Err(Error::Config("member id must be ≥ 1".into()));
    }
    if cfg.peers.contains_key(&0) {
        return Err(Error::Config("peer ids must be ≥ 1".into()));
    }
    if !cfg.peers.contains_key(&cfg.id) {
        return Err(Error::Config(format!(
            "member {} is not among the peers {:?}",
            cfg.id,
            cfg.peers.keys().collect::<Vec<_>>()
        )));
    }
    if cfg.tick.is_zero() {
        return Err(Error::Config("tick must be positive".into()));
    }
    if cfg.heartbeat_ticks == 0 || cfg.election_ticks <= cfg.heartbeat_ticks {
        return Err(Error::Config(format!(
            "need 0 < heartbeat_ticks ({}) < election_ticks ({})",
            cfg.heartbeat_ticks, cfg.election_ticks
        )));
    }
    Ok(())
}
