//! hetsched slave agent: registers with the masters, heartbeats, runs assigned tasks as child
//! processes, and keeps every result the master has not acknowledged.
//!
//! STATUS: API skeleton — the agent lands with issue 2.

use std::path::PathBuf;

/// Configuration of a slave process (from `hetsched slave ...`).
#[derive(Clone, Debug)]
pub struct SlaveConfig {
    /// Address to listen on for the masters' commands.
    pub listen: String,
    /// Address masters use to reach this slave (defaults to `listen`).
    pub advertise: Option<String>,
    /// Master cluster addresses.
    pub masters: Vec<String>,
    /// Data directory (stable id, accepted tasks, results, logs).
    pub data_dir: PathBuf,
    /// CPU capacity in whole cores.
    pub cpus: u32,
    /// Memory capacity in MiB.
    pub mem_mib: u64,
    /// Number of GPUs to offer (emulated unless real ones are detected).
    pub gpus: u32,
    /// Model name for emulated GPUs.
    pub gpu_model: Option<String>,
    /// Human name (defaults to the advertise address).
    pub name: Option<String>,
}

/// Errors of the slave.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad configuration.
    #[error("config: {0}")]
    Config(String),
    /// Storage failed.
    #[error("storage: {0}")]
    Storage(String),
    /// I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the slave until the process is stopped.
pub async fn run(_cfg: SlaveConfig) -> Result<(), Error> {
    Err(Error::Config("slave not implemented yet".into()))
}
