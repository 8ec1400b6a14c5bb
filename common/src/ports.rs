//! Picking loopback ports for local clusters (`hetsched up`, chaos, tests).
//!
//! Why not bind port 0 and hand the number on: such a port comes from the kernel's
//! ephemeral range, and between the probe closing it and the child process binding it, any
//! outgoing connection on the machine (a slave dialling a master) may take it as its source
//! port. The child then fails to bind, or binds one of its ports and dies on the next. On a
//! loaded machine the window is seconds wide. Ports below the ephemeral range are never
//! handed out to outgoing connections, so a port that binds here stays ours unless another
//! process picks the same number on purpose; the per-process starting point makes that
//! unlikely and the bind check catches the rest.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// First port we hand out.
const LOW: u32 = 20_000;
/// One past the last; Linux's default ephemeral range starts at 32768.
const HIGH: u32 = 32_700;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A loopback TCP port, below the ephemeral range, that was free a moment ago.
/// Successive calls in one process return distinct ports. `None` only when every port in
/// the range is taken.
pub fn pick_local_port() -> Option<u16> {
    let span = HIGH - LOW;
    // Spread processes over the range so concurrent test binaries rarely probe the same ports.
    let start = (std::process::id().wrapping_mul(7919)) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOW + (start + step) % span;
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return Some(port as u16);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test, not two: tests run in parallel threads and share the picker, so a port one
    // test holds could be the very port another just picked.
    #[test]
    fn ports_are_distinct_outside_the_ephemeral_range_and_skip_taken_ones() {
        let a = pick_local_port().expect("a port");
        let b = pick_local_port().expect("another port");
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((LOW..HIGH).contains(&(p as u32)), "{p} out of range");
        }
        // Hold the next candidate so the picker must step over it.
        let next = LOW + (b as u32 - LOW + 1) % (HIGH - LOW);
        let hold = TcpListener::bind(("127.0.0.1", next as u16));
        let c = pick_local_port().expect("a third port");
        if hold.is_ok() {
            assert_ne!(c as u32, next, "picked a port that is held");
        }
        assert!(
            TcpListener::bind(("127.0.0.1", c)).is_ok(),
            "{c} not bindable"
        );
    }
}
