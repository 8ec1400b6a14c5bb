//! What the pool and the agent say to each other, and the pool's files they both read.
//!
//! On the Unix socket `DIR/pool.sock`, one line per message: the pool greets each connection
//! with `hello PID START_TIME`; the agent sends `start ATTEMPT_DIR<TAB>SPEC` (the [`Spec`] as
//! one line of JSON: no `spec.json` to create, read and delete; a request without it names an
//! attempt directory whose `spec.json` says what to run); the pool answers nothing for a
//! start (its failures end as a `cannot_start` status) and sends `exited ATTEMPT_DIR` once an
//! attempt's end is durable. The exit journal `DIR/exits.jsonl` holds one [`JournalEntry`]
//! per line.

use crate::attempt::files::{ExitRecord, Spec};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The socket's file name in the pool directory.
pub const SOCKET: &str = "pool.sock";
/// The exit journal's file name in the pool directory.
pub const JOURNAL: &str = "exits.jsonl";
/// The environment variable naming the pool directory in the pool's own environment (so
/// that whoever cleans up a data directory finds the pool); tasks do not inherit it.
pub const ENV_POOL: &str = "HETSCHED_SUPERVISOR_POOL";

/// One journal line: an attempt directory's name and how it ended.
#[derive(Debug, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The attempt directory's name (`task-<id>-<attempt>`).
    pub attempt: String,
    /// Its end.
    pub exit: ExitRecord,
}

/// The journaled end of the attempt named `attempt`, if the journal in `pool_dir` has one.
pub fn journaled_exit(pool_dir: &Path, attempt: &str) -> Option<ExitRecord> {
    let text = std::fs::read_to_string(pool_dir.join(JOURNAL)).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<JournalEntry>(l).ok())
        .find(|e| e.attempt == attempt)
        .map(|e| e.exit)
}

/// The pool's greeting: its pid and start time (its identity).
pub fn hello(pid: i32, start_time: u64) -> String {
    format!("hello {pid} {start_time}\n")
}

/// The pid and start time of a greeting, if it is one.
pub fn parse_hello(line: &str) -> Option<(i32, u64)> {
    let mut f = line.strip_prefix("hello ")?.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// The agent's request to start the attempt in `dir` as `spec` says.
pub fn start(dir: &Path, spec: &Spec) -> Result<String, serde_json::Error> {
    Ok(format!(
        "start {}\t{}\n",
        dir.display(),
        serde_json::to_string(spec)?
    ))
}

/// A start request: the attempt directory and its spec's JSON, if given inline.
pub fn parse_start(line: &str) -> Option<(&Path, Option<&str>)> {
    let req = line.strip_prefix("start ")?;
    Some(match req.split_once('\t') {
        Some((dir, spec)) => (Path::new(dir), Some(spec)),
        None => (Path::new(req), None),
    })
}

/// The announcement that the attempt in `dir` has ended (durably).
pub fn exited(dir: &Path) -> String {
    format!("exited {}\n", dir.display())
}

/// The attempt directory of an end announcement, if it is one.
pub fn parse_exited(line: &str) -> Option<&Path> {
    line.strip_prefix("exited ").map(Path::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_reads_back_and_older_requests_still_parse() {
        assert_eq!(parse_hello(hello(42, 7).trim_end()), Some((42, 7)));
        assert_eq!(parse_hello("hello x 7"), None);
        let spec: Spec =
            serde_json::from_str(r#"{"version":1,"argv":["true"],"stdout":"/o","stderr":"/e"}"#)
                .expect("spec");
        let line = start(Path::new("/a/task-1-1"), &spec).expect("encode");
        let (dir, inline) = parse_start(line.trim_end()).expect("a start");
        assert_eq!(dir, Path::new("/a/task-1-1"));
        let back: Spec = serde_json::from_str(inline.expect("inline")).expect("decode");
        assert_eq!(back, spec);
        assert_eq!(
            parse_start("start /a/task-2-1"),
            Some((Path::new("/a/task-2-1"), None))
        );
        assert_eq!(
            parse_exited(exited(Path::new("/a/task-1-1")).trim_end()),
            Some(Path::new("/a/task-1-1"))
        );
    }
}
