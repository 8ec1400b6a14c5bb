//! A container attempt's bundle and its end: the root filesystem (an overlay of the image's
//! unpacked root, read-only, and a writable layer of the attempt's own; a copy where overlayfs
//! is refused), `config.json` made with the `oci-spec` crate, and the argv the slave's
//! supervisor pool runs in place of a bare command:
//!
//! ```text
//! RUNTIME --root DATA/containers/state run --keep --bundle DATA/containers/run/task-17-1 task-17-1
//! ```
//!
//! The pool starts that argv as it starts any task — in the attempt's own cgroups, its output
//! in the task's logs, stopped with SIGTERM then SIGKILL (the runtime passes signals on to the
//! container), surviving an agent restart — and the container is held by the same cgroups
//! ([`container_cgroup`]), so limits, OOM kills and CPU accounting are read as for any task.
//! `--keep` leaves the container to the slave, which reads the cgroup's counters and then
//! deletes it ([`ContainerLauncher::finish`]).
//!
//! Namespaces: pid, mount, ipc, uts and cgroup; the host's network (one of its own with
//! `--network none`). No user namespace: root
//! in the container is root on the host (docs/guide/containers.md). No new privileges; the
//! runtime's default reduced capability set; `/proc`, a minimal `/dev`, `/sys` read-only.

use super::runtime::Runtime;
use super::source::ImageConfig;
use crate::cgroup::AttemptCgroup;
use oci_spec::runtime::{LinuxNamespaceType, Mount, Spec};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why a container attempt could not be prepared (the step is `prepare`).
pub type PrepareError = String;

/// Prepares and ends container attempts with the slave's runtime.
#[derive(Clone, Debug)]
pub struct ContainerLauncher {
    /// The runtime that passed the start probe.
    pub runtime: Runtime,
    /// `DATA/containers`.
    pub dir: PathBuf,
}

/// What a container attempt runs with, besides its image.
#[derive(Clone, Debug, Default)]
pub struct TaskSide {
    /// The job's argv (empty: the image's cmd).
    pub argv: Vec<String>,
    /// The task's environment (the slave's variables and the job's), after the image's.
    pub env: Vec<(String, String)>,
    /// `--workdir` (`None`: the image's).
    pub workdir: Option<String>,
    /// `--run-as` (`None`: the image's user).
    pub run_as: Option<String>,
    /// `--network` (`none`: a network namespace of its own; `None` or `host`: the host's).
    pub network: Option<String>,
}

/// The process argv of a container: Docker's rule — the image's entrypoint, then the job's
/// argv if it gives one, else the image's cmd.
pub fn process_args(image: &ImageConfig, argv: &[String]) -> Vec<String> {
    let tail = if argv.is_empty() { &image.cmd } else { argv };
    image.entrypoint.iter().chain(tail).cloned().collect()
}

/// `USER[:GROUP]` (names or numbers) as uid and gid, names looked up in the image's
/// `/etc/passwd` and `/etc/group`; a user without a group takes its passwd group (0 for a
/// bare uid the image does not list).
pub fn resolve_user(rootfs: &Path, user: &str) -> Result<(u32, u32), String> {
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    // Read only where `/etc` is a directory of the image, not a link out of it.
    let etc = rootfs.join("etc");
    let etc_ok = std::fs::symlink_metadata(&etc).is_ok_and(|m| m.is_dir());
    let table = |name: &str| -> Vec<Vec<String>> {
        let text = etc_ok
            .then(|| std::fs::read_to_string(etc.join(name)).ok())
            .flatten()
            .unwrap_or_default();
        text.lines()
            .map(|l| l.split(':').map(str::to_string).collect())
            .collect()
    };
    let passwd = table("passwd");
    let (uid, passwd_gid) = match u.parse::<u32>() {
        Ok(uid) => {
            let gid = passwd
                .iter()
                .find(|f| f.get(2).is_some_and(|x| x == u))
                .and_then(|f| f.get(3)?.parse().ok());
            (uid, gid)
        }
        Err(_) => {
            let f = passwd
                .iter()
                .find(|f| f.first().is_some_and(|x| x == u))
                .ok_or_else(|| format!("user {u:?} is not in the image's /etc/passwd"))?;
            let num = |i: usize| f.get(i).and_then(|x| x.parse::<u32>().ok());
            (
                num(2).ok_or_else(|| format!("user {u:?}: a bad /etc/passwd line"))?,
                num(3),
            )
        }
    };
    let gid = match g {
        None => passwd_gid.unwrap_or(0),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => table("group")
                .iter()
                .find(|f| f.first().is_some_and(|x| x == g))
                .and_then(|f| f.get(2)?.parse().ok())
                .ok_or_else(|| format!("group {g:?} is not in the image's /etc/group"))?,
        },
    };
    Ok((uid, gid))
}

/// The cgroup path a runtime is given for `cg`: its directory relative to each hierarchy's
/// root (`/sys/fs/cgroup/<controller>`, or the unified root), the same in every hierarchy
/// it has; `None` where they differ or there is no cgroup (the runtime then makes its own
/// under the attempt's, as the supervisor put it there).
pub fn cgroups_path(cg: Option<&AttemptCgroup>, root: &Path) -> Option<String> {
    let cg = cg?;
    let mut rel: Option<String> = None;
    for file in cg.procs_files() {
        let dir = file.parent()?;
        let inside = dir.strip_prefix(root).ok()?;
        let mut parts = inside.components();
        if cg.mode() == crate::cgroup::CgroupMode::V1 {
            parts.next()?; // the controller's mount
        }
        let r = format!("/{}", parts.as_path().display());
        match &rel {
            Some(x) if *x != r => return None,
            _ => rel = Some(r),
        }
    }
    rel
}

/// The cgroup a container is given, and the file that counts its OOM kills. On cgroup v1 a
/// child of the attempt's cgroups named `child` (`hetsched-<slave>-task-17-1`: in the
/// hierarchies the slave does not use, where the runtime runs in the slave's own cgroup, it
/// is made there, and must not be another container's) — a relative `cgroupsPath`: the runtime runs
/// in the attempt's cgroups, which the supervisor joined; the child works whatever the
/// hierarchies' paths, the attempt's limits hold it, its CPU time and peak memory are the
/// attempt's, and the OOM kill is counted in the child, whose counter the supervisor reads
/// before the slave deletes the container). On v2 the attempt's own cgroup (its events
/// count a child's OOM kills anyway).
pub fn container_cgroup(
    cg: &AttemptCgroup,
    root: Option<&Path>,
    child: &str,
) -> (Option<String>, Option<PathBuf>) {
    match cg.mode() {
        crate::cgroup::CgroupMode::V1 => {
            let oom = cg.oom_counter_file().and_then(|f| {
                let name = f.file_name()?.to_owned();
                Some(f.parent()?.join(child).join(name))
            });
            (Some(child.to_string()), oom)
        }
        crate::cgroup::CgroupMode::V2 => (
            root.and_then(|r| cgroups_path(Some(cg), r)),
            cg.oom_counter_file(),
        ),
        crate::cgroup::CgroupMode::None => (None, None),
    }
}

/// The `config.json` of a container: `image`'s config under `task`'s overrides, in
/// `rootfs`, its cgroup `cgroups_path`.
pub fn config(
    image: &ImageConfig,
    task: &TaskSide,
    user: (u32, u32),
    cgroups_path: Option<String>,
    hostname: &str,
) -> Result<Spec, PrepareError> {
    let mut spec = Spec::default();
    let args = process_args(image, &task.argv);
    if args.is_empty() {
        return Err("the image has no entrypoint or cmd, and the job gives no command".into());
    }
    let mut env: Vec<String> = image.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    for (k, v) in &task.env {
        env.retain(|e| e.split_once('=').is_none_or(|(ek, _)| ek != k));
        env.push(format!("{k}={v}"));
    }
    let cwd = task
        .workdir
        .clone()
        .or_else(|| Some(image.working_dir.clone()).filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    let process = spec.process_mut().as_mut().ok_or("no process")?;
    process.set_args(Some(args));
    process.set_env(Some(env));
    process.set_cwd(PathBuf::from(cwd));
    process.set_no_new_privileges(Some(true));
    let mut u = oci_spec::runtime::User::default();
    u.set_uid(user.0);
    u.set_gid(user.1);
    process.set_user(u);
    let root = spec.root_mut().as_mut().ok_or("no root")?;
    root.set_path(PathBuf::from("rootfs"));
    root.set_readonly(Some(false));
    spec.set_hostname(Some(hostname.to_string()));
    // /sys read-only, the others as the crate's defaults (proc, a tmpfs /dev, devpts, shm,
    // mqueue).
    let mounts: Vec<Mount> = spec
        .mounts()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.destination() != Path::new("/sys/fs/cgroup"))
        .collect();
    spec.set_mounts(Some(mounts));
    let linux = spec.linux_mut().as_mut().ok_or("no linux")?;
    // The host's network (a task talks to its peers as a bare task does), unless the job
    // asked for none: then a namespace of its own, where the runtime brings up loopback.
    let own_network = task.network.as_deref() == Some("none");
    let namespaces = linux
        .namespaces()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| own_network || n.typ() != LinuxNamespaceType::Network)
        .collect();
    linux.set_namespaces(Some(namespaces));
    linux.set_cgroups_path(cgroups_path.map(PathBuf::from));
    // The slave wrote the limits into the cgroup; the runtime writes none.
    linux.set_resources(None);
    Ok(spec)
}

impl ContainerLauncher {
    /// The bundle of attempt `name`: `DATA/containers/run/<name>`.
    pub fn bundle(&self, name: &str) -> PathBuf {
        self.dir.join("run").join(name)
    }

    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Makes attempt `name`'s bundle from `rootfs` (the image's, read-only) and `spec`;
    /// the argv the supervisor runs.
    pub fn prepare(
        &self,
        name: &str,
        image_rootfs: &Path,
        spec: &Spec,
    ) -> Result<Vec<String>, PrepareError> {
        let bundle = self.bundle(name);
        let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
        for d in ["upper", "work", "rootfs"] {
            let p = bundle.join(d);
            std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
        }
        let rootfs = bundle.join("rootfs");
        if let Err(e) = mount_overlay(image_rootfs, &bundle) {
            tracing::debug!(error = %e, "overlayfs refused; copying the image's root");
            let out = Command::new("cp")
                .args(["-a", "--"])
                .arg(image_rootfs.join("."))
                .arg(&rootfs)
                .output()
                .map_err(|e| format!("cp: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cannot copy the image's root: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        spec.save(bundle.join("config.json"))
            .map_err(|e| format!("config.json: {e}"))?;
        Ok(vec![
            self.runtime.path.display().to_string(),
            "--root".into(),
            self.state().display().to_string(),
            "run".into(),
            "--keep".into(),
            "--bundle".into(),
            bundle.display().to_string(),
            name.to_string(),
        ])
    }

    /// Whether attempt `name` is a container attempt of this slave (its bundle exists).
    pub fn is_container(&self, name: &str) -> bool {
        self.bundle(name).join("config.json").exists()
    }

    /// The end of container attempt `name`, after its cgroup's counters were read: the
    /// runtime deletes the container (killing what is left of it, removing its cgroups), the
    /// root filesystem is unmounted and the bundle removed.
    pub fn finish(&self, name: &str) {
        let out = Command::new(&self.runtime.path)
            .arg("--root")
            .arg(self.state())
            .args(["delete", "--force", name])
            .stdin(Stdio::null())
            .output();
        if let Ok(o) = &out {
            if !o.status.success() {
                let said = super::runtime::last_message(&String::from_utf8_lossy(&o.stderr));
                if !said.contains("does not exist") {
                    tracing::warn!(container = name, said, "runtime delete failed");
                }
            }
        }
        let bundle = self.bundle(name);
        let rootfs = bundle.join("rootfs");
        if let Err(e) = nix::mount::umount2(&rootfs, nix::mount::MntFlags::MNT_DETACH) {
            if e != nix::errno::Errno::EINVAL && e != nix::errno::Errno::ENOENT {
                tracing::debug!(container = name, error = %e, "umount");
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&bundle) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %bundle.display(), error = %e, "cannot remove a container bundle");
            }
        }
    }

    /// Ends every container bundle whose attempt is not in `keep` (what a previous run of
    /// the slave left of attempts that are over).
    pub fn sweep(&self, keep: &std::collections::BTreeSet<String>) {
        for e in std::fs::read_dir(self.dir.join("run"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) {
                tracing::info!(container = %name, "removing a container left by an ended attempt");
                self.finish(&name);
            }
        }
    }
}

/// Mounts `lower` read-only under the bundle's writable layer at `bundle/rootfs`.
fn mount_overlay(lower: &Path, bundle: &Path) -> Result<(), String> {
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        bundle.join("upper").display(),
        bundle.join("work").display()
    );
    if opts.contains(',')
        && [lower, bundle]
            .iter()
            .any(|p| p.display().to_string().contains(','))
    {
        return Err("a path with a comma".into());
    }
    nix::mount::mount(
        Some("overlay"),
        &bundle.join("rootfs"),
        Some("overlay"),
        nix::mount::MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
