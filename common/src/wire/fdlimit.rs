//! Open-file limits: raising the soft limit at start, and accept loops that back off
//! rather than spin when the process runs out of descriptors.
//!
//! When a process is at its open-file limit, `accept` fails with `EMFILE` (or `ENFILE`, the
//! system's limit) and the connection stays in the listen backlog, so the next `accept`
//! fails at once: a loop that retries immediately spins a core, and one that logs every
//! failure floods the log (a benchmark process with thousands of in-process slaves has
//! thousands of such loops). Each loop here waits longer after each failure (up to a
//! second) and keeps serving the connections it has; the warning is written at most once a
//! second for the whole process, with the limits and how to raise them.

use crate::protocol::OpenFiles;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The first pause after a failed accept.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause: an accept loop at its limit wakes once a second.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// Where the soft limit stops when the hard limit is unlimited (the kernel's usual
/// `nr_open`).
const UNLIMITED_CAP: u64 = 1 << 20;

/// Raises this process's soft open-file limit to its hard limit and returns both as they
/// are afterwards (the limits as they were when raising is refused).
pub fn raise_open_file_limit() -> io::Result<OpenFiles> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    let target = hard.min(UNLIMITED_CAP).max(soft);
    if target > soft {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            tracing::warn!(error = %e, soft, hard, "could not raise the open-file limit");
        }
    }
    open_files().ok_or_else(|| io::Error::other("getrlimit failed"))
}

/// This process's open-file limits and how many descriptors it has open now (counted in
/// `/proc/self/fd`; `None` where that cannot be read).
pub fn open_files() -> Option<OpenFiles> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    Some(OpenFiles { soft, hard, open })
}

/// The pause schedule of one accept loop: doubling from 10 ms to 1 s while accepts fail,
/// back to the start after one succeeds.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    next: Option<Duration>,
}

impl AcceptBackoff {
    /// An accept succeeded.
    pub fn succeeded(&mut self) {
        self.next = None;
    }

    /// An accept failed with `error` (reported through [`warn_accept_failed`]): how long to
    /// wait before the next.
    pub fn failed(&mut self, listener: &str, error: &io::Error) -> Duration {
        warn_accept_failed(listener, error);
        let pause = self.next.unwrap_or(FIRST_PAUSE);
        self.next = Some((pause * 2).min(LONGEST_PAUSE));
        pause
    }
}

/// Milliseconds since the first call, for the once-a-second warning.
fn millis_since_start() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// When the last warning was written (ms since start, plus one: 0 means never).
static LAST_WARNING: AtomicU64 = AtomicU64::new(0);
/// Failures since the last warning that were not written.
static UNWRITTEN: AtomicU64 = AtomicU64::new(0);

/// Whether the process-wide once-a-second warning may be written at `now_ms`; the caller
/// that wins writes it.
fn may_warn(now_ms: u64) -> bool {
    let last = LAST_WARNING.load(Ordering::Relaxed);
    let due = last == 0 || now_ms + 1 >= last + 1000;
    due && LAST_WARNING
        .compare_exchange(last, now_ms + 1, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// Logs a failed accept at most once a second for the whole process; running out of
/// descriptors is said in words, with the limits and how to raise them.
pub fn warn_accept_failed(listener: &str, error: &io::Error) {
    if !may_warn(millis_since_start()) {
        UNWRITTEN.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let unwritten = UNWRITTEN.swap(0, Ordering::Relaxed);
    let out_of_files = matches!(error.raw_os_error(), Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE);
    if out_of_files {
        let limits = open_files();
        tracing::warn!(
            listener,
            error = %error,
            soft_limit = limits.as_ref().map(|l| l.soft),
            hard_limit = limits.as_ref().map(|l| l.hard),
            open = limits.as_ref().and_then(|l| l.open),
            not_logged = unwritten,
            "accept failed: out of file descriptors; serving the open connections and \
             retrying up to once a second; raise the limit (`ulimit -n` before starting, \
             LimitNOFILE= in a systemd unit, or the hard limit in /etc/security/limits.conf)"
        );
    } else {
        tracing::warn!(listener, error = %error, not_logged = unwritten, "accept failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_a_second_and_reset_after_a_success() {
        let e = io::Error::from_raw_os_error(nix::libc::EMFILE);
        let mut b = AcceptBackoff::default();
        let pauses: Vec<u64> = (0..9)
            .map(|_| b.failed("test", &e).as_millis() as u64)
            .collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed("test", &e), FIRST_PAUSE);
    }

    #[test]
    fn the_limits_are_read_and_the_soft_one_raised_to_the_hard_one() {
        let limits = raise_open_file_limit().expect("limits");
        assert!(limits.soft > 0 && limits.soft <= limits.hard, "{limits:?}");
        assert!(limits.open.is_some_and(|n| n >= 3), "{limits:?}");
    }
}
