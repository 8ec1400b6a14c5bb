//! One reader of `/proc/PID/stat`: the fields the project uses (state, process group, CPU
//! times, start time), parsed in one place.
//!
//! The command name (field 2) is in parentheses and may itself contain spaces and
//! parentheses, so fields are counted after the *last* `)`; every caller that split the line
//! on spaces from the start would misread a task named `a) b`.

use std::path::Path;

/// Linux fixes `USER_HZ`, the unit of `/proc`'s tick counts, at 100 for user space.
pub const USER_HZ: u64 = 100;

/// The fields of one `/proc/PID/stat` line that the project reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: i32,
    /// Field 5: the process group.
    pub pgrp: i32,
    /// Field 14: user CPU time, ticks of [`USER_HZ`].
    pub utime: u64,
    /// Field 15: system CPU time, ticks of [`USER_HZ`].
    pub stime: u64,
    /// Field 22: start time, ticks since boot: with the pid, it names one process even after
    /// the pid is reused.
    pub start_time: u64,
}

/// Field `n` (numbered from 1 as in proc(5); `n` ≥ 3, the fields after the command name) of
/// a `/proc/PID/stat` line, for a caller that needs one field of a possibly short line.
pub fn stat_field(line: &str, n: usize) -> Option<&str> {
    let rest = &line[line.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

impl ProcStat {
    /// Parses one `/proc/PID/stat` line; `None` if it is not one.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Index 0 is field 3 (state): field N is at N - 3.
        let num = |field: usize| f.get(field - 3).and_then(|v| v.parse::<u64>().ok());
        let int = |field: usize| f.get(field - 3).and_then(|v| v.parse::<i32>().ok());
        Some(Self {
            state: f.first()?.chars().next()?,
            ppid: int(4)?,
            pgrp: int(5)?,
            utime: num(14)?,
            stime: num(15)?,
            start_time: num(22)?,
        })
    }

    /// Reads and parses `/proc/PID/stat`; `None` if the process is gone.
    pub fn read(pid: i32) -> Option<Self> {
        Self::read_file(&Path::new("/proc").join(pid.to_string()).join("stat"))
    }

    /// Reads and parses a stat file at `path` (`/proc/PID/stat`, or `/proc/PID/task/TID/stat`).
    pub fn read_file(path: &Path) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// Whether the process has ended (a zombie not yet reaped, or dead).
    pub fn has_ended(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// User + system CPU time, microseconds.
    pub fn cpu_us(&self) -> u64 {
        (self.utime + self.stime).saturating_mul(1_000_000 / USER_HZ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_last_parenthesis() {
        let line = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 98765 \
                    1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let s = ProcStat::parse(line).expect("parse");
        assert_eq!(
            s,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 4240,
                utime: 7,
                stime: 3,
                start_time: 98765,
            }
        );
        assert_eq!(s.cpu_us(), 100_000);
        assert!(!s.has_ended());
        assert!(
            ProcStat::parse("4242 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5")
                .expect("zombie")
                .has_ended()
        );
    }

    #[test]
    fn one_field_of_a_short_line() {
        assert_eq!(stat_field("42 (a) b) c) S 1 77 77 0", 5), Some("77"));
        assert_eq!(stat_field("42 (a) S 1", 3), Some("S"));
        assert_eq!(stat_field("42 (a) S 1", 5), None);
        assert_eq!(stat_field("42 (a) S 1", 2), None);
        assert_eq!(stat_field("garbage", 3), None);
    }

    #[test]
    fn a_short_or_garbled_line_is_none() {
        assert_eq!(ProcStat::parse(""), None);
        assert_eq!(ProcStat::parse("12 (x) S 1 2"), None);
        assert_eq!(ProcStat::parse("no parenthesis S 1 2 3"), None);
    }

    #[test]
    fn a_child_reads_as_ours_then_as_ended_once_killed() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let live = ProcStat::read(pid).expect("the child's stat");
        assert_eq!(live.ppid, std::process::id() as i32);
        assert!(!live.has_ended());
        assert!(live.start_time > 0);
        child.kill().expect("kill");
        // Killed but not reaped: a zombie, with the same start time (the same process).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let ended = loop {
            let s = ProcStat::read(pid).expect("a zombie keeps its stat");
            if s.has_ended() || std::time::Instant::now() > deadline {
                break s;
            }
            std::thread::yield_now();
        };
        assert!(ended.has_ended(), "{ended:?}");
        assert_eq!(ended.start_time, live.start_time);
        child.wait().expect("reap");
        // Gone (or, were the pid reused at once, another process).
        assert!(ProcStat::read(pid).is_none_or(|s| s.start_time != live.start_time));
    }
}
