//! GPUs from a CDI spec (Container Device Interface, what `nvidia-ctk cdi generate` writes):
//! where the host has a spec of kind `nvidia.com/gpu` in `/var/run/cdi` or `/etc/cdi`, a
//! container granted GPUs gets the spec's common edits (device nodes such as `nvidiactl`,
//! the driver's libraries and binaries as mounts, env, hooks) and those of each granted
//! device (the device named by its index, `"0"`, `"1"`, ...), instead of the loader-cache
//! fallback of [`super::gpu`].
//!
//! JSON specs only (`*.json`; `nvidia-ctk cdi generate --format json`): a YAML spec is
//! skipped with a warning, and without a JSON one the fallback applies.

use super::devices::{add_gpus, Node};
use oci_spec::runtime::{Hook, Mount, Spec};
use serde::Deserialize;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The directories CDI specs are read from, highest priority first.
pub const SPEC_DIRS: [&str; 2] = ["/var/run/cdi", "/etc/cdi"];

/// The kind of NVIDIA GPU specs.
pub const GPU_KIND: &str = "nvidia.com/gpu";

/// Why a CDI spec could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// The file could not be read.
    #[error("cannot read CDI spec {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// The file is not a CDI spec.
    #[error("CDI spec {0} is not valid: {1}")]
    Parse(PathBuf, serde_json::Error),
    /// A granted device has no entry in the spec.
    #[error("CDI spec {0} has no device {GPU_KIND}={1}")]
    NoDevice(PathBuf, u32),
    /// A device node of the spec is not a character device on the host.
    #[error("CDI device node {0} is not a character device on this host")]
    Node(PathBuf),
}

/// A CDI spec (the fields hetsched uses).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// `vendor.com/class`.
    pub kind: String,
    /// Its devices.
    #[serde(default)]
    pub devices: Vec<CdiDevice>,
    /// Edits for every container given any of its devices.
    #[serde(default)]
    pub container_edits: Edits,
}

/// One device of a spec.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDevice {
    /// Its name (`nvidia-ctk`: the index, the UUID, `all`).
    pub name: String,
    /// Its edits.
    #[serde(default)]
    pub container_edits: Edits,
}

/// What a spec adds to a container.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts.
    #[serde(default)]
    pub mounts: Vec<CdiMount>,
    /// OCI hooks.
    #[serde(default)]
    pub hooks: Vec<CdiHook>,
}

/// A device node: its path in the container, on the host, and optionally its numbers.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path in the container.
    pub path: PathBuf,
    /// Path on the host (default: `path`).
    pub host_path: Option<PathBuf>,
    /// Major number (default: the host node's).
    pub major: Option<i64>,
    /// Minor number (default: the host node's).
    pub minor: Option<i64>,
}

/// A mount.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Source on the host.
    pub host_path: PathBuf,
    /// Destination in the container.
    pub container_path: PathBuf,
    /// Mount type (default `bind`).
    #[serde(rename = "type")]
    pub typ: Option<String>,
    /// Mount options.
    #[serde(default)]
    pub options: Vec<String>,
}

/// A hook, run by the runtime at `hook_name` (`createContainer`, ...).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// The OCI hook point.
    pub hook_name: String,
    /// The program.
    pub path: PathBuf,
    /// Its argv.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its env.
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds.
    pub timeout: Option<i64>,
}

/// Reads one spec file.
pub fn read_spec(file: &Path) -> Result<CdiSpec, CdiError> {
    let text = std::fs::read_to_string(file).map_err(|e| CdiError::Read(file.into(), e))?;
    serde_json::from_str(&text).map_err(|e| CdiError::Parse(file.into(), e))
}

/// The first JSON spec of kind [`GPU_KIND`] in `dirs` (in order, files sorted by name), or
/// `None`. A file that cannot be read or parsed is skipped with a warning, as the CDI
/// registry does, and so is a YAML spec.
pub fn find_gpu_spec(dirs: &[&Path]) -> Option<(PathBuf, CdiSpec)> {
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| Some(e.ok()?.path())).collect();
        files.sort();
        for f in files {
            match f.extension().and_then(|e| e.to_str()) {
                Some("json") => {}
                Some("yaml" | "yml") => {
                    tracing::warn!(spec = %f.display(), "CDI spec in YAML skipped: hetsched reads JSON specs (nvidia-ctk cdi generate --format json)");
                    continue;
                }
                _ => continue,
            }
            match read_spec(&f) {
                Ok(spec) if spec.kind == GPU_KIND => return Some((f, spec)),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "CDI spec skipped"),
            }
        }
    }
    None
}

/// The spec's common edits followed by those of each granted device (named by its index).
pub fn edits_for(file: &Path, spec: &CdiSpec, granted: &[u32]) -> Result<Edits, CdiError> {
    let mut all = spec.container_edits.clone();
    for g in granted {
        let d = spec
            .devices
            .iter()
            .find(|d| d.name == g.to_string())
            .ok_or_else(|| CdiError::NoDevice(file.to_path_buf(), *g))?;
        let e = &d.container_edits;
        all.env.extend(e.env.iter().cloned());
        all.device_nodes.extend(e.device_nodes.iter().cloned());
        all.mounts.extend(e.mounts.iter().cloned());
        all.hooks.extend(e.hooks.iter().cloned());
    }
    Ok(all)
}

/// The device nodes of `edits`, numbers from the spec or else from the host's node.
fn nodes(edits: &Edits) -> Result<Vec<Node>, CdiError> {
    edits
        .device_nodes
        .iter()
        .map(|d| {
            let host = d.host_path.as_ref().unwrap_or(&d.path);
            let (major, minor) = match (d.major, d.minor) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    let m = std::fs::metadata(host)
                        .ok()
                        .filter(|m| m.file_type().is_char_device())
                        .ok_or_else(|| CdiError::Node(host.clone()))?;
                    let rdev = m.rdev();
                    (
                        nix::sys::stat::major(rdev) as i64,
                        nix::sys::stat::minor(rdev) as i64,
                    )
                }
            };
            Ok(Node {
                path: d.path.clone(),
                major,
                minor,
            })
        })
        .collect()
}

/// Applies `edits` to `spec`: the device nodes (allowed in the devices cgroup, everything
/// else denied), the mounts, the env (replacing a variable of the same name) and the hooks.
pub fn apply(spec: &mut Spec, edits: &Edits) -> Result<(), CdiError> {
    add_gpus(spec, &nodes(edits)?, &[]);
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    for m in &edits.mounts {
        let mut o = Mount::default();
        o.set_destination(m.container_path.clone());
        o.set_source(Some(m.host_path.clone()));
        o.set_typ(Some(m.typ.clone().unwrap_or_else(|| "bind".into())));
        o.set_options(Some(m.options.clone()));
        mounts.push(o);
    }
    spec.set_mounts(Some(mounts));
    if let Some(process) = spec.process_mut().as_mut() {
        let mut env = process.env().clone().unwrap_or_default();
        for kv in &edits.env {
            let key = kv.split('=').next().unwrap_or_default();
            env.retain(|e| e.split('=').next() != Some(key));
            env.push(kv.clone());
        }
        process.set_env(Some(env));
    }
    add_hooks(spec, &edits.hooks);
    Ok(())
}

fn add_hooks(spec: &mut Spec, hooks: &[CdiHook]) {
    if hooks.is_empty() {
        return;
    }
    let mut all = spec.hooks().clone().unwrap_or_default();
    for h in hooks {
        let mut hook = Hook::default();
        hook.set_path(h.path.clone());
        hook.set_args((!h.args.is_empty()).then(|| h.args.clone()));
        hook.set_env((!h.env.is_empty()).then(|| h.env.clone()));
        hook.set_timeout(h.timeout);
        let slot = match h.hook_name.as_str() {
            "prestart" => all.prestart_mut(),
            "createRuntime" => all.create_runtime_mut(),
            "createContainer" => all.create_container_mut(),
            "startContainer" => all.start_container_mut(),
            "poststart" => all.poststart_mut(),
            "poststop" => all.poststop_mut(),
            other => {
                tracing::warn!(hook = other, "unknown CDI hook point skipped");
                continue;
            }
        };
        slot.get_or_insert_with(Vec::new).push(hook);
    }
    spec.set_hooks(Some(all));
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
