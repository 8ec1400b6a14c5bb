//! The values `#SBATCH` options take, read as Slurm reads them: times, memory sizes, GPU
//! requests, job arrays, dependencies and `--export` lists. Each parser returns a message
//! that names what is wrong; the caller adds where it was written.

use std::collections::BTreeSet;

/// Most tasks one array may have (the job's task limit).
pub const MAX_ARRAY_TASKS: usize = crate::spec::MAX_TASKS_PER_JOB as usize;

/// A time limit (`-t/--time`) in ms; `None`: no limit (`0`, `UNLIMITED`, `INFINITE`, `-1`).
///
/// Slurm's formats: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
pub fn time_limit_ms(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim();
    if matches!(
        t.to_ascii_uppercase().as_str(),
        "UNLIMITED" | "INFINITE" | "-1"
    ) {
        return Ok(None);
    }
    let bad =
        || format!("{s:?} is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)");
    let num = |p: &str| -> Result<u64, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse::<u64>().map_err(|_| bad())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, t),
    };
    let parts = rest
        .split(':')
        .map(num)
        .collect::<Result<Vec<u64>, String>>()?;
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => m.checked_mul(60),
        (None, [m, s]) => m.checked_mul(60).and_then(|v| v.checked_add(*s)),
        (None, [h, m, s]) => hms(*h, *m, *s),
        (Some(d), [h]) => hms(*h, 0, 0).and_then(|v| v.checked_add(d.checked_mul(86_400)?)),
        (Some(d), [h, m]) => hms(*h, *m, 0).and_then(|v| v.checked_add(d.checked_mul(86_400)?)),
        (Some(d), [h, m, s]) => hms(*h, *m, *s).and_then(|v| v.checked_add(d.checked_mul(86_400)?)),
        _ => return Err(bad()),
    }
    .ok_or_else(|| format!("{s:?} is too long a time"))?;
    if secs == 0 {
        // Slurm: "a time limit of zero requests that no time limit be imposed".
        return Ok(None);
    }
    secs.checked_mul(1000)
        .map(Some)
        .ok_or_else(|| format!("{s:?} is too long a time"))
}

fn hms(h: u64, m: u64, s: u64) -> Option<u64> {
    h.checked_mul(3600)?
        .checked_add(m.checked_mul(60)?)?
        .checked_add(s)
}

/// A memory size (`--mem`) in MiB: a whole number with an optional `K`, `M` (the default),
/// `G` or `T` suffix; kibibytes round up to a whole MiB.
pub fn mem_mib(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("{s:?} is not a memory size like 512M, 2G or 1T");
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let mib = match unit.to_ascii_uppercase().as_str() {
        "K" | "KB" => Some(n.div_ceil(1024)),
        "" | "M" | "MB" => Some(n),
        "G" | "GB" => n.checked_mul(1024),
        "T" | "TB" => n.checked_mul(1024 * 1024),
        _ => return Err(bad()),
    };
    let mib = mib.ok_or_else(|| format!("{s:?} is too large"))?;
    crate::jobfile::check_mem(mib)
}

/// GPUs asked with `--gres=gpu[:TYPE][:N]` or `--gpus=[TYPE:]N`: the count and the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuAsk {
    /// Whole devices.
    pub count: u32,
    /// The model (`a100`), if one was named.
    pub model: Option<String>,
}

/// `--gpus`/`-G`: `N` or `TYPE:N`.
pub fn gpus(s: &str) -> Result<GpuAsk, String> {
    let t = s.trim();
    let (model, n) = match t.rsplit_once(':') {
        Some((m, n)) => (Some(m), n),
        None => (None, t),
    };
    let count = gpu_count(n, s)?;
    Ok(GpuAsk {
        count,
        model: model.map(model_name).transpose()?,
    })
}

/// `--gres`: a comma list of `NAME[:TYPE][:N]`; the `gpu` entry is returned and every
/// other one (which hetsched does not track) is named in the second value.
pub fn gres(s: &str) -> Result<(Option<GpuAsk>, Vec<String>), String> {
    let mut gpu = None;
    let mut other = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut parts = entry.split(':');
        let name = parts.next().unwrap_or_default();
        // A "gres/gpu" spelling is accepted as Slurm's TRES name.
        if name != "gpu" && name != "gres/gpu" {
            other.push(entry.to_string());
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let ask = match rest.as_slice() {
            [] => GpuAsk {
                count: 1,
                model: None,
            },
            [n] if n.bytes().all(|b| b.is_ascii_digit()) => GpuAsk {
                count: gpu_count(n, s)?,
                model: None,
            },
            [m] => GpuAsk {
                count: 1,
                model: Some(model_name(m)?),
            },
            [m, n] => GpuAsk {
                count: gpu_count(n, s)?,
                model: Some(model_name(m)?),
            },
            _ => return Err(format!("{entry:?} is not gpu[:TYPE][:N]")),
        };
        if gpu.replace(ask).is_some() {
            return Err(format!("{s:?} names gpu twice"));
        }
    }
    Ok((gpu, other))
}

fn gpu_count(n: &str, whole: &str) -> Result<u32, String> {
    let count: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{whole:?}: {n:?} is not a whole number of GPUs"))?;
    if count == 0 || count > crate::MAX_GPUS_PER_TASK {
        return Err(format!(
            "{whole:?}: {count} GPUs is outside 1..={}",
            crate::MAX_GPUS_PER_TASK
        ));
    }
    Ok(count)
}

fn model_name(m: &str) -> Result<String, String> {
    let m = m.trim();
    if m.is_empty() || m.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{m:?} is not a GPU type"));
    }
    Ok(m.to_string())
}

/// A job array (`-a/--array`): its task ids, ascending and distinct, and the `%N` throttle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    /// The array task ids (`SLURM_ARRAY_TASK_ID` of each task, by task index).
    pub ids: Vec<u32>,
    /// At most this many tasks assigned or running at once.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// `Some((first, step))` when the ids are `first + index × step`, so a task can compute
    /// its id from its index without a list.
    pub fn progression(&self) -> Option<(u32, u32)> {
        let first = *self.ids.first()?;
        let step = match self.ids.get(1) {
            Some(second) => second - first,
            None => 1,
        };
        let evenly = self.ids.windows(2).all(|w| w[1] - w[0] == step);
        evenly.then_some((first, step))
    }
}

/// `0-15`, `1,3,5`, `0-99:2`, any comma list of those, with an optional `%N` throttle.
pub fn array(s: &str) -> Result<ArraySpec, String> {
    let t = s.trim();
    let (list, throttle) = match t.split_once('%') {
        Some((l, n)) => {
            let n: u32 = n
                .trim()
                .parse()
                .map_err(|_| format!("{s:?}: the throttle after % must be a whole number"))?;
            if n == 0 {
                return Err(format!("{s:?}: the throttle after % must be at least 1"));
            }
            (l, Some(n))
        }
        None => (t, None),
    };
    let id = |p: &str| -> Result<u32, String> {
        p.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?}: {p:?} is not an array index"))
    };
    let mut ids = BTreeSet::new();
    for part in list.split(',') {
        if part.trim().is_empty() {
            return Err(format!("{s:?} has an empty element"));
        }
        let (range, step) = match part.split_once(':') {
            Some((r, st)) => (r, id(st)?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("{s:?}: a step of 0"));
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (id(a)?, id(b)?),
            None => (id(range)?, id(range)?),
        };
        if lo > hi {
            return Err(format!("{s:?}: range {lo}-{hi} runs backwards"));
        }
        let mut i = lo;
        loop {
            ids.insert(i);
            if ids.len() > MAX_ARRAY_TASKS {
                return Err(format!(
                    "{s:?} has more than {MAX_ARRAY_TASKS} tasks, the most one job may have"
                ));
            }
            match i.checked_add(step) {
                Some(next) if next <= hi => i = next,
                _ => break,
            }
        }
    }
    Ok(ArraySpec {
        ids: ids.into_iter().collect(),
        max_running: throttle,
    })
}

/// One term of `-d/--dependency`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyTerm {
    /// `afterok:ID[:ID…]`: start once each succeeded.
    AfterOk(Vec<u64>),
    /// `afterany:ID[:ID…]`: once each ended in any state.
    AfterAny(Vec<u64>),
    /// `afternotok:ID[:ID…]`: once each failed or was cancelled.
    AfterNotOk(Vec<u64>),
    /// `aftercorr:ID`: array task *i* once task *i* of ID succeeded.
    AfterCorr(u64),
    /// `singleton`: at most one job of this (user, name) assigned or running at a time.
    Singleton,
}

/// `-d/--dependency`: its terms, and whether any one of them suffices (`?`) rather than all
/// (`,`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The terms in the order written.
    pub terms: Vec<DependencyTerm>,
    /// Written with `?`: the job may start once any one term is met.
    pub any_of: bool,
}

/// Parses `afterok:12:13,afterany:14`, `afterok:12?afternotok:13`, `singleton`.
pub fn dependency(s: &str) -> Result<Dependency, String> {
    let t = s.trim();
    if t.contains(',') && t.contains('?') {
        return Err(format!(
            "{s:?} mixes ',' (all of) and '?' (any of); Slurm allows one of them"
        ));
    }
    let any_of = t.contains('?');
    let mut terms = Vec::new();
    for term in t.split([',', '?']).map(str::trim) {
        if term == "singleton" {
            terms.push(DependencyTerm::Singleton);
            continue;
        }
        let mut parts = term.split(':');
        let kind = parts.next().unwrap_or_default();
        let ids = parts
            .map(|p| job_id(p, s))
            .collect::<Result<Vec<u64>, String>>()?;
        if ids.is_empty() {
            return Err(format!("{s:?}: {term:?} names no job (write {kind}:ID)"));
        }
        terms.push(match kind {
            "afterok" => DependencyTerm::AfterOk(ids),
            "afterany" => DependencyTerm::AfterAny(ids),
            "afternotok" => DependencyTerm::AfterNotOk(ids),
            "aftercorr" => match ids.as_slice() {
                [one] => DependencyTerm::AfterCorr(*one),
                _ => {
                    return Err(format!(
                        "{s:?}: aftercorr pairs with one array job (write aftercorr:ID)"
                    ))
                }
            },
            "after" => {
                return Err(format!(
                    "{s:?}: 'after' (once the job started) is not supported; use afterany or afterok"
                ))
            }
            other => {
                return Err(format!(
                    "{s:?}: unknown dependency type {other:?} (afterok, afterany, afternotok, aftercorr, singleton)"
                ))
            }
        });
    }
    Ok(Dependency { terms, any_of })
}

fn job_id(p: &str, whole: &str) -> Result<u64, String> {
    if p.contains('+') {
        return Err(format!(
            "{whole:?}: a delay after a job ({p:?}) is not supported"
        ));
    }
    if p.contains('_') {
        return Err(format!(
            "{whole:?}: {p:?} names one array task; hetsched depends on whole jobs (or use aftercorr)"
        ));
    }
    p.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{whole:?}: {p:?} is not a job id"))
}

/// What `--export` sends of the submitting shell's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// `ALL` (Slurm's default): every variable but credentials; otherwise only `names`.
    pub all: bool,
    /// Variables named to pass on (`--export=HOME,PATH`).
    pub names: Vec<String>,
    /// Variables set explicitly (`--export=ALL,SEED=3`).
    pub set: Vec<(String, String)>,
}

impl Default for Export {
    fn default() -> Self {
        Self {
            all: true,
            names: Vec::new(),
            set: Vec::new(),
        }
    }
}

/// `ALL`, `NONE`, `VAR[,VAR…]`, with `VAR=value` entries anywhere.
pub fn export(s: &str) -> Result<Export, String> {
    let mut e = Export {
        all: false,
        names: Vec::new(),
        set: Vec::new(),
    };
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item {
            "ALL" => e.all = true,
            "NONE" | "NIL" => {}
            _ => match item.split_once('=') {
                Some((k, v)) => e.set.push((var_name(k, s)?, v.to_string())),
                None => e.names.push(var_name(item, s)?),
            },
        }
    }
    Ok(e)
}

fn var_name(k: &str, whole: &str) -> Result<String, String> {
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(k.to_string())
    } else {
        Err(format!("{whole:?}: {k:?} is not a variable name"))
    }
}

/// True for a variable `--export=ALL` keeps back: our own token and anything named like a
/// credential, which would otherwise be copied into the job's spec for every reader of it.
pub fn is_credential(name: &str) -> bool {
    name == "HETSCHED_TOKEN"
        || ["_TOKEN", "_SECRET", "_PASSWORD", "_KEY"]
            .iter()
            .any(|end| name.ends_with(end))
}
