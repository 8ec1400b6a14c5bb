//! Device nodes given to a container (issue 52 item 4), shared by the loader-cache path
//! ([`super::gpu`]) and the CDI path ([`super::cdi`]): the nodes made in the container and
//! allowed in its devices cgroup, everything else denied, and read-only library binds.

use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxResources, Mount, Spec,
};
use std::path::PathBuf;

/// A device node to give the container: its path and numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its path (the same inside).
    pub path: PathBuf,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// Adds `nodes` (allowed in the devices cgroup, everything else denied but the runtime's
/// defaults) and the read-only binds of `libraries` to `spec`.
pub fn add_gpus(spec: &mut Spec, nodes: &[Node], libraries: &[PathBuf]) {
    if nodes.is_empty() {
        return;
    }
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    for lib in libraries {
        let mut m = Mount::default();
        m.set_destination(lib.clone());
        m.set_typ(Some("bind".into()));
        m.set_source(Some(lib.clone()));
        m.set_options(Some(vec![
            "bind".into(),
            "ro".into(),
            "nosuid".into(),
            "nodev".into(),
        ]));
        mounts.push(m);
    }
    spec.set_mounts(Some(mounts));
    let Some(linux) = spec.linux_mut().as_mut() else {
        return;
    };
    let mut devices = linux.devices().clone().unwrap_or_default();
    let mut deny_all = LinuxDeviceCgroup::default();
    deny_all.set_allow(false);
    deny_all.set_access(Some("rwm".into()));
    let mut rules = vec![deny_all];
    for n in nodes {
        let mut d = LinuxDevice::default();
        d.set_path(n.path.clone());
        d.set_typ(LinuxDeviceType::C);
        d.set_major(n.major);
        d.set_minor(n.minor);
        d.set_file_mode(Some(0o666));
        devices.push(d);
        let mut r = LinuxDeviceCgroup::default();
        r.set_allow(true);
        r.set_typ(Some(LinuxDeviceType::C));
        r.set_major(Some(n.major));
        r.set_minor(Some(n.minor));
        r.set_access(Some("rwm".into()));
        rules.push(r);
    }
    linux.set_devices(Some(devices));
    let mut res = LinuxResources::default();
    res.set_devices(Some(rules));
    linux.set_resources(Some(res));
}

/// The devices `spec`'s devices cgroup allows, (major, minor), after checking that it
/// denies everything else first.
#[cfg(test)]
pub(crate) fn allowed_devices(spec: &Spec) -> Vec<(i64, i64)> {
    let rules = spec
        .linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.devices().clone())
        .unwrap_or_default();
    assert!(!rules[0].allow(), "everything else denied");
    rules
        .iter()
        .filter(|r| r.allow())
        .map(|r| (r.major().unwrap_or(-1), r.minor().unwrap_or(-1)))
        .collect()
}
