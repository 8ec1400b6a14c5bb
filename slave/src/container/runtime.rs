//! Finding the slave's OCI runtime: each candidate (`slave --oci-runtime PATH`, else `runc`
//! then `crun` on the `PATH` and in `/usr/sbin`, `/usr/bin`, `/sbin`, `/bin`) runs a probe
//! container — the host's `/bin/true`, its `/bin`, `/lib`, `/lib64` and `/usr` bound
//! read-only into an empty root, with a 32 MiB memory limit — and the first whose container
//! ran and exited 0 is the slave's runtime. A runtime that cannot put a container in a
//! memory-limited cgroup fails here (crun 1.8 on a cgroup v1 hybrid host: "cgroups in
//! hybrid mode not supported"), not under a user's task.
//!
//! The runtime keeps its state under the slave's data dir (`--root DATA/containers/state`),
//! so a slave's containers are its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the slave is told of containers (`slave --oci-runtime`, `--no-containers`,
/// `--image-dir`, `--image-cache`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerOptions {
    /// The runtime to use (`--oci-runtime PATH`); `None`: try `runc`, then `crun`.
    pub oci_runtime: Option<PathBuf>,
    /// Containers turned off (`--no-containers`): no probe, the node runs none.
    pub disabled: bool,
    /// Directories images are read from (`--image-dir`, repeatable); nothing else is read.
    pub image_dirs: Vec<PathBuf>,
    /// Bound of the image store, bytes (`--image-cache`, 20 GiB by default).
    pub image_cache_bytes: u64,
    /// Extra PEM CAs trusted for registries (`--registry-ca`).
    pub registry_ca: Option<PathBuf>,
    /// Registry credentials, Docker's `config.json` format (`--registry-auth`).
    pub registry_auth: Option<PathBuf>,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        Self {
            oci_runtime: None,
            disabled: false,
            image_dirs: Vec::new(),
            image_cache_bytes: super::store::DEFAULT_CACHE_BYTES,
            registry_ca: None,
            registry_auth: None,
        }
    }
}

/// A runtime that passed the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// Its program.
    pub path: PathBuf,
    /// Its name as `nodes --json` shows it (`runc`, `crun`: the program's file name).
    pub name: String,
    /// The first line of its `--version`.
    pub version: String,
}

/// The probe's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeProbe {
    /// This runtime runs containers.
    Ready(Runtime),
    /// None does; why, one line per candidate tried.
    Missing(String),
}

/// Longest a probe container may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Memory limit of the probe container, bytes.
const PROBE_MEM_BYTES: u64 = 32 * 1024 * 1024;

/// Where `name` is: on `PATH`, else in the system directories (a slave under systemd or
/// `sudo` may have a short `PATH`).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Finds the slave's runtime as [`ContainerOptions`] say, with its scratch files and state
/// under `containers_dir` (`DATA/containers`).
pub fn probe(opts: &ContainerOptions, containers_dir: &Path) -> RuntimeProbe {
    if opts.disabled {
        return RuntimeProbe::Missing("turned off (slave --no-containers)".into());
    }
    let candidates: Vec<(String, Option<PathBuf>)> = match &opts.oci_runtime {
        Some(p) => vec![(p.display().to_string(), Some(p.clone()))],
        None => ["runc", "crun"]
            .into_iter()
            .map(|n| (n.to_string(), find_program(n)))
            .collect(),
    };
    let mut why = Vec::new();
    for (label, path) in candidates {
        let Some(path) = path else {
            why.push(format!("{label}: not installed"));
            continue;
        };
        match try_runtime(&path, containers_dir) {
            Ok(rt) => {
                tracing::info!(runtime = %rt.path.display(), version = %rt.version, "container runtime ready");
                return RuntimeProbe::Ready(rt);
            }
            Err(e) => {
                tracing::warn!(runtime = %path.display(), error = %e, "container runtime failed its probe");
                why.push(format!("{label}: {e}"));
            }
        }
    }
    RuntimeProbe::Missing(why.join("; "))
}

/// The probe's `config.json`: `/bin/true` in an empty read-only root with the host's
/// program directories bound read-only, a 32 MiB memory limit, its cgroup `cgroup` (relative:
/// under the slave's own).
pub fn probe_config(binds: &[&str], cgroup: &str) -> serde_json::Value {
    let mut mounts = vec![
        serde_json::json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        serde_json::json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
    ];
    for b in binds {
        mounts.push(
            serde_json::json!({"destination": b, "type": "bind", "source": b,
            "options": ["rbind", "ro", "nosuid", "nodev"]}),
        );
    }
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "noNewPrivileges": true,
            "capabilities": {"bounding": [], "effective": [], "permitted": []}
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "hetsched-probe",
        "mounts": mounts,
        "linux": {
            "cgroupsPath": cgroup,
            "resources": {"memory": {"limit": PROBE_MEM_BYTES}},
            "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}]
        }
    })
}

/// Runs the probe container with `runtime`; its version when it passed.
fn try_runtime(runtime: &Path, containers_dir: &Path) -> Result<Runtime, String> {
    let version = Command::new(runtime)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let id = format!("hetsched-probe-{}", std::process::id());
    let bundle = containers_dir.join(&id);
    let state = containers_dir.join("state");
    let _ = std::fs::remove_dir_all(&bundle);
    let binds: Vec<&str> = ["/bin", "/lib", "/lib64", "/usr"]
        .into_iter()
        .filter(|d| Path::new(d).is_dir())
        .collect();
    let made = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(&state)?;
        for b in &binds {
            std::fs::create_dir_all(bundle.join("rootfs").join(b.trim_start_matches('/')))?;
        }
        for d in ["proc", "dev"] {
            std::fs::create_dir_all(bundle.join("rootfs").join(d))?;
        }
        let cfg = probe_config(&binds, &id);
        std::fs::write(bundle.join("config.json"), cfg.to_string())
    })();
    let result = made
        .map_err(|e| format!("cannot write its probe bundle {}: {e}", bundle.display()))
        .and_then(|()| run_probe(runtime, &state, &bundle, &id));
    let _ = std::fs::remove_dir_all(&bundle);
    result.map(|()| Runtime {
        path: runtime.to_path_buf(),
        name: runtime
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        version,
    })
}

/// `RUNTIME --root STATE run --bundle BUNDLE ID`, bounded by [`PROBE_TIMEOUT`]; what it
/// said on failure.
fn run_probe(runtime: &Path, state: &Path, bundle: &Path, id: &str) -> Result<(), String> {
    let err_file = bundle.join("probe.err");
    let stderr = std::fs::File::create(&err_file).map_err(|e| e.to_string())?;
    let mut child = Command::new(runtime)
        .arg("--root")
        .arg(state)
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // Whatever state a failed run left (a created container) goes.
    let _ = Command::new(runtime)
        .arg("--root")
        .arg(state)
        .args(["delete", "--force", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let said = std::fs::read_to_string(&err_file).unwrap_or_default();
    let said = last_message(&said);
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!(
            "its memory-limited probe container failed ({s}): {said}"
        )),
        None => Err(format!(
            "its probe container did not end within {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// The last non-empty line a runtime wrote, without runc's log prefix (`time=... level=error
/// msg="..."`), cut to a readable length.
pub fn last_message(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message");
    let msg = line
        .split_once("msg=\"")
        .map_or(line, |(_, m)| m.trim_end_matches('"'));
    msg.chars().take(300).collect::<String>().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_config_limits_memory_and_binds_read_only() {
        let c = probe_config(&["/usr", "/bin"], "hetsched-probe-1");
        assert_eq!(c["linux"]["resources"]["memory"]["limit"], PROBE_MEM_BYTES);
        assert_eq!(c["linux"]["cgroupsPath"], "hetsched-probe-1");
        assert_eq!(c["root"]["readonly"], true);
        assert_eq!(c["process"]["noNewPrivileges"], true);
        let binds: Vec<_> = c["mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .filter(|m| m["type"] == "bind")
            .collect();
        assert_eq!(binds.len(), 2);
        assert!(binds.iter().all(|m| m["options"]
            .as_array()
            .is_some_and(|o| o.iter().any(|x| x == "ro"))));
    }

    #[test]
    fn runtime_messages_lose_their_log_prefix() {
        assert_eq!(
            last_message("time=\"x\" level=error msg=\"cgroups in hybrid mode not supported\"\n"),
            "cgroups in hybrid mode not supported"
        );
        assert_eq!(last_message("\n"), "no message");
        assert_eq!(last_message("plain words\n\n"), "plain words");
    }

    #[test]
    fn turned_off_and_missing_runtimes_say_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let off = ContainerOptions {
            disabled: true,
            ..Default::default()
        };
        assert!(
            matches!(probe(&off, dir.path()), RuntimeProbe::Missing(w) if w.contains("--no-containers"))
        );
        let bad = ContainerOptions {
            oci_runtime: Some(dir.path().join("no-such-runtime")),
            ..Default::default()
        };
        match probe(&bad, dir.path()) {
            RuntimeProbe::Missing(w) => {
                assert!(w.contains("no-such-runtime: cannot run it"), "{w}")
            }
            other => panic!("{other:?}"),
        }
    }

    fn is_root() -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    /// The real runtimes of this machine (as root, where installed): runc passes; crun 1.8,
    /// on a cgroup v1 hybrid host, is refused with its own message.
    #[test]
    fn real_runtimes_are_probed_by_starting_a_container() {
        if !is_root() || find_program("runc").is_none() {
            eprintln!("skipped: needs root and runc");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        match probe(&ContainerOptions::default(), dir.path()) {
            RuntimeProbe::Ready(rt) => {
                assert_eq!(rt.name, "runc");
                assert!(rt.version.contains("runc"), "{}", rt.version);
            }
            RuntimeProbe::Missing(why) => panic!("runc failed its probe: {why}"),
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read")
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "state")
            .collect();
        assert!(left.is_empty(), "the probe bundle is removed: {left:?}");
        if let Some(crun) = find_program("crun") {
            let opts = ContainerOptions {
                oci_runtime: Some(crun),
                ..Default::default()
            };
            let hybrid = Path::new("/sys/fs/cgroup/unified").exists();
            match probe(&opts, dir.path()) {
                RuntimeProbe::Missing(why) if hybrid => {
                    assert!(why.contains("probe container failed"), "{why}")
                }
                other => eprintln!("crun: {other:?}"),
            }
        }
    }
}
