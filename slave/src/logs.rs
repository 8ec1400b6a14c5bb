//! Task attempts' output files: where they live, how they are kept, and reading them for
//! `hetsched logs` (the master proxies the client's request here).
//!
//! While an attempt runs its stdout and stderr are written where they are kept,
//! `DATA/logs/task-<id>-<attempt>.out|.err` (the paths of [`attempt::log_paths`]), on disk: not in
//! the attempt directory on tmpfs ([`crate::runtime_dir`]), whose pages are charged to the
//! task's memory cgroup and cannot be written back (a task's output would count against its
//! `--mem`). When it ends, its supervisor keeps them ([`KeepBatch`]): an empty stream is
//! removed and recorded as empty in the log index `DATA/logs/index` — one line per ended
//! attempt. Live files in an attempt directory (written by an earlier version, which kept
//! output on tmpfs while it ran) are still copied to the kept paths.
//!
//! Index line: `task-<id>-<attempt> STDOUT_BYTES STDERR_BYTES STDOUT_MTIME_NS` (the last is
//! when the attempt's stdout was last written, or created if never: the start of a task that
//! prints nothing, which `bench e2e` reads). Kept files stay for as long as the slave keeps
//! them; a reader looks in the kept files, then the live ones, then the index.

use crate::attempt;
use hetsched_common::protocol::{Assignment, ErrorKind, ErrorReply, Message, SlaveCommandReply};
use hetsched_common::{Attempt, JobId, ResourceRequest, TaskId};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Largest chunk one answer carries.
pub const MAX_CHUNK: u64 = 1024 * 1024;
/// The log index's file name in the log directory.
pub const INDEX: &str = "index";
/// A running attempt's stdout, in its attempt directory.
pub const LIVE_STDOUT: &str = "stdout";
/// A running attempt's stderr, in its attempt directory.
pub const LIVE_STDERR: &str = "stderr";

/// Where an attempt's output is kept once it ends (the supervisor's spec carries it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keep {
    /// `DATA/logs/task-<id>-<attempt>.out`.
    pub stdout: PathBuf,
    /// `DATA/logs/task-<id>-<attempt>.err`.
    pub stderr: PathBuf,
}

impl Keep {
    /// The attempt's name (`task-<id>-<attempt>`, the kept files' stem).
    fn name(&self) -> String {
        self.stdout
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The log index beside the kept files.
    fn index(&self) -> PathBuf {
        self.stdout.with_file_name(INDEX)
    }
}

/// The live output files of the attempt in `attempt_dir`.
pub fn live_paths(attempt_dir: &Path) -> (PathBuf, PathBuf) {
    (attempt_dir.join(LIVE_STDOUT), attempt_dir.join(LIVE_STDERR))
}

/// Ended attempts' output being kept, in a batch: [`keep`](Self::keep) each, then
/// [`finish`](Self::finish) once — one append to the index for the batch, and only then are
/// the live files removed (a reader that finds neither a kept nor a live file finds the
/// index line).
#[derive(Debug, Default)]
pub struct KeepBatch {
    index: Option<PathBuf>,
    lines: String,
    remove: Vec<PathBuf>,
    /// Empty streams that may be reused ([`crate::log_spares`]) rather than removed.
    recycle: Vec<PathBuf>,
}

impl KeepBatch {
    /// Keeps an ended attempt's live output (`live` = its stdout and stderr): non-empty
    /// files copied to `keep` (through a temporary name, so a reader never sees a partial
    /// copy), an index line for the attempt. Nothing when no live file is left (kept
    /// already: idempotent, so the agent may keep what a vanished supervisor left behind).
    /// Best effort: a failed copy is logged and leaves the live file in place.
    pub fn keep(&mut self, live: (&Path, &Path), keep: &Keep) {
        self.keep_as(live, keep, false)
    }

    /// [`keep`](Self::keep), an empty stream written in place offered for reuse by
    /// [`finish_into`](Self::finish_into): for attempts whose every process was killed
    /// (they ran in cgroups), so that no leftover writer can reach the file.
    pub fn keep_recyclable(&mut self, live: (&Path, &Path), keep: &Keep) {
        self.keep_as(live, keep, true)
    }

    fn keep_as(&mut self, live: (&Path, &Path), keep: &Keep, recyclable: bool) {
        let mut sizes = [0u64; 2];
        let mut mtime_ns = 0u128;
        let mut any = false;
        for (i, (from, to)) in [(live.0, &keep.stdout), (live.1, &keep.stderr)]
            .into_iter()
            .enumerate()
        {
            let Ok(meta) = std::fs::metadata(from) else {
                continue;
            };
            any = true;
            sizes[i] = meta.len();
            if i == 0 {
                mtime_ns = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
            }
            if from == to.as_path() {
                // Written where it is kept: only an empty stream goes (its index line
                // says it was empty).
                if meta.len() == 0 && recyclable {
                    self.recycle.push(from.to_path_buf());
                } else if meta.len() == 0 {
                    self.remove.push(from.to_path_buf());
                }
                continue;
            }
            if meta.len() > 0 {
                let mut tmp = to.as_os_str().to_os_string();
                tmp.push(".tmp");
                let tmp = PathBuf::from(tmp);
                if let Err(e) = std::fs::copy(from, &tmp).and_then(|_| std::fs::rename(&tmp, to)) {
                    tracing::warn!(from = %from.display(), to = %to.display(), error = %e, "cannot keep task output");
                    let _ = std::fs::remove_file(&tmp);
                    continue;
                }
            }
            self.remove.push(from.to_path_buf());
        }
        if any {
            self.lines.push_str(&format!(
                "{} {} {} {mtime_ns}\n",
                keep.name(),
                sizes[0],
                sizes[1]
            ));
            self.index.get_or_insert_with(|| keep.index());
        }
    }

    /// Appends the batch's index lines in one write, then removes the kept live files.
    pub fn finish(self) {
        self.finish_with(None)
    }

    /// [`finish`](Self::finish), the recyclable empty streams given to `spares` (removed
    /// when it takes no more).
    pub fn finish_into(self, spares: &crate::log_spares::Spares) {
        self.finish_with(Some(spares))
    }

    fn finish_with(mut self, spares: Option<&crate::log_spares::Spares>) {
        let Some(index) = self.index.take() else {
            return;
        };
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&index)
            .and_then(|mut f| f.write_all(self.lines.as_bytes()));
        if let Err(e) = r {
            // The live files stay: readers still find the output there until the attempt
            // directory goes.
            tracing::warn!(index = %index.display(), error = %e, "cannot append to the log index");
            return;
        }
        for f in self.recycle {
            if !spares.is_some_and(|s| s.put(&f)) {
                let _ = std::fs::remove_file(f);
            }
        }
        for f in self.remove {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Keeps whatever live output the attempt (task, attempt) in `attempt_dir` has left: what
/// the agent does for an attempt whose supervisor ended without keeping it (it vanished, or
/// predates [`Keep`]). Costs two failed `stat`s on tmpfs when there is nothing left.
pub fn keep_attempt(log_dir: &Path, attempt_dir: &Path, task: TaskId, attempt: Attempt) {
    let (stdout, stderr) = attempt::kept_logs(log_dir, task, attempt);
    let (out, err) = live_paths(attempt_dir);
    let mut batch = KeepBatch::default();
    batch.keep((&out, &err), &Keep { stdout, stderr });
    batch.finish();
}

/// One ended attempt as the index records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indexed {
    /// Bytes its stdout had.
    pub stdout: u64,
    /// Bytes its stderr had.
    pub stderr: u64,
    /// When its stdout was last written (or created), ns since the epoch.
    pub stdout_mtime_ns: u128,
}

/// Parses an index line into the attempt's name and record.
pub fn parse_index_line(line: &str) -> Option<(&str, Indexed)> {
    let mut w = line.split_whitespace();
    let name = w.next()?;
    Some((
        name,
        Indexed {
            stdout: w.next()?.parse().ok()?,
            stderr: w.next()?.parse().ok()?,
            stdout_mtime_ns: w.next()?.parse().ok()?,
        },
    ))
}

/// The index's record of attempt `name` in `log_dir` (the newest line wins).
fn indexed(log_dir: &Path, name: &str) -> Option<Indexed> {
    let text = std::fs::read_to_string(log_dir.join(INDEX)).ok()?;
    text.lines()
        .rev()
        .filter_map(parse_index_line)
        .find(|(n, _)| *n == name)
        .map(|(_, i)| i)
}

/// Reads up to `max_bytes` (capped at [`MAX_CHUNK`]) of an attempt's stdout or stderr
/// from `offset`: from its kept file, else its live one (it runs, or has just ended), else
/// an empty answer where the index records it empty. Anything else is a not-found answer.
pub fn read_log(
    log_dir: &Path,
    attempts_dir: &Path,
    task: TaskId,
    attempt: Attempt,
    stderr: bool,
    offset: u64,
    max_bytes: u64,
) -> Message {
    // `log_paths` needs only the task and attempt of an assignment.
    let key = Assignment {
        task,
        job: JobId(0),
        index: 0,
        attempt,
        command: Vec::new(),
        env: Default::default(),
        resources: ResourceRequest::default(),
        gpus: Default::default(),
        queued: false,
        engine: None,
        job_name: String::new(),
        workdir: None,
        image: None,
        run_as: None,
        network: None,
    };
    let (out, err) = attempt::log_paths(log_dir, &key);
    let kept = if stderr { err } else { out };
    let name = attempt::attempt_name(task, attempt);
    let (live_out, live_err) = live_paths(&attempts_dir.join(&name));
    let live = if stderr { live_err } else { live_out };
    let stream = if stderr { "stderr" } else { "stdout" };
    // Kept, live, recorded empty, then kept again: the supervisor keeps the output (copy,
    // then index line, then the live file removed) between any two of these looks.
    for path in [&kept, &live] {
        match std::fs::File::open(path) {
            Ok(f) => return read_from(f, path, offset, max_bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return io_error(path, e),
        }
    }
    if let Some(i) = indexed(log_dir, &name) {
        if (if stderr { i.stderr } else { i.stdout }) == 0 {
            return Message::ToSlaveReply(SlaveCommandReply::Log {
                offset: 0,
                data: serde_bytes::ByteBuf::new(),
                size: 0,
            });
        }
    }
    match std::fs::File::open(&kept) {
        Ok(f) => read_from(f, &kept, offset, max_bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Message::Error(ErrorReply::new(
            ErrorKind::NotFound,
            format!(
                "no {stream} kept for {task} attempt {attempt} (not started yet, or removed after the log retention)"
            ),
        )),
        Err(e) => io_error(&kept, e),
    }
}

fn read_from(mut file: std::fs::File, path: &Path, offset: u64, max_bytes: u64) -> Message {
    let size = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return io_error(path, e),
    };
    let start = offset.min(size);
    let want = max_bytes.clamp(1, MAX_CHUNK).min(size - start);
    let mut data = Vec::with_capacity(want as usize);
    let r = file
        .seek(SeekFrom::Start(start))
        .and_then(|_| Read::by_ref(&mut file).take(want).read_to_end(&mut data));
    if let Err(e) = r {
        return io_error(path, e);
    }
    Message::ToSlaveReply(SlaveCommandReply::Log {
        offset: start,
        data: serde_bytes::ByteBuf::from(data),
        size,
    })
}

fn io_error(path: &Path, e: std::io::Error) -> Message {
    Message::Error(ErrorReply::new(
        ErrorKind::Unavailable,
        format!("cannot read {}: {e}", path.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(m: Message) -> (u64, Vec<u8>, u64) {
        match m {
            Message::ToSlaveReply(SlaveCommandReply::Log { offset, data, size }) => {
                (offset, data.into_vec(), size)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn reads_from_an_offset_and_reports_missing_files_as_not_found() {
        let dir = tempfile::tempdir().expect("tmp");
        let attempts = dir.path().join("attempts");
        std::fs::write(dir.path().join("task-7-2.out"), b"hello world").expect("write");
        let read = |stderr, offset, max| {
            read_log(dir.path(), &attempts, TaskId(7), 2, stderr, offset, max)
        };
        assert_eq!(chunk(read(false, 0, 5)), (0, b"hello".to_vec(), 11));
        assert_eq!(chunk(read(false, 6, 100)), (6, b"world".to_vec(), 11));
        assert_eq!(chunk(read(false, 99, 100)), (11, Vec::new(), 11));
        match read(true, 0, 10) {
            Message::Error(e) => assert_eq!(e.kind, ErrorKind::NotFound),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn output_is_read_live_then_kept_and_an_empty_stream_is_recorded_not_created() {
        let data = tempfile::tempdir().expect("tmp");
        let logs = data.path().join("logs");
        let attempts = data.path().join("attempts");
        let dir = attempts.join("task-9-1");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::create_dir_all(&logs).expect("mkdir");
        let (out, err) = live_paths(&dir);
        std::fs::write(&out, b"partial").expect("write");
        std::fs::write(&err, b"").expect("write");
        let read = |stderr| read_log(&logs, &attempts, TaskId(9), 1, stderr, 0, 100);
        // Running: read from the live files.
        assert_eq!(chunk(read(false)), (0, b"partial".to_vec(), 7));
        assert_eq!(chunk(read(true)), (0, Vec::new(), 0));
        // Ended: kept; the empty stderr has no file, only its index line.
        let keep = Keep {
            stdout: logs.join("task-9-1.out"),
            stderr: logs.join("task-9-1.err"),
        };
        let mut batch = KeepBatch::default();
        batch.keep((&out, &err), &keep);
        batch.finish();
        assert!(
            !out.exists() && !err.exists(),
            "live files removed once kept"
        );
        assert_eq!(std::fs::read(&keep.stdout).expect("kept"), b"partial");
        assert!(!keep.stderr.exists(), "no file for an empty stream");
        assert_eq!(chunk(read(false)), (0, b"partial".to_vec(), 7));
        assert_eq!(chunk(read(true)), (0, Vec::new(), 0));
        // Keeping again (the agent after a vanished supervisor) changes nothing.
        let mut again = KeepBatch::default();
        again.keep((&out, &err), &keep);
        again.finish();
        let index = std::fs::read_to_string(logs.join(INDEX)).expect("index");
        assert_eq!(index.lines().count(), 1, "{index}");
        let (name, rec) = parse_index_line(index.trim()).expect("parse");
        assert_eq!(name, "task-9-1");
        assert_eq!((rec.stdout, rec.stderr), (7, 0));
        assert!(rec.stdout_mtime_ns > 0);
        // An attempt the index does not know is not found.
        match read_log(&logs, &attempts, TaskId(9), 2, true, 0, 10) {
            Message::Error(e) => assert_eq!(e.kind, ErrorKind::NotFound),
            other => panic!("unexpected {other:?}"),
        }
    }
}
