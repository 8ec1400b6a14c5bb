//! Empty output files kept for the next attempts instead of removed and created again.
//!
//! Most short tasks print nothing: each attempt used to create its two log files on disk
//! (`DATA/logs/task-<id>-<attempt>.out|.err`, [`crate::logs`]) and remove both when it ended
//! empty. On ext4 that churn is the most expensive file work of the supervisor pool: each
//! create searches the inode bitmap past every recently deleted inode (`find_inode_bit`,
//! `recently_deleted` in profiles, BENCHMARKS.md). The pool renames an ended attempt's
//! empty stream to a spare name in the same directory (`.spare-<pool pid>-<n>`) and the next
//! start renames a spare to its log file's name (never over an existing file), truncates it
//! and sets its modification time (the index reads it as the start of a silent task):
//! two renames, no inode allocated or freed.
//!
//! Only files of attempts that ran in cgroups are recycled: their every process was killed
//! before their output is kept, so no leftover writer can reach a file handed to another
//! attempt. Spares left by an earlier pool are removed when a pool starts.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most spares kept (enough for a slave's worth of concurrent starts).
pub const MAX_SPARES: usize = 256;

/// The spare-name prefix.
const PREFIX: &str = ".spare-";

/// A pool's spare log files.
#[derive(Debug, Default)]
pub struct Spares {
    files: Mutex<Vec<PathBuf>>,
    next: AtomicU64,
}

impl Spares {
    /// Removes the spares an earlier pool left in `log_dir`.
    pub fn clean(log_dir: &Path) {
        let Ok(entries) = std::fs::read_dir(log_dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(PREFIX) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Takes `file` (an ended attempt's empty stream) as a spare; `false` when it is not
    /// taken (the caller removes it).
    pub fn put(&self, file: &Path) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if files.len() >= MAX_SPARES {
            return false;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let spare = file.with_file_name(format!("{PREFIX}{}-{n}", std::process::id()));
        if std::fs::rename(file, &spare).is_err() {
            return false;
        }
        files.push(spare);
        true
    }

    /// Creates empty spares in `log_dir` until `at_least` are kept. The pool calls it after a
    /// start, off the path to the task's first instruction: an attempt whose stream is not
    /// empty when it ends leaves no spare behind, and the next start would otherwise create
    /// its file (an inode allocation, the work the spares avoid) while the task waits.
    pub fn replenish(&self, log_dir: &Path, at_least: usize) {
        let at_least = at_least.min(MAX_SPARES);
        loop {
            if self.files.lock().unwrap_or_else(|p| p.into_inner()).len() >= at_least {
                return;
            }
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let spare = log_dir.join(format!("{PREFIX}{}-{n}", std::process::id()));
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&spare);
            if created.is_err() {
                return;
            }
            let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
            if files.len() >= MAX_SPARES {
                drop(files);
                let _ = std::fs::remove_file(&spare);
                return;
            }
            files.push(spare);
        }
    }

    /// `path` opened for appending: a spare renamed to it when one is left, else created.
    pub fn open_append(&self, path: &Path) -> std::io::Result<File> {
        let spare = self.files.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(spare) = spare {
            let renamed = nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                &spare,
                nix::fcntl::AT_FDCWD,
                path,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            );
            match renamed {
                Ok(()) => {
                    let f = std::fs::OpenOptions::new().append(true).open(path)?;
                    f.set_len(0)?;
                    f.set_modified(std::time::SystemTime::now())?;
                    return Ok(f);
                }
                Err(_) => {
                    let _ = std::fs::remove_file(&spare);
                }
            }
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_empty_file_is_reused_empty_and_never_over_an_existing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spares = Spares::default();
        let a = dir.path().join("task-1-1.out");
        std::fs::write(&a, "").expect("create");
        assert!(spares.put(&a));
        assert!(!a.exists(), "moved to a spare name");
        let b = dir.path().join("task-2-1.out");
        let mut f = spares.open_append(&b).expect("reuse");
        f.write_all(b"hello\n").expect("write");
        assert_eq!(std::fs::read_to_string(&b).expect("read"), "hello\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec!["task-2-1.out".to_string()],
            "the spare was used"
        );
        // A spare never replaces an existing file: that one is created (here: opened) anew.
        std::fs::write(&a, "").expect("create");
        assert!(spares.put(&a));
        let f2 = spares.open_append(&b).expect("open existing");
        drop(f2);
        assert_eq!(std::fs::read_to_string(&b).expect("read"), "hello\n");
        Spares::clean(dir.path());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .collect();
        assert_eq!(left.len(), 1, "leftover spares removed");
    }

    #[test]
    fn spares_made_ahead_are_used_and_kept_at_the_low_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spares = Spares::default();
        spares.replenish(dir.path(), 2);
        spares.replenish(dir.path(), 2);
        let count = || {
            std::fs::read_dir(dir.path())
                .expect("ls")
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
                .count()
        };
        assert_eq!(count(), 2, "made up to the mark, not past it");
        let a = dir.path().join("task-1-1.out");
        let mut f = spares.open_append(&a).expect("open");
        f.write_all(b"x").expect("write");
        assert_eq!(count(), 1, "a spare became the log file");
        assert_eq!(std::fs::read_to_string(&a).expect("read"), "x");
        spares.replenish(dir.path(), MAX_SPARES + 10);
        assert_eq!(count(), MAX_SPARES, "never past MAX_SPARES");
        Spares::clean(dir.path());
        assert_eq!(count(), 0);
    }
}
