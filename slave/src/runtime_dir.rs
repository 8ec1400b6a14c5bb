//! Where attempt directories live: on a memory file system (tmpfs) when the machine has one,
//! reached through the symlink `DATA/attempts`.
//!
//! An attempt directory holds runtime files only — the "started" mark (the directory
//! itself), `cpus` (`HETSCHED_CPUS_FILE`), the supervisor's `supervisor.json` and
//! `status.json` — each created per task and removed once the master acknowledged its
//! result. On ext4 that churn made inode allocation the larger part of the agent's CPU (every
//! allocation skips the recently deleted inodes, docs/DESIGN.md "Node loss"). What must survive
//! a machine restart is elsewhere, on disk: the store (assignments, results) and the pool's
//! exit journal (`DATA/supervisor/exits.jsonl`).
//!
//! Losing the runtime files is detected, never guessed: the attempts directory records the
//! boot it was made in (`boot_id`), and a dangling symlink means its target is gone. Either
//! way [`AttemptsDir::lost`] is set, and the agent reports every held attempt that may have
//! started as lost instead of starting it (`agent::restore`): "an attempt never starts
//! twice" holds across a machine restart without a flush before each start.

use std::path::{Path, PathBuf};

/// Environment variable choosing the base directory of runtime files (default:
/// `$XDG_RUNTIME_DIR`, else `/dev/shm`); empty keeps attempt directories in the data directory.
pub const ENV_RUNTIME_DIR: &str = "HETSCHED_RUNTIME_DIR";
/// The file in the attempts directory naming the boot it belongs to.
const BOOT_FILE: &str = ".boot_id";
/// The file in a runtime directory naming the data directory it serves.
const OWNER_FILE: &str = ".owner";
/// Runtime directories of data directories that no longer point at them are removed once
/// this old (a slave creating its own has linked it well within that time).
const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The attempts directory of a slave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptsDir {
    /// The path attempts are named under (`DATA/attempts`, possibly a symlink).
    pub path: PathBuf,
    /// Its runtime files were lost since the last run (the machine restarted, or the tmpfs
    /// directory was removed): any held attempt may have started and vanished.
    pub lost: bool,
}

/// This boot's identity, when the kernel tells it.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// The base directory for runtime files, if any.
fn runtime_base() -> Option<PathBuf> {
    let chosen = match std::env::var_os(ENV_RUNTIME_DIR) {
        Some(v) if v.is_empty() => return None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
    };
    chosen
        .or_else(|| Some(PathBuf::from("/dev/shm")))
        .filter(|p| p.is_dir())
}

/// Prepares `data_dir/attempts`: a symlink to a fresh directory under the runtime base
/// when there is one (an existing empty directory is replaced; one holding attempts is kept
/// where it is), else a plain directory. Records this boot in it and says whether the
/// runtime files of a previous run were lost.
pub fn prepare(data_dir: &Path) -> std::io::Result<AttemptsDir> {
    prepare_under(data_dir, runtime_base().as_deref())
}

/// [`prepare`] with the runtime base given (`None`: attempts stay in the data directory).
pub fn prepare_under(data_dir: &Path, base: Option<&Path>) -> std::io::Result<AttemptsDir> {
    let path = data_dir.join("attempts");
    let mut lost = false;
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            if !path.is_dir() {
                // Its target is gone (a machine restart empties tmpfs).
                let target = std::fs::read_link(&path)?;
                std::fs::create_dir_all(&target)?;
                write_owner(&target, data_dir);
                lost = true;
            }
        }
        Ok(m) if m.is_dir() => {
            // An older layout, or no runtime base: stays on disk unless it is empty.
            if base.is_some() && std::fs::remove_dir(&path).is_ok() {
                link_fresh(data_dir, &path, base)?;
            }
        }
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)?;
            link_fresh(data_dir, &path, base)?;
        }
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(&path)?;
    if let Some(now) = boot_id() {
        let boot = path.join(BOOT_FILE);
        match std::fs::read_to_string(&boot) {
            Ok(was) if was.trim() != now => lost = true,
            _ => {}
        }
        std::fs::write(&boot, format!("{now}\n"))?;
    }
    Ok(AttemptsDir { path, lost })
}

/// Links `path` to a new directory under the runtime base (no base: a plain directory).
fn link_fresh(data_dir: &Path, path: &Path, base: Option<&Path>) -> std::io::Result<()> {
    let Some(base) = base else {
        return std::fs::create_dir_all(path);
    };
    remove_orphans(base);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let target = base.join(format!("hetsched-{}-{nanos:x}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&target) {
        tracing::warn!(base = %base.display(), error = %e, "cannot use the runtime directory; attempt directories stay in the data directory");
        return std::fs::create_dir_all(path);
    }
    write_owner(&target, data_dir);
    std::os::unix::fs::symlink(&target, path)
}

fn write_owner(target: &Path, data_dir: &Path) {
    let owner = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let _ = std::fs::write(
        target.join(OWNER_FILE),
        owner.as_os_str().as_encoded_bytes(),
    );
}

/// Removes runtime directories whose data directory is gone or links elsewhere (a removed
/// test cluster, a wiped slave), once older than [`ORPHAN_AGE`].
fn remove_orphans(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with("hetsched-") {
            continue;
        }
        let dir = e.path();
        let Ok(owner) = std::fs::read(dir.join(OWNER_FILE)) else {
            continue;
        };
        let owner = PathBuf::from(String::from_utf8_lossy(&owner).into_owned());
        let young = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < ORPHAN_AGE);
        if young || std::fs::read_link(owner.join("attempts")).is_ok_and(|t| t == dir) {
            continue;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_live_on_the_runtime_base_and_a_lost_target_is_detected() {
        let base = tempfile::tempdir().expect("tmp");
        let data = tempfile::tempdir().expect("tmp");
        let a = prepare_under(data.path(), Some(base.path())).expect("prepare");
        assert!(!a.lost);
        let target = std::fs::read_link(&a.path).expect("a symlink");
        assert!(target.starts_with(base.path()));
        std::fs::create_dir(a.path.join("task-1-1")).expect("mkdir");
        // Same run again: nothing lost.
        let b = prepare_under(data.path(), Some(base.path())).expect("prepare");
        assert!(!b.lost);
        assert!(b.path.join("task-1-1").is_dir());
        // The machine restarted: tmpfs is empty.
        std::fs::remove_dir_all(&target).expect("rm");
        let c = prepare_under(data.path(), Some(base.path())).expect("prepare");
        assert!(c.lost, "a vanished runtime directory must be reported");
        assert!(c.path.is_dir());
        // Another boot, same files: lost as well.
        std::fs::write(c.path.join(BOOT_FILE), "another-boot\n").expect("write");
        let d = prepare_under(data.path(), Some(base.path())).expect("prepare");
        assert!(
            d.lost,
            "a runtime directory of another boot must be reported"
        );
    }

    #[test]
    fn an_attempts_directory_holding_attempts_stays_on_disk() {
        let base = tempfile::tempdir().expect("tmp");
        let data = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(data.path().join("attempts/task-3-1")).expect("mkdir");
        let a = prepare_under(data.path(), Some(base.path())).expect("prepare");
        assert!(!a.lost);
        assert!(!std::fs::symlink_metadata(&a.path)
            .expect("meta")
            .file_type()
            .is_symlink());
        assert!(a.path.join("task-3-1").is_dir());
    }
}
