//! Container tasks (issue 52): the slave's OCI runtime, found at start, and what the node
//! announces of it (`nodes --json` `"containers"`).
//!
//! - [`runtime`] — finding a working runtime (`slave --oci-runtime PATH`, else `runc` then
//!   `crun`) by starting a memory-limited container, the way a container task will start;
//!   the node's labels say which passed, or why none did, and the master sends container
//!   tasks only to nodes whose runtime passed.
//!
//! - [`source`], [`unpack`], [`store`] — reading local images, applying their layers
//!   safely, and the slave's content-addressed store of unpacked images;
//! - [`registry`] — pulling `docker://` images from an OCI registry over HTTPS;
//! - [`launch`] — a container attempt's bundle (overlay root, `config.json`) and the runtime
//!   argv the supervisor pool runs, and its end (`runtime delete`).
//!
//! A slave without a runtime ends a container task with reason `image`: it is never run bare.

pub mod cdi;
pub mod devices;
pub mod fixture;
pub mod gpu;
pub mod launch;
pub mod registry;
pub mod runtime;
pub mod source;
pub mod store;
pub mod unpack;

pub use runtime::{probe, ContainerOptions, Runtime, RuntimeProbe};

/// Where a slave keeps its container files: `DATA/containers` (the runtime's state
/// directory `state/`, the probe's bundle).
pub fn containers_dir(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("containers")
}

/// Whether the slave runs as root (the owner of `/proc/self`).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// What a slave with a working runtime keeps for container tasks.
#[derive(Debug)]
pub struct Containers {
    /// The unpacked images.
    pub store: store::ImageStore,
    /// Bundles and the runtime.
    pub launcher: launch::ContainerLauncher,
    /// The image each live container attempt holds (by attempt name), released at its end.
    holds: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Containers {
    /// The slave's containers under `DATA/containers`, run by `runtime`.
    pub fn new(dir: std::path::PathBuf, runtime: Runtime, opts: &ContainerOptions) -> Self {
        Self {
            store: store::ImageStore::open(
                dir.join("images"),
                &opts.image_dirs,
                opts.image_cache_bytes,
            )
            .with_registry(
                registry::Registry::new(opts.registry_ca.as_deref(), opts.registry_auth.as_deref())
                    .map_err(|e| e.0),
            ),
            launcher: launch::ContainerLauncher { runtime, dir },
            holds: Default::default(),
        }
    }

    /// Attempt `name` holds image `digest` until [`finish`](Self::finish).
    pub fn hold(&self, name: &str, digest: &str) {
        let mut h = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        h.insert(name.to_string(), digest.to_string());
    }

    /// The end of attempt `name` (after its cgroup's counters were read): its container
    /// deleted, its bundle removed, its image released. Nothing for a bare attempt.
    pub fn finish(&self, name: &str) {
        let held = {
            let mut h = self.holds.lock().unwrap_or_else(|p| p.into_inner());
            h.remove(name)
        };
        if let Some(digest) = held {
            self.store.release(&digest);
        }
        if self.launcher.is_container(name) {
            self.launcher.finish(name);
        }
    }
}
