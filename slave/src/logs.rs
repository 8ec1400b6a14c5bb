//! Reading a task attempt's output files for `hetsched logs` (the master proxies the
//! client's request here). The paths come from [`exec::log_paths`], the one place that
//! names them; the files stay after the task ends, for as long as the slave keeps them.

use crate::exec;
use hetsched_common::protocol::{Assignment, ErrorKind, ErrorReply, Message, SlaveCommandReply};
use hetsched_common::{Attempt, JobId, ResourceRequest, TaskId};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Largest chunk one answer carries.
pub const MAX_CHUNK: u64 = 1024 * 1024;

/// Reads up to `max_bytes` (capped at [`MAX_CHUNK`]) of an attempt's stdout or stderr
/// from `offset`. A missing file is a not-found answer.
pub fn read_log(
    log_dir: &Path,
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
    };
    let (out, err) = exec::log_paths(log_dir, &key);
    let path = if stderr { err } else { out };
    let stream = if stderr { "stderr" } else { "stdout" };
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Message::Error(ErrorReply::new(
                ErrorKind::NotFound,
                format!(
                    "no {stream} kept for {task} attempt {attempt} (not started yet, or removed after the log retention)"
                ),
            ))
        }
        Err(e) => return io_error(&path, e),
    };
    let size = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return io_error(&path, e),
    };
    let start = offset.min(size);
    let want = max_bytes.clamp(1, MAX_CHUNK).min(size - start);
    let mut data = Vec::with_capacity(want as usize);
    let r = file
        .seek(SeekFrom::Start(start))
        .and_then(|_| file.by_ref().take(want).read_to_end(&mut data));
    if let Err(e) = r {
        return io_error(&path, e);
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
        let dir = std::env::temp_dir().join(format!("hetsched-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("task-7-2.out"), b"hello world").expect("write");
        assert_eq!(
            chunk(read_log(&dir, TaskId(7), 2, false, 0, 5)),
            (0, b"hello".to_vec(), 11)
        );
        assert_eq!(
            chunk(read_log(&dir, TaskId(7), 2, false, 6, 100)),
            (6, b"world".to_vec(), 11)
        );
        assert_eq!(
            chunk(read_log(&dir, TaskId(7), 2, false, 99, 100)),
            (11, Vec::new(), 11)
        );
        match read_log(&dir, TaskId(7), 2, true, 0, 10) {
            Message::Error(e) => assert_eq!(e.kind, ErrorKind::NotFound),
            other => panic!("unexpected {other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
