//! Task starts that do not wait out an RCU grace period: the kernel's `favordynmods`.
//!
//! **Why.** Every task joins its cgroup before it executes (a write to `cgroup.procs` per
//! hierarchy). Such a move takes the kernel's `cgroup_threadgroup_rwsem` for writing, a
//! per-CPU semaphore that keeps forks and exits (its readers) cheap; its first writer after a
//! quiet spell waits for an RCU grace period before it gets in. Measured here (cgroup v1,
//! `strace -T` of the pool): the first `cgroup.procs` write of an idle task start took
//! **10.8 ms**, the second hierarchy's 0.09 ms — two fifths of an idle submit's whole path
//! (docs/perf-log/2026-11-27.md#idle-submit-the-cgroup-moves-rcu-wait). Busy slaves hardly see it:
//! starts that follow each other within a grace period find the semaphore already switched.
//!
//! **What.** Linux ≥ 6.2 keeps the semaphore switched for good while any cgroup hierarchy is
//! mounted with `favordynmods` ("reduce the latencies of dynamic cgroup modifications such as
//! task migrations ... at the cost of making hot path operations such as forks and exits more
//! expensive" — an atomic operation each, which a node that starts many short tasks does not
//! notice). A v1 hierarchy cannot change its options on remount, and the host's hierarchies
//! are not the slave's to change, so the slave mounts a hierarchy of its own: named, with no
//! controller, nothing in it, at [`MOUNT_POINT`]. The setting is machine-wide and outlives
//! the slave (it is not unmounted at exit: another slave on the machine may rely on it, and a
//! restart finds it in place). `slave --no-favordynmods` leaves the kernel as it is.
//!
//! Where it cannot be had (not root, an older kernel, no cgroup v1 support), the slave says
//! so once and starts tasks as before.

use std::path::Path;

/// Where the slave mounts its hierarchy.
pub const MOUNT_POINT: &str = "/run/hetsched/cgroup-favordynmods";

/// The hierarchy's name (`name=` of a v1 mount with no controller).
const NAME: &str = "hetsched-favordynmods";

/// What [`ensure`] found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Favor {
    /// A cgroup hierarchy is already mounted with `favordynmods` (by an earlier slave, or
    /// by the host: `mount -o favordynmods` of cgroup2).
    AlreadyOn,
    /// This call mounted the slave's hierarchy.
    Mounted,
    /// It could not be had: why.
    Unavailable(String),
}

/// Whether a line of `/proc/self/mounts` is a cgroup hierarchy mounted with
/// `favordynmods`.
fn favors(mount_line: &str) -> bool {
    let mut f = mount_line.split_whitespace();
    let fstype = f.nth(2).unwrap_or_default();
    let options = f.next().unwrap_or_default();
    (fstype == "cgroup" || fstype == "cgroup2") && options.split(',').any(|o| o == "favordynmods")
}

/// Makes sure the kernel favours cgroup moves: see the module docs. `mounts` is the text of
/// `/proc/self/mounts`; `mount_point` where to mount when nothing does yet.
pub fn ensure(mounts: &str, mount_point: &Path) -> Favor {
    if mounts.lines().any(favors) {
        return Favor::AlreadyOn;
    }
    if let Err(e) = std::fs::create_dir_all(mount_point) {
        return Favor::Unavailable(format!("cannot create {}: {e}", mount_point.display()));
    }
    use nix::mount::{mount, MsFlags};
    let options = format!("none,name={NAME},favordynmods");
    match mount(
        Some("cgroup"),
        mount_point,
        Some("cgroup"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(options.as_str()),
    ) {
        Ok(()) => Favor::Mounted,
        Err(e) => Favor::Unavailable(format!(
            "mount -t cgroup -o {options} {}: {e}",
            mount_point.display()
        )),
    }
}

/// [`ensure`] at a slave's start, with `/proc/self/mounts` and [`MOUNT_POINT`], saying what
/// came of it in the log.
pub fn ensure_at_start() {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    match ensure(&mounts, Path::new(MOUNT_POINT)) {
        Favor::AlreadyOn => {
            tracing::debug!("cgroup: favordynmods already on (task starts skip the RCU wait)")
        }
        Favor::Mounted => tracing::info!(
            mount_point = MOUNT_POINT,
            "cgroup: favordynmods on (task starts skip the RCU wait; machine-wide, kept after exit)"
        ),
        Favor::Unavailable(why) => tracing::info!(
            %why,
            "cgroup: favordynmods not available; a task start after a quiet spell waits an RCU grace period"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
";

    #[test]
    fn a_favoring_hierarchy_is_recognised_and_nothing_else() {
        assert!(!HOST.lines().any(favors));
        assert!(favors(
            "cgroup /run/hetsched/cgroup-favordynmods cgroup rw,relatime,favordynmods,name=hetsched-favordynmods 0 0"
        ));
        assert!(favors(
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,favordynmods 0 0"
        ));
        // The word elsewhere on the line (a path) is not the option.
        assert!(!favors("tmpfs /favordynmods tmpfs rw,relatime 0 0"));
        assert!(!favors("cgroup /x cgroup rw,favordynmodsx 0 0"));
    }

    /// As root, the real thing: afterwards a favoring hierarchy is mounted (kernels without
    /// the option, or containers that may not mount, say so and are skipped).
    #[test]
    fn as_root_the_kernel_ends_up_favouring_moves() {
        use std::os::unix::fs::MetadataExt;
        if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
            println!("skipped: not root");
            return;
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        match ensure(&mounts, Path::new(MOUNT_POINT)) {
            Favor::Unavailable(why) => println!("skipped: {why}"),
            Favor::AlreadyOn | Favor::Mounted => {
                let after = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
                assert!(
                    after.lines().any(favors),
                    "no favoring hierarchy in {after}"
                );
                // A second call finds it and mounts nothing more.
                assert_eq!(ensure(&after, Path::new(MOUNT_POINT)), Favor::AlreadyOn);
            }
        }
    }

    #[test]
    fn already_on_mounts_nothing() {
        let dir = std::env::temp_dir().join(format!("favor-test-{}", std::process::id()));
        let mounts = format!("{HOST}cgroup2 /sys/fs/cgroup/unified cgroup2 rw,favordynmods 0 0\n");
        assert_eq!(ensure(&mounts, &dir), Favor::AlreadyOn);
        assert!(!dir.exists(), "nothing was to be created");
    }
}
