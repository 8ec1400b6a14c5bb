//! S3.6 — the node's memory bandwidth, measured by the slave at its first start
//! (docs/DESIGN.md §S3.6), so that contention elimination is on by default;
//! `slave --membw-total` only overrides it.
//!
//! A short STREAM-like **triad** (`a[i] = b[i] + s·c[i]` over f64 arrays, together larger
//! than the last-level cache, on every core of the host, for a fraction of a second): the
//! node's total is the triad's own rate (24 bytes per element: two reads, one write), or —
//! where resctrl monitors memory bandwidth — what the root group's `mbm_total_bytes`
//! counted per second during it (the same counter the per-task probe reads, so the 75 %
//! threshold compares like with like). A real measurement either way, persisted in
//! `DATA/membw-total.json` with how it was taken and reused on restart (`--reprofile`
//! measures again); `nodes --json` shows it as `"membw_total_mbps"` and
//! `"membw_total_source"`. Per-task bandwidth still comes from resctrl, or from the
//! emulated file (labelled) where the host has none.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the triad runs.
pub const TRIAD_TIME: Duration = Duration::from_millis(250);

/// The node's memory bandwidth and how it was obtained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MembwTotal {
    /// MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// `triad` (the triad's own rate), `resctrl` (MBM counted during the triad) or `flag`
    /// (`--membw-total`).
    pub source: String,
}

/// Where a slave keeps its measured total.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("membw-total.json")
}

/// The node's total: `flag` when given (not persisted); else the persisted measurement
/// unless `fresh`; else `measure()`'s, persisted (write, rename). `None` only when nothing
/// could be measured.
pub fn resolve(
    data_dir: &Path,
    flag: Option<f64>,
    fresh: bool,
    measure: impl FnOnce() -> Option<MembwTotal>,
) -> Option<MembwTotal> {
    if let Some(mbps) = flag {
        return Some(MembwTotal {
            mbps,
            source: "flag".into(),
        });
    }
    let file = path(data_dir);
    if !fresh {
        let kept = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<MembwTotal>(&b).ok())
            .filter(|m| m.mbps.is_finite() && m.mbps > 0.0);
        if let Some(m) = kept {
            tracing::info!(mbps = m.mbps, source = %m.source, "reusing the measured memory bandwidth");
            return Some(m);
        }
    }
    let mut m = measure()?;
    // Whole MB/s: what nodes --json shows, and it round-trips exactly.
    m.mbps = m.mbps.round().max(1.0);
    let tmp = file.with_extension("json.tmp");
    let saved = serde_json::to_vec(&m)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|()| std::fs::rename(&tmp, &file));
    if let Err(e) = saved {
        tracing::warn!(path = %file.display(), error = %e, "cannot persist the measured memory bandwidth");
    }
    Some(m)
}

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

/// The last-level cache's size, bytes (32 MiB when the host does not say).
fn llc_bytes() -> usize {
    let parse = |t: &str| {
        let t = t.trim();
        let (num, mult) = match t.strip_suffix('K') {
            Some(n) => (n, 1 << 10),
            None => match t.strip_suffix('M') {
                Some(n) => (n, 1 << 20),
                None => (t, 1),
            },
        };
        num.parse::<usize>().ok().map(|n| n * mult)
    };
    (0..8)
        .filter_map(|i| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size"))
                .ok()
        })
        .filter_map(|t| parse(&t))
        .max()
        .unwrap_or(32 << 20)
}

/// The triad on `threads` threads for about `duration` (at least one pass each) over
/// arrays of `total` bytes in all, timed from when every thread has its arrays; returns the
/// bytes moved (24 per element) and the time taken.
fn triad(threads: usize, total: usize, duration: Duration) -> (u64, Duration) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = threads.max(1);
    let per = (total / 24 / threads).max(1 << 16);
    let moved = AtomicU64::new(0);
    let ready = std::sync::Barrier::new(threads + 1);
    let took = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (moved, ready) = (&moved, &ready);
                s.spawn(move || {
                    let b = vec![1.0f64 + t as f64; per];
                    let c = vec![2.0f64; per];
                    let mut a = vec![0.0f64; per];
                    ready.wait();
                    let start = Instant::now();
                    loop {
                        for ((x, y), z) in a.iter_mut().zip(&b).zip(&c) {
                            *x = y + 3.0 * z;
                        }
                        std::hint::black_box(&mut a);
                        moved.fetch_add(24 * per as u64, Ordering::Relaxed);
                        if start.elapsed() >= duration {
                            break;
                        }
                    }
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        for w in workers {
            let _ = w.join();
        }
        start.elapsed()
    });
    (moved.into_inner(), took)
}

/// Measures the node's memory bandwidth: the triad on every core of the host over
/// arrays twice the last-level cache (64 MiB to 256 MiB in all), counted by resctrl's MBM
/// at `resctrl_root` where it monitors, else by the triad itself.
pub fn measure_node(resctrl_root: &Path, duration: Duration) -> Option<MembwTotal> {
    measure_over(
        resctrl_root,
        duration,
        (2 * llc_bytes()).clamp(64 << 20, 256 << 20),
    )
}

/// [`measure_node`] over arrays of `total` bytes.
fn measure_over(resctrl_root: &Path, duration: Duration, total: usize) -> Option<MembwTotal> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mbm = resctrl_root.join("mon_data").is_dir() && resctrl_root.join("info/L3_MON").is_dir();
    let before = mbm.then(|| root_bytes(resctrl_root)).flatten();
    let (moved, took) = triad(threads, total, duration);
    let after = mbm.then(|| root_bytes(resctrl_root)).flatten();
    let counted = match (before, after) {
        (Some(b), Some(a)) => rate_mbps(a.saturating_sub(b), took),
        _ => None,
    };
    match counted {
        Some(mbps) => Some(MembwTotal {
            mbps,
            source: "resctrl".into(),
        }),
        None => rate_mbps(moved, took).map(|mbps| MembwTotal {
            mbps,
            source: "triad".into(),
        }),
    }
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
    fn a_node_is_measured_once_then_reused_and_a_flag_overrides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let measured = std::cell::Cell::new(0);
        let measure = || {
            measured.set(measured.get() + 1);
            measure_over(dir.path(), Duration::from_millis(30), 8 << 20)
        };
        let first = resolve(dir.path(), None, false, measure).expect("measured");
        assert!(first.mbps > 0.0, "{first:?}");
        assert_eq!(
            first.source, "triad",
            "no resctrl here: the triad's own rate"
        );
        // A restart reuses it without measuring.
        let again = resolve(dir.path(), None, false, measure).expect("kept");
        assert_eq!((again, measured.get()), (first.clone(), 1));
        // --reprofile measures again; --membw-total overrides and is not kept.
        resolve(dir.path(), None, true, measure).expect("measured");
        assert_eq!(measured.get(), 2);
        let flag = resolve(dir.path(), Some(1234.0), false, measure).expect("flag");
        assert_eq!(
            (flag.mbps, flag.source.as_str(), measured.get()),
            (1234.0, "flag", 2)
        );
        let kept = resolve(dir.path(), None, false, || None).expect("still kept");
        assert_eq!(kept.source, "triad");
    }

    #[test]
    fn measures_from_a_resctrl_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A fake tree whose counters do not move: the triad's own rate is the answer.
        std::fs::create_dir_all(dir.path().join("info/L3_MON")).expect("mkdir");
        let d0 = dir.path().join("mon_data/mon_L3_00");
        std::fs::create_dir_all(&d0).expect("mkdir");
        std::fs::write(d0.join("mbm_total_bytes"), "1000\n").expect("write");
        let m = measure_over(dir.path(), Duration::from_millis(30), 8 << 20).expect("a rate");
        assert!(m.mbps > 1.0 && m.source == "triad", "{m:?}");
    }
}
