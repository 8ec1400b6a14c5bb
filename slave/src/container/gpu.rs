//! GPUs in a container (issue 52 item 4): the task's granted devices and only those —
//! `/dev/nvidiaN` per granted device, with `nvidiactl`, `nvidia-uvm` and `nvidia-uvm-tools`
//! where the host has them — created in the container and allowed in its devices cgroup,
//! and the driver's user-space libraries bound in read-only from the loader's cache
//! (`ldconfig -p`: `libcuda`, `libnvidia-*`, `libnvcuvid`, `libnvoptix`), as the
//! NVIDIA container toolkit does without a CDI spec. `CUDA_VISIBLE_DEVICES` is set as for a
//! bare task.
//!
//! Where the host has a CDI spec of the GPUs (`/var/run/cdi`, `/etc/cdi`), it is used
//! instead of the loader's cache ([`super::cdi`]).

use super::devices::{add_gpus, Node};
use oci_spec::runtime::Spec;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Gives the container of `spec` the `granted` GPUs: nothing where the host has no device
/// node for them (emulated GPUs), else from the host's CDI spec where it has a usable one
/// (a spec that cannot be used is logged and the fallback applies), else the granted nodes
/// and the driver libraries of the loader's cache.
pub fn add_granted(spec: &mut Spec, granted: &[u32]) {
    let nodes = nodes_of(&device_paths(Path::new("/dev"), granted));
    if nodes.is_empty() {
        return;
    }
    let dirs = super::cdi::SPEC_DIRS.map(Path::new);
    let from_cdi = super::cdi::find_gpu_spec(&dirs).map(|(file, cdi)| {
        let edits = super::cdi::edits_for(&file, &cdi, granted)?;
        super::cdi::apply(spec, &edits)?;
        Ok::<_, super::cdi::CdiError>(file)
    });
    match from_cdi {
        Some(Ok(file)) => {
            tracing::debug!(spec = %file.display(), ?granted, "GPUs from the CDI spec");
            return;
        }
        None => {}
        Some(Err(e)) => tracing::warn!(error = %e, "CDI spec not used; the loader's cache instead"),
    }
    let ldconfig = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    add_gpus(spec, &nodes, &driver_libraries(&ldconfig));
}

/// The device paths of `granted` GPUs under `dev` (`/dev`): `nvidiaN` for each, then the
/// control and UVM nodes.
pub fn device_paths(dev: &Path, granted: &[u32]) -> Vec<PathBuf> {
    granted
        .iter()
        .map(|g| dev.join(format!("nvidia{g}")))
        .chain(["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"].map(|n| dev.join(n)))
        .collect()
}

/// The character devices among `paths` that exist, with their numbers.
pub fn nodes_of(paths: &[PathBuf]) -> Vec<Node> {
    paths
        .iter()
        .filter_map(|p| {
            let m = std::fs::metadata(p).ok()?;
            m.file_type().is_char_device().then(|| {
                let rdev = m.rdev();
                Node {
                    path: p.clone(),
                    major: nix::sys::stat::major(rdev) as i64,
                    minor: nix::sys::stat::minor(rdev) as i64,
                }
            })
        })
        .collect()
}

/// The driver libraries in the text of `ldconfig -p` (64-bit entries).
pub fn driver_libraries(ldconfig: &str) -> Vec<PathBuf> {
    const PREFIXES: [&str; 5] = [
        "libcuda.",
        "libnvidia-",
        "libnvcuvid.",
        "libnvoptix.",
        "libcudadebugger.",
    ];
    let mut v: Vec<PathBuf> = ldconfig
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().split_once(' ')?;
            let path = rest.rsplit_once("=> ")?.1.trim();
            let ok = PREFIXES.iter().any(|p| name.starts_with(p))
                && rest.contains("x86-64")
                && path.starts_with('/');
            ok.then(|| PathBuf::from(path))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::devices::allowed_devices;

    #[test]
    fn only_the_granted_devices_and_the_driver_libraries_go_in() {
        let paths = device_paths(Path::new("/dev"), &[1, 3]);
        assert_eq!(
            paths,
            [
                "nvidia1",
                "nvidia3",
                "nvidiactl",
                "nvidia-uvm",
                "nvidia-uvm-tools"
            ]
            .map(|n| PathBuf::from("/dev").join(n))
        );
        let nodes = vec![
            Node {
                path: "/dev/nvidia3".into(),
                major: 195,
                minor: 3,
            },
            Node {
                path: "/dev/nvidiactl".into(),
                major: 195,
                minor: 255,
            },
        ];
        let ldconfig = "\t3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n\
            \tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
        let libs = driver_libraries(ldconfig);
        assert_eq!(
            libs,
            [
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
            ]
            .map(PathBuf::from)
        );
        let mut spec = Spec::default();
        add_gpus(&mut spec, &nodes, &libs);
        let linux = spec.linux().as_ref().expect("linux");
        let devs = linux.devices().clone().unwrap_or_default();
        assert_eq!(devs.len(), 2);
        assert_eq!((devs[0].major(), devs[0].minor()), (195, 3));
        assert_eq!(allowed_devices(&spec), [(195, 3), (195, 255)]);
        let binds: Vec<_> = spec
            .mounts()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.typ().as_deref() == Some("bind"))
            .collect();
        assert_eq!(binds.len(), 2);
        assert!(binds.iter().all(|m| m
            .options()
            .as_ref()
            .is_some_and(|o| o.contains(&"ro".to_string()))));
        // No GPU granted: nothing added, the slave's limits stand.
        let mut bare = Spec::default();
        let before = bare.clone();
        add_gpus(&mut bare, &[], &libs);
        assert_eq!(bare, before);
    }
}
