//! S3.6 — the node's memory bandwidth, measured at start where resctrl monitors it
//! (docs/DESIGN.md §S3.6), so that contention elimination works without
//! `slave --membw-total`.
//!
//! A short STREAM-like copy (two buffers larger than a last-level cache, copied back and
//! forth for a fraction of a second) while the root resctrl group's `mbm_total_bytes` are
//! read before and after: the node's total is what MBM counted per second during the copy
//! (the same counter the per-task probe reads, so the 75 % threshold compares like with
//! like), or the copy's own rate when MBM reported nothing. Only with a real resctrl probe:
//! emulated bandwidth stays opt-in (`--membw-total` given by hand), and the slave's log says
//! which it uses.

use std::path::Path;
use std::time::{Duration, Instant};

/// One domain's `mbm_total_bytes` text: its byte count, or `None` ("Unavailable", noise).
pub fn parse_mbm(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

/// The sum of the readable domain counts among `texts`, `None` when none is readable.
pub fn sum_mbm<'a>(texts: impl IntoIterator<Item = &'a str>) -> Option<u64> {
    let mut any = false;
    let mut total = 0u64;
    for t in texts {
        if let Some(v) = parse_mbm(t) {
            total = total.saturating_add(v);
            any = true;
        }
    }
    any.then_some(total)
}

/// MB/s from a byte count over `elapsed` (`None` for no time or no bytes).
pub fn rate_mbps(bytes: u64, elapsed: Duration) -> Option<f64> {
    let secs = elapsed.as_secs_f64();
    (secs > 0.0 && bytes > 0).then(|| bytes as f64 / secs / 1_000_000.0)
}

/// The root group's total bytes over every monitoring domain.
fn root_bytes(root: &Path) -> Option<u64> {
    let dirs = std::fs::read_dir(root.join("mon_data")).ok()?;
    let texts: Vec<String> = dirs
        .flatten()
        .filter_map(|d| std::fs::read_to_string(d.path().join("mbm_total_bytes")).ok())
        .collect();
    sum_mbm(texts.iter().map(String::as_str))
}

/// Copies between two buffers for about `duration`; returns the bytes moved (read and
/// written) and the time taken.
fn copy_test(duration: Duration) -> (u64, Duration) {
    const LEN: usize = 32 << 20; // 32 MiB each: beyond a last-level cache
    let mut a = vec![1u8; LEN];
    let mut b = vec![0u8; LEN];
    let start = Instant::now();
    let mut moved = 0u64;
    while start.elapsed() < duration {
        b.copy_from_slice(&a);
        std::hint::black_box(&b);
        a.copy_from_slice(&b);
        std::hint::black_box(&a);
        moved = moved.saturating_add(4 * LEN as u64);
    }
    (moved, start.elapsed())
}

/// The node's memory bandwidth in MB/s, measured through resctrl at `root` (`None`: no
/// resctrl monitoring there, or nothing measurable).
pub fn measure(root: &Path, duration: Duration) -> Option<f64> {
    if !(root.join("mon_data").is_dir() && root.join("info/L3_MON").is_dir()) {
        return None;
    }
    let before = root_bytes(root);
    let (moved, took) = copy_test(duration);
    let after = root_bytes(root);
    let counted = match (before, after) {
        (Some(b), Some(a)) => rate_mbps(a.saturating_sub(b), took),
        _ => None,
    };
    counted.or_else(|| rate_mbps(moved, took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbm_counts_parse_and_unavailable_domains_are_skipped() {
        assert_eq!(parse_mbm("123456\n"), Some(123_456));
        assert_eq!(parse_mbm("Unavailable\n"), None);
        assert_eq!(sum_mbm(["10\n", "Unavailable", "32"]), Some(42));
        assert_eq!(sum_mbm(["Unavailable", "x"]), None);
        assert_eq!(rate_mbps(2_000_000, Duration::from_secs(2)), Some(1.0));
        assert_eq!(rate_mbps(0, Duration::from_secs(1)), None);
        assert_eq!(rate_mbps(5, Duration::ZERO), None);
    }

    #[test]
    fn measures_from_a_resctrl_tree_and_not_without_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(measure(dir.path(), Duration::from_millis(10)), None);
        // A fake tree whose counters do not move: the copy's own rate is the answer.
        std::fs::create_dir_all(dir.path().join("info/L3_MON")).expect("mkdir");
        let d0 = dir.path().join("mon_data/mon_L3_00");
        std::fs::create_dir_all(&d0).expect("mkdir");
        std::fs::write(d0.join("mbm_total_bytes"), "1000\n").expect("write");
        let mbps = measure(dir.path(), Duration::from_millis(50)).expect("a rate");
        assert!(mbps > 1.0, "{mbps}");
    }
}
