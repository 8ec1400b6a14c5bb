//! The remembered leader: a fresh client command asks the master that answered the last
//! one first, so that it does not pay a follower's handshake and `NotLeader` redirect
//! before reaching the leader (each a round trip, and each TLS handshake costs both ends
//! CPU time).
//!
//! One small file per set of masters (keyed by a hash of the `--masters` list) in a
//! directory only this user can write: `$XDG_RUNTIME_DIR/hetsched/` when that is set, else
//! `$TMPDIR/hetsched-UID/` (created mode 0700; a directory owned by another user or open to
//! others is not used). A hint is only a first guess: it must name one of the configured
//! masters, and a stale one (a follower now, or a master that is down) costs what asking
//! the first master costs, after which the client follows the leader as always
//! (`hetsched_common::leader`). `HETSCHED_LEADER_CACHE=0` turns it off.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

/// The environment variable that turns the cache off (`0`).
pub const ENV: &str = "HETSCHED_LEADER_CACHE";

/// FNV-1a of the master list: stable across builds (std's hasher is not).
fn key(masters: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in masters.join(",").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The directory of hints, created if needed; `None` when it cannot be used safely.
fn dir() -> Option<PathBuf> {
    if std::env::var(ENV).is_ok_and(|v| v == "0") {
        return None;
    }
    // The owner of /proc/self is this process's effective user.
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("hetsched"),
        None => std::env::temp_dir().join(format!("hetsched-{uid}")),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .ok()?;
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    // Another user's directory, or one others may write into, could hold a planted hint.
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o022 == 0;
    private.then_some(dir)
}

fn file(masters: &[String]) -> Option<PathBuf> {
    Some(dir()?.join(format!("leader-{:016x}", key(masters))))
}

/// The remembered leader of `masters`, if it is one of them.
pub fn read(masters: &[String]) -> Option<String> {
    let text = std::fs::read_to_string(file(masters)?).ok()?;
    let hint = text.trim();
    masters.iter().find(|m| *m == hint).cloned()
}

/// Remembers `leader` for `masters` (when it is one of them and not already remembered).
/// Best effort: a failure only costs the next command a redirect.
pub fn write(masters: &[String], leader: &str, known: Option<&str>) {
    if known == Some(leader) || !masters.iter().any(|m| m == leader) {
        return;
    }
    let Some(path) = file(masters) else { return };
    // Written aside and renamed: a concurrent reader sees the old hint or the new one.
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(leader.as_bytes()));
    if written.and_then(|()| std::fs::rename(&tmp, &path)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_the_list_and_its_order() {
        let a = vec!["h:1".to_string(), "h:2".to_string()];
        let b = vec!["h:2".to_string(), "h:1".to_string()];
        assert_eq!(key(&a), key(&a.clone()));
        assert_ne!(key(&a), key(&b));
    }
}
