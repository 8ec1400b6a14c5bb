//! S0 — API programs, parameter scale, the engine selection table (S0.5) and the
//! task–engine relation (S0.1); see `docs/DESIGN.md` §S0.
//!
//! A heterogeneous application is a sequence of API calls ([`Program`]); each call has one
//! interface and an implementation per engine kind. Everything here is plain data and pure
//! functions: the slave's runner and profiler, the master's replicated state and the CLI share
//! one definition of a program, of a call's **parameter scale** (the bytes its arguments
//! occupy) and its **scale bucket** (powers of two), of the selection table
//! `(api, bucket) → engines ranked`, and of the relation `task kind → (engine, total time)`
//! sorted ascending.
//!
//! ```text
//! program.toml ──parse──▶ Program ──calls──▶ (api, scale bytes) ──bucket──▶ (api, ⌈log2⌉)
//!                                                                    │
//!      profiler: time every (api, engine, bucket) ──▶ SelectionTable ─┤ lookup (nearest bucket)
//!                                                                    ▼
//!      all slaves' tables + a program's kind ──▶ relation: [(engine, Σ time)] ascending
//! ```

use crate::EngineKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// Most calls one program may hold.
pub const MAX_CALLS: usize = 1024;
/// Largest `n` of a `gemm` call (two n×n f32 inputs and one output: 12·n² bytes = 48 MiB).
pub const MAX_GEMM_N: u64 = 2048;
/// Largest `items` of a `sort` call (8 bytes each: 128 MiB).
pub const MAX_SORT_ITEMS: u64 = 1 << 24;
/// Largest `bytes` of a `sha256` or `compress` call (128 MiB).
pub const MAX_BYTES: u64 = 1 << 27;

/// The env key of an assignment that carries a program to the slave (the program as JSON).
/// A program task runs in the slave's process; this key never reaches a child's environment.
pub const PROGRAM_ENV: &str = "HETSCHED_PROGRAM";
/// The argv of a program task (a marker: program tasks run no command).
pub const PROGRAM_COMMAND: &str = "hetsched:program";

/// The APIs a program may call. Each has a built-in CPU kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `n`×`n` f32 matrix product (`n`, `seed`).
    Gemm,
    /// Sort of `items` u64 (`items`, `seed`).
    Sort,
    /// SHA-256 of `bytes` bytes (`bytes`, `seed`).
    Sha256,
    /// Deflate of `bytes` bytes of text-like data (`bytes`, `seed`).
    Compress,
}

impl Api {
    /// Every API, in a fixed order.
    pub const ALL: [Api; 4] = [Api::Gemm, Api::Sort, Api::Sha256, Api::Compress];

    /// Lowercase name, as in programs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Gemm => "gemm",
            Api::Sort => "sort",
            Api::Sha256 => "sha256",
            Api::Compress => "compress",
        }
    }

    /// The argument that sets the call's size.
    pub fn size_arg(self) -> &'static str {
        match self {
            Api::Gemm => "n",
            Api::Sort => "items",
            Api::Sha256 | Api::Compress => "bytes",
        }
    }

    /// Largest accepted value of [`size_arg`](Self::size_arg).
    pub fn max_size(self) -> u64 {
        match self {
            Api::Gemm => MAX_GEMM_N,
            Api::Sort => MAX_SORT_ITEMS,
            Api::Sha256 | Api::Compress => MAX_BYTES,
        }
    }

    /// Parameter scale in bytes for a size: gemm 12·n², sort 8·items, sha256 and compress
    /// `bytes` (saturating; at least 1).
    pub fn scale_of(self, size: u64) -> u64 {
        let s = match self {
            Api::Gemm => size.saturating_mul(size).saturating_mul(12),
            Api::Sort => size.saturating_mul(8),
            Api::Sha256 | Api::Compress => size,
        };
        s.max(1)
    }

    /// The size whose scale is closest to `2^bucket` from below (at least 1): what the
    /// profiler runs for a bucket.
    pub fn size_for_bucket(self, bucket: u32) -> u64 {
        let target = 1u64 << bucket.min(62);
        match self {
            Api::Gemm => ((target / 12) as f64).sqrt().floor().max(1.0) as u64,
            Api::Sort => (target / 8).max(1),
            Api::Sha256 | Api::Compress => target,
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Api {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        Api::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| crate::Error::Invalid {
                what: "api",
                why: format!("{s:?} is not one of gemm, sort, sha256, compress"),
            })
    }
}

/// The scale bucket of a parameter scale: the smallest `k` with `2^k ≥ bytes` (bucket `k`
/// holds scales in `(2^(k-1), 2^k]`; bucket 0 holds 0 and 1).
pub fn scale_bucket(bytes: u64) -> u32 {
    if bytes <= 1 {
        0
    } else {
        64 - (bytes - 1).leading_zeros()
    }
}

/// One API call of a program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiCall {
    /// Which API.
    pub api: Api,
    /// Arguments: the size argument ([`Api::size_arg`]) and an optional `seed`.
    #[serde(default)]
    pub args: BTreeMap<String, u64>,
}

impl ApiCall {
    /// A call with a size and a seed.
    pub fn new(api: Api, size: u64, seed: u64) -> Self {
        Self {
            api,
            args: BTreeMap::from([(api.size_arg().to_string(), size), ("seed".into(), seed)]),
        }
    }

    /// The size argument (0 when missing: [`validate`](Self::validate) refuses that).
    pub fn size(&self) -> u64 {
        self.args.get(self.api.size_arg()).copied().unwrap_or(0)
    }

    /// The seed of the call's input data (default 0).
    pub fn seed(&self) -> u64 {
        self.args.get("seed").copied().unwrap_or(0)
    }

    /// Parameter scale in bytes.
    pub fn scale(&self) -> u64 {
        self.api.scale_of(self.size())
    }

    /// Scale bucket.
    pub fn bucket(&self) -> u32 {
        scale_bucket(self.scale())
    }

    /// Checks arguments: the size argument present in `1..=max`, nothing but it and `seed`.
    pub fn validate(&self) -> Result<(), String> {
        let size_arg = self.api.size_arg();
        for k in self.args.keys() {
            if k != size_arg && k != "seed" {
                return Err(format!(
                    "{}: unknown argument {k:?} (expected {size_arg} and optionally seed)",
                    self.api
                ));
            }
        }
        let size = self
            .args
            .get(size_arg)
            .copied()
            .ok_or_else(|| format!("{}: missing argument {size_arg}", self.api))?;
        let max = self.api.max_size();
        if size == 0 || size > max {
            return Err(format!(
                "{}: {size_arg} = {size} is outside 1..={max} (the per-call cap)",
                self.api
            ));
        }
        Ok(())
    }
}

/// A program: API calls run in order, each on the best available engine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// The calls (`[[call]]` in TOML).
    #[serde(rename = "call", default)]
    pub calls: Vec<ApiCall>,
}

impl Program {
    /// Checks the program: 1..=[`MAX_CALLS`] calls, each valid.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |why: String| crate::Error::Invalid {
            what: "program",
            why,
        };
        if self.calls.is_empty() {
            return Err(bad("a program needs at least one [[call]]".into()));
        }
        if self.calls.len() > MAX_CALLS {
            return Err(bad(format!(
                "{} calls exceed the cap of {MAX_CALLS} per task",
                self.calls.len()
            )));
        }
        for (i, c) in self.calls.iter().enumerate() {
            c.validate().map_err(|e| bad(format!("call {i}: {e}")))?;
        }
        Ok(())
    }

    /// The program's task kind (S0.1): the multiset of (api, scale bucket).
    pub fn kind(&self) -> TaskKind {
        let mut parts: BTreeMap<(Api, u32), u32> = BTreeMap::new();
        for c in &self.calls {
            *parts.entry((c.api, c.bucket())).or_insert(0) += 1;
        }
        TaskKind(
            parts
                .into_iter()
                .map(|((api, bucket), count)| KindPart { api, bucket, count })
                .collect(),
        )
    }
}

/// Parses a program file's text (TOML, `[[call]]` tables). Errors name the file, line,
/// column and field.
pub fn parse_program(text: &str, origin: &str) -> crate::Result<Program> {
    let p: Program = toml::from_str(text).map_err(|e| crate::Error::Invalid {
        what: "program",
        why: toml_error(origin, text, &e),
    })?;
    p.validate().map_err(|e| match e {
        crate::Error::Invalid { why, .. } => crate::Error::Invalid {
            what: "program",
            why: format!("{origin}: {why}"),
        },
        e => e,
    })?;
    Ok(p)
}

/// Reads and parses a program file.
pub fn read_program(path: &Path) -> crate::Result<Program> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::Invalid {
        what: "program",
        why: format!("cannot read {}: {e}", path.display()),
    })?;
    parse_program(&text, &path.display().to_string())
}

/// A TOML error as `FILE:LINE:COLUMN: message` (1-based).
pub fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("{origin}:{line}:{col}: {msg}")
        }
        None => format!("{origin}: {msg}"),
    }
}

/// One part of a task kind: `count` calls of `api` in scale bucket `bucket`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KindPart {
    /// API.
    pub api: Api,
    /// Scale bucket.
    pub bucket: u32,
    /// Calls.
    pub count: u32,
}

/// A task kind (S0.1): a program's multiset of (api, scale bucket), in (api, bucket) order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskKind(pub Vec<KindPart>);

impl fmt::Display for TaskKind {
    /// `gemm@2^20x1+sort@2^13x2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            write!(f, "{}@2^{}x{}", p.api, p.bucket, p.count)?;
        }
        Ok(())
    }
}

/// One engine's measured (or modelled) time for one (api, bucket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineTime {
    /// Engine kind.
    pub engine: EngineKind,
    /// Time of one call, µs (modelled for an emulated engine: CPU time / speed).
    pub time_us: u64,
    /// True when the engine is emulated.
    #[serde(default)]
    pub emulated: bool,
}

/// One row of the selection table: engines ranked fastest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRow {
    /// API.
    pub api: Api,
    /// Scale bucket.
    pub bucket: u32,
    /// Engines, fastest first (ties: engine kind order).
    pub ranked: Vec<EngineTime>,
}

/// The engine selection table (S0.5): (api, scale bucket) → engines ranked. Rows are kept
/// in (api, bucket) order; a lookup between or beyond profiled buckets takes the nearest
/// profiled bucket of that API (ties to the larger).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionTable {
    /// Rows in (api, bucket) order.
    #[serde(default)]
    pub rows: Vec<TableRow>,
}

impl SelectionTable {
    /// Records a time (replacing an earlier one of the same engine) and keeps rows sorted
    /// and ranked.
    pub fn record(&mut self, api: Api, bucket: u32, t: EngineTime) {
        let i = match self
            .rows
            .binary_search_by(|r| (r.api, r.bucket).cmp(&(api, bucket)))
        {
            Ok(i) => i,
            Err(i) => {
                self.rows.insert(
                    i,
                    TableRow {
                        api,
                        bucket,
                        ranked: Vec::new(),
                    },
                );
                i
            }
        };
        let row = &mut self.rows[i];
        row.ranked.retain(|e| e.engine != t.engine);
        row.ranked.push(t);
        row.ranked.sort_by_key(|e| (e.time_us, e.engine));
    }

    /// The ranking for (api, bucket): the exact row, else the nearest profiled bucket of
    /// that API (ties to the larger bucket); `None` when the API was never profiled.
    pub fn lookup(&self, api: Api, bucket: u32) -> Option<&TableRow> {
        self.rows
            .iter()
            .filter(|r| r.api == api)
            .min_by_key(|r| (r.bucket.abs_diff(bucket), std::cmp::Reverse(r.bucket)))
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// One engine kind's total time for a task kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineTotal {
    /// Engine kind.
    pub engine: EngineKind,
    /// Σ over the kind's calls of the engine's time, µs.
    pub total_us: u64,
}

/// The task–engine relation of one task kind (S0.1): engines that can run every call of the
/// kind, by total time ascending (ties: engine kind order). For each (api, bucket) an
/// engine's time is the fastest any slave's table reports for it at the nearest profiled
/// bucket; an engine without a time for some call of the kind is left out.
pub fn relation<'a>(
    kind: &TaskKind,
    tables: impl IntoIterator<Item = &'a SelectionTable> + Clone,
) -> Vec<EngineTotal> {
    let mut totals = Vec::new();
    'engines: for engine in EngineKind::ALL {
        let mut sum: u64 = 0;
        for part in &kind.0 {
            let best = tables
                .clone()
                .into_iter()
                .filter_map(|t| t.lookup(part.api, part.bucket))
                .filter_map(|row| row.ranked.iter().find(|e| e.engine == engine))
                .map(|e| e.time_us)
                .min();
            match best {
                Some(t) => sum = sum.saturating_add(t.saturating_mul(u64::from(part.count))),
                None => continue 'engines,
            }
        }
        totals.push(EngineTotal {
            engine,
            total_us: sum,
        });
    }
    totals.sort_by_key(|e| (e.total_us, e.engine));
    totals
}

/// What one call did, kept with the task's output on its slave (`hetsched calls`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Position in the program.
    pub index: u32,
    /// API.
    pub api: Api,
    /// Engine that produced the result.
    pub engine: EngineKind,
    /// Node (slave name) that ran it.
    pub node: String,
    /// Duration, ms (modelled for an emulated engine).
    pub duration_ms: f64,
    /// True when the call was forwarded to and ran on another node (S0.6; `node` names it).
    pub forwarded: bool,
    /// True when the engine is emulated.
    pub emulated: bool,
    /// SHA-256 of the output, hex.
    pub digest: String,
    /// Parameter scale, bytes.
    #[serde(default)]
    pub scale_bytes: u64,
    /// When a plug-in failed or timed out and the CPU kernel ran instead: the engine tried.
    #[serde(default)]
    pub fallback_from: Option<EngineKind>,
    /// Why the fallback happened.
    #[serde(default)]
    pub error: Option<String>,
    /// A forwarded call's transfer as the caller measured it (S0.6); `None` for a call run
    /// where its program runs.
    #[serde(default)]
    pub transfer: Option<Transfer>,
    /// The result checked against the CPU kernel's (`slave --check-results`): `None`
    /// (`null`) where no check ran.
    #[serde(default)]
    pub check: Option<ResultCheck>,
}

/// How a call's result compared with the CPU kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultCheck {
    /// `exact` (same bytes: sort, sha256, compress) or `tolerance` (gemm's floats).
    pub kind: CheckKind,
    /// Relative Frobenius error ‖C − C_ref‖ / ‖C_ref‖ for `tolerance`; for `exact` 0 when
    /// the bytes are equal, else 1.
    pub rel_err: f64,
    /// Whether the result passed (`rel_err` ≤ [`GEMM_TOLERANCE`], or equal bytes).
    pub ok: bool,
}

/// The kind of a [`ResultCheck`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckKind {
    /// Byte for byte (by digest).
    Exact,
    /// Within [`GEMM_TOLERANCE`] relative Frobenius error.
    Tolerance,
}

/// The largest relative Frobenius error a float result (gemm) may have against the CPU
/// kernel's (TF32 off on a GPU).
pub const GEMM_TOLERANCE: f64 = 1e-4;

/// The bytes a forwarded call moved and the time they took (S0.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// Argument bytes sent to the peer.
    pub arg_bytes: u64,
    /// Result bytes written back.
    pub result_bytes: u64,
    /// The call's time less the peer's service time, µs: what the bytes took on the link
    /// (one round trip included).
    pub transfer_us: u64,
    /// The round trip measured when connecting, µs.
    pub rtt_us: u64,
}

/// Per-engine call counts (a fixed array so summaries stay `Copy`); serialised as a map
/// `{kind: n}` holding the non-zero counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BTreeMap<EngineKind, u32>", into = "BTreeMap<EngineKind, u32>")]
pub struct EngineCounts(pub [u32; 6]);

impl EngineCounts {
    fn slot(kind: EngineKind) -> usize {
        EngineKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
    }

    /// Adds one call on `kind`.
    pub fn add(&mut self, kind: EngineKind) {
        self.0[Self::slot(kind)] += 1;
    }

    /// Calls on `kind`.
    pub fn get(&self, kind: EngineKind) -> u32 {
        self.0[Self::slot(kind)]
    }
}

impl From<BTreeMap<EngineKind, u32>> for EngineCounts {
    fn from(m: BTreeMap<EngineKind, u32>) -> Self {
        let mut c = EngineCounts::default();
        for (k, n) in m {
            c.0[Self::slot(k)] = n;
        }
        c
    }
}

impl From<EngineCounts> for BTreeMap<EngineKind, u32> {
    fn from(c: EngineCounts) -> Self {
        EngineKind::ALL
            .into_iter()
            .zip(c.0)
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// A program task's calls in brief (`tasks --json` `"calls"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSummary {
    /// Calls run.
    pub total: u32,
    /// Calls run on another node.
    pub forwarded: u32,
    /// Calls by engine kind.
    pub by_engine: EngineCounts,
}

impl CallSummary {
    /// The summary of a task's call records.
    pub fn of(records: &[CallRecord]) -> Self {
        let mut s = CallSummary::default();
        for r in records {
            s.total += 1;
            s.forwarded += u32::from(r.forwarded);
            s.by_engine.add(r.engine);
        }
        s
    }
}

/// An engine a slave declares (`nodes --json` `"engines"`, and in its profile record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineDecl {
    /// Kind.
    pub kind: EngineKind,
    /// Units.
    pub count: u32,
    /// True when emulated.
    pub emulated: bool,
}

#[cfg(test)]
#[path = "program_tests.rs"]
mod tests;
