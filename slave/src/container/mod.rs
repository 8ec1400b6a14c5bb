//! Container tasks (issue 52): the slave's OCI runtime, found at start, and what the node
//! announces of it (`nodes --json` `"containers"`).
//!
//! - [`runtime`] — finding a working runtime (`slave --oci-runtime PATH`, else `runc` then
//!   `crun`) by starting a memory-limited container, the way a container task will start;
//!   the node's labels say which passed, or why none did, and the master sends container
//!   tasks only to nodes whose runtime passed.
//!
//! Until the image store and the container launcher are built, a container task that
//! reaches this slave ends with reason `image` and a detail saying so: it is never run bare.

pub mod runtime;

pub use runtime::{probe, ContainerOptions, Runtime, RuntimeProbe};

/// Where a slave keeps its container files: `DATA/containers` (the runtime's state
/// directory `state/`, the probe's bundle).
pub fn containers_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("containers")
}
