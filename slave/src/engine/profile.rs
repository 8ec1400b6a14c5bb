//! S0.5 — the profiler: times every API on each engine at parameter scales in powers of
//! two and builds the engine selection table `(api, scale bucket) → engines ranked`
//! (docs/DESIGN.md §S0.5). CPU kernels are timed for real; an emulated engine's time is
//! modelled as CPU time / its speed; a plug-in is timed for real (a server plug-in warm: it
//! is started before its first timed call) and not labelled emulated, and its result is
//! checked against the CPU kernel's ([`super::check`]): one that fails, or fails its check,
//! is left out of that row.
//!
//! Buckets run from small to large, every API at one bucket before the next, and a bucket is
//! skipped once its estimated time (the last one times the growth of the kernel's cost)
//! would overrun the budget, so `--profile-budget` bounds the whole run.

use super::{check, kernels, plugin, EngineSet, Implementation};
use hetsched_common::program::{Api, ApiCall, EngineTime, SelectionTable};
use std::path::Path;
use std::time::{Duration, Instant};

/// What to profile.
#[derive(Clone, Copy, Debug)]
pub struct ProfileOptions {
    /// Wall-clock budget of the whole run.
    pub budget: Duration,
    /// Deadline of one plug-in call.
    pub call_timeout: Duration,
    /// First scale bucket (2^k bytes).
    pub min_bucket: u32,
    /// Last scale bucket.
    pub max_bucket: u32,
    /// Bucket step (2 profiles every other power of two).
    pub step: u32,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            min_bucket: 10,
            max_bucket: 26,
            step: 2,
        }
    }
}

/// How much a kernel's time grows from one bucket to the next (scale × 2).
fn growth(api: Api) -> f64 {
    match api {
        // n³ work for n² bytes.
        Api::Gemm => 2f64.powf(1.5),
        Api::Sort => 2.2,
        Api::Sha256 | Api::Compress => 2.0,
    }
}

/// Quick calls (under [`REPEAT_BELOW`]) run up to three times and keep the fastest, which
/// takes most scheduling noise out of small buckets.
const REPEAT_BELOW: Duration = Duration::from_millis(20);

fn min_time(mut f: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        if best >= REPEAT_BELOW {
            break;
        }
    }
    best
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// Profiles every engine of `set`. Pure computation plus the plug-ins it runs; reads the
/// clock (that is its job).
pub fn profile(set: &EngineSet, opts: ProfileOptions) -> SelectionTable {
    let start = Instant::now();
    let mut table = SelectionTable::default();
    let mut last: [Option<Duration>; 4] = [None; 4];
    let mut stopped = [false; 4];
    let step = opts.step.max(1);
    let mut bucket = opts.min_bucket;
    while bucket <= opts.max_bucket {
        for (i, api) in Api::ALL.into_iter().enumerate() {
            if stopped[i] {
                continue;
            }
            let left = opts.budget.saturating_sub(start.elapsed());
            // Time of the CPU kernel and every other implementation (at least as much again
            // for emulated ones is not spent: they are modelled).
            let estimate = last[i]
                .map(|t| t.mul_f64(growth(api).powi(step as i32)))
                .unwrap_or_default();
            let size = api.size_for_bucket(bucket);
            if left.is_zero() || estimate > left || size > api.max_size() {
                stopped[i] = true;
                continue;
            }
            let call = ApiCall::new(api, size, 1);
            let real_bucket = call.bucket();
            let mut reference = Vec::new();
            let cpu = min_time(|| reference = kernels::run(&call));
            last[i] = Some(cpu);
            for e in set.engines() {
                let time = match e.apis.get(&api) {
                    Some(Implementation::Cpu) => Some(cpu),
                    Some(Implementation::Emulated { speed }) => Some(cpu.div_f64(*speed)),
                    Some(Implementation::Plugin { exec, mode }) => {
                        time_plugin(set, exec, *mode, &call, &reference, opts.call_timeout)
                            .map_err(|why| tracing::warn!(engine = %e.kind, %api, %why, "plug-in failed while profiling; left out"))
                            .ok()
                    }
                    None => None,
                };
                if let Some(t) = time {
                    let plugin = matches!(e.apis.get(&api), Some(Implementation::Plugin { .. }));
                    table.record(
                        api,
                        real_bucket,
                        EngineTime {
                            engine: e.kind,
                            time_us: micros(t),
                            // A plug-in's time is measured, even on an emulated device.
                            emulated: e.emulated && !plugin,
                        },
                    );
                }
            }
        }
        if stopped.iter().all(|s| *s) {
            break;
        }
        bucket += step;
    }
    table
}

/// Times `call` on a plug-in (warm for a server: started by an untimed call first; the
/// fastest of up to three quick calls) and checks its result against the CPU kernel's
/// `reference`.
fn time_plugin(
    set: &EngineSet,
    exec: &Path,
    mode: plugin::PluginMode,
    call: &ApiCall,
    reference: &[u8],
    timeout: Duration,
) -> Result<Duration, String> {
    if mode == plugin::PluginMode::Server && !set.servers().is_warm(exec) {
        set.run_plugin(exec, mode, call, timeout)?;
    }
    let mut out = Ok(Vec::new());
    let t = min_time(|| {
        if out.is_ok() {
            out = set.run_plugin(exec, mode, call, timeout);
        }
    });
    let c = check::compare(call.api, &out?, reference);
    if !c.ok {
        return Err(format!(
            "its result fails the check against the CPU kernel ({:?}, rel_err {:e})",
            c.kind, c.rel_err
        ));
    }
    Ok(t)
}

/// Where a slave keeps its selection table.
pub fn table_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("selection-table.json")
}

/// Persists a table (write, fsync, rename).
pub fn save(table: &SelectionTable, path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(table).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The hash of an engines file as parsed (FNV-1a 64 of its canonical form, hex): a
/// persisted table is reused only while it matches.
pub fn engines_hash(file: &super::EnginesFile) -> String {
    let text = format!("engines-v1 {file:?}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Where a slave keeps the engines hash its table was profiled for.
fn hash_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("selection-table.engines-hash")
}

/// Persists the engines hash of the table just saved.
pub fn save_hash(data_dir: &Path, hash: &str) -> std::io::Result<()> {
    std::fs::write(hash_path(data_dir), hash)
}

/// The engines hash the persisted table was profiled for, if recorded.
pub fn load_hash(data_dir: &Path) -> Option<String> {
    std::fs::read_to_string(hash_path(data_dir))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Loads a persisted table; `None` when absent or unreadable (logged).
pub fn load(path: &Path) -> Option<SelectionTable> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "selection table unreadable; ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EnginesFile;
    use hetsched_common::EngineKind;

    #[test]
    fn the_engines_hash_follows_the_file_and_is_kept_beside_the_table() {
        let gpu = "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n";
        let faster = "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 9.0 }\n";
        let a = engines_hash(&EnginesFile::parse(gpu, "e.toml").expect("parses"));
        let again = engines_hash(&EnginesFile::parse(gpu, "e.toml").expect("parses"));
        let b = engines_hash(&EnginesFile::parse(faster, "e.toml").expect("parses"));
        let none = engines_hash(&EnginesFile::default());
        assert_eq!(a, again, "same file, same hash");
        assert_ne!(a, b, "a changed engine changes the hash");
        assert_ne!(a, none);
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(load_hash(dir.path()), None);
        save_hash(dir.path(), &a).expect("save");
        assert_eq!(load_hash(dir.path()), Some(a));
    }

    #[test]
    fn profile_ranks_a_fast_emulated_engine_first_and_stays_in_budget() {
        let f = EnginesFile::parse(
            "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
            "e.toml",
        )
        .expect("parses");
        let set = EngineSet::new(&f, 2, 1, true).expect("builds");
        let opts = ProfileOptions {
            budget: Duration::from_secs(3),
            max_bucket: 20,
            ..Default::default()
        };
        let t0 = Instant::now();
        let table = profile(&set, opts);
        // The budget bounds starting new measurements; one may run past it.
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        let gemm = table.lookup(Api::Gemm, 14).expect("gemm profiled");
        assert_eq!(gemm.ranked[0].engine, EngineKind::Gpu);
        assert!(gemm.ranked[0].emulated);
        let sort = table.lookup(Api::Sort, 14).expect("sort profiled");
        assert_eq!(sort.ranked.len(), 1, "only the CPU sorts");
        assert_eq!(sort.ranked[0].engine, EngineKind::Cpu);
        let dir = tempfile::tempdir().expect("tempdir");
        let p = table_path(dir.path());
        save(&table, &p).expect("save");
        assert_eq!(load(&p), Some(table));
    }

    #[test]
    fn cpu_profile_is_sane() {
        // Relative order only: a bigger sort costs more.
        let set = EngineSet::cpu_only(1);
        let table = profile(
            &set,
            ProfileOptions {
                // Generous: the estimate must not skip 2^20 on a loaded machine.
                budget: Duration::from_secs(600),
                min_bucket: 13,
                max_bucket: 23,
                step: 10,
                ..Default::default()
            },
        );
        let t = |b| {
            table
                .lookup(Api::Sort, b)
                .filter(|r| r.bucket == b)
                .map(|r| r.ranked[0].time_us)
        };
        // 2^10 items = 2^13 bytes; 2^20 items = 2^23 bytes.
        let (small, big) = (t(13).expect("2^10 items"), t(23).expect("2^20 items"));
        assert!(
            big > small,
            "sort 2^20 items {big} µs vs 2^10 items {small} µs"
        );
    }
}
