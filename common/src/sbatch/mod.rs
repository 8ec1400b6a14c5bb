//! Slurm batch scripts, read as `sbatch` reads them, made into a hetsched job
//! (`hetsched sbatch [OPTIONS] SCRIPT [ARGS…]`, docs/guide/slurm.md).
//!
//! A script's `#SBATCH` lines are read up to its first command line, as Slurm does; options
//! on the command line override them. The job runs the script unchanged: its text travels
//! in the job's environment, and a short POSIX shell prelude (also there, so the job's
//! command stays short in listings) writes it to a private file, sets the array task id,
//! sends output where `-o`/`-e` say (Slurm's `slurm-%j.out` by default) and runs it with
//! the script's own interpreter. Everything here is pure: the CLI passes the submitting
//! shell's directory, environment and user in.

mod options;
mod values;

#[cfg(test)]
mod tests;

pub use options::{takes_separate_value, Origin, SbatchOptions};
pub use values::{
    array, dependency, export, gpus, gres, is_credential, mem_mib, time_limit_ms, ArraySpec,
    Dependency, DependencyTerm, Export, GpuAsk,
};

use crate::{GpuRequest, JobId, JobSpec, ResourceRequest};
use std::collections::BTreeMap;
use std::path::Path;

/// The largest script `sbatch` carries (it travels in the job's environment, within the
/// kernel's limit for one entry).
pub const MAX_SCRIPT_BYTES: usize = crate::spec::MAX_ARG_BYTES - 64;

/// Why a script or its options were refused; shown with where it was written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{place}: {why}")]
pub struct SbatchError {
    /// `script.sh:3`, `script.sh` or `command line`.
    pub place: String,
    /// What is wrong.
    pub why: String,
}

/// What the submitting shell contributes: its directory, its environment (for
/// `--export`) and the user, when known (for `%u`).
#[derive(Clone, Debug, Default)]
pub struct SubmitContext {
    /// The directory `sbatch` ran in (`SLURM_SUBMIT_DIR`, the default working directory).
    pub cwd: String,
    /// The submitting shell's environment.
    pub env: Vec<(String, String)>,
    /// The submitting user, if the client knows it (empty: the master fills it in).
    pub user: String,
}

/// A script made into a job.
#[derive(Clone, Debug)]
pub struct SbatchJob {
    /// The job (`-d` in its `after…` keys, `--array=…%N` in its `max_running`).
    pub spec: JobSpec,
    /// `--parsable`.
    pub parsable: bool,
    /// `--json`.
    pub json: bool,
    /// One line per directive or option read but not applied.
    pub warnings: Vec<String>,
}

/// What `hetsched sbatch`'s arguments hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandLine {
    /// `--help` / `-h` before the script.
    Help,
    /// Options, the script and its arguments.
    Run {
        /// The options before the script.
        options: Vec<String>,
        /// The script's path.
        script: String,
        /// Everything after the script: its own arguments.
        args: Vec<String>,
    },
}

/// Splits `hetsched sbatch`'s arguments at the script: options come first (a value may be
/// the next argument), the first other word is the script, the rest are the script's.
pub fn split_command_line(args: &[String]) -> Result<CommandLine, SbatchError> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--help" || a == "-h" {
            return Ok(CommandLine::Help);
        }
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += if takes_separate_value(a) { 2 } else { 1 };
    }
    let options = args[..i.min(args.len())]
        .iter()
        .filter(|a| *a != "--")
        .cloned()
        .collect();
    match args.get(i) {
        Some(script) => Ok(CommandLine::Run {
            options,
            script: script.clone(),
            args: args[i + 1..].to_vec(),
        }),
        None => Err(SbatchError {
            place: "command line".into(),
            why: "give the batch script to run: hetsched sbatch [OPTIONS] SCRIPT [ARGS…]".into(),
        }),
    }
}

/// The `#SBATCH` lines of a script up to its first command line: (line number, words).
/// The first line must name an interpreter (`#!`), as Slurm requires.
pub fn directives(script: &str, text: &str) -> Result<Vec<(usize, Vec<String>)>, SbatchError> {
    let at = |line: Option<usize>, why: String| SbatchError {
        place: line.map_or_else(|| script.to_string(), |l| format!("{script}:{l}")),
        why,
    };
    if text.len() > MAX_SCRIPT_BYTES {
        return Err(at(
            None,
            format!(
                "the script is {} bytes, above the limit of {MAX_SCRIPT_BYTES}",
                text.len()
            ),
        ));
    }
    if text.contains('\0') {
        return Err(at(None, "the script contains a NUL byte".into()));
    }
    if !text.starts_with("#!") {
        return Err(at(
            Some(1),
            "this does not look like a batch script: the first line must start with #! and the path to an interpreter".into(),
        ));
    }
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("#SBATCH") {
            if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                continue; // `#SBATCHX`: a comment
            }
            let words = words(rest).map_err(|why| at(Some(n + 1), why))?;
            found.push((n + 1, words));
        } else if !(t.is_empty() || t.starts_with('#')) {
            break;
        }
    }
    Ok(found)
}

/// Splits a directive into words as a shell would (quotes, backslashes); an unquoted `#`
/// at the start of a word begins a comment.
fn words(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("a ' quote is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => cur.push(c),
                            None => return Err("a \" quote is not closed".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("a \" quote is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    cur.push(c);
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Reads the options of a script (`#SBATCH` lines) and of the command line (which win).
pub fn read_options(
    script: &str,
    text: &str,
    command_line: &[String],
) -> Result<(SbatchOptions, Vec<String>), SbatchError> {
    let mut from_script = SbatchOptions::default();
    let mut warnings = Vec::new();
    for (line, words) in directives(script, text)? {
        let (o, w) = options::parse(&words, Origin::Script(line)).map_err(|why| SbatchError {
            place: format!("{script}:{line}"),
            why,
        })?;
        warnings.extend(w.into_iter().map(|w| format!("{script}:{line}: {w}")));
        // A later line overrides an earlier one, as the command line overrides them all.
        from_script = o.over(from_script);
    }
    let (cli, w) =
        options::parse(command_line, Origin::CommandLine).map_err(|why| SbatchError {
            place: "command line".into(),
            why,
        })?;
    warnings.extend(w);
    Ok((cli.over(from_script), warnings))
}

/// Makes the job that runs `script` (its path as given, its text) with `args`.
pub fn job(
    script: &str,
    text: &str,
    command_line: &[String],
    args: &[String],
    ctx: &SubmitContext,
) -> Result<SbatchJob, SbatchError> {
    let (o, warnings) = read_options(script, text, command_line)?;
    let bad = |why: String| SbatchError {
        place: script.to_string(),
        why,
    };
    let name = o.job_name.clone().unwrap_or_else(|| {
        Path::new(script)
            .file_name()
            .map_or_else(|| "sbatch".into(), |f| f.to_string_lossy().into_owned())
    });
    let ntasks = o.ntasks.unwrap_or(1);
    let per_task = o.cpus_per_task.unwrap_or(1.0);
    // As in Slurm, the script runs once and holds every task's CPUs.
    let cpus = per_task * f64::from(ntasks);
    let cpus = crate::jobfile::check_cpus(cpus).map_err(|e| bad(format!("-n × -c: {e}")))?;
    let workdir = workdir(&ctx.cwd, o.chdir.as_deref());
    let count = o.array.as_ref().map_or(1, |a| a.ids.len() as u32);
    let mut env = exported_env(o.export.clone().unwrap_or_default(), &ctx.env);
    env.insert("SLURM_JOB_NAME".into(), name.clone());
    env.insert("SLURM_NTASKS".into(), ntasks.to_string());
    env.insert("SLURM_CPUS_PER_TASK".into(), shown_cpus(per_task));
    env.insert("SLURM_SUBMIT_DIR".into(), ctx.cwd.clone());
    if let Some(a) = &o.array {
        let (min, max) = (a.ids[0], a.ids[a.ids.len() - 1]);
        env.insert("SLURM_ARRAY_TASK_MIN".into(), min.to_string());
        env.insert("SLURM_ARRAY_TASK_MAX".into(), max.to_string());
        env.insert("SLURM_ARRAY_TASK_COUNT".into(), a.ids.len().to_string());
        if let Some((_, step)) = a.progression() {
            env.insert("SLURM_ARRAY_TASK_STEP".into(), step.to_string());
        }
    }
    env.insert("HETSCHED_SBATCH_SCRIPT".into(), text.to_string());
    env.insert("HETSCHED_SBATCH_PRELUDE".into(), prelude(&o, &ctx.user));
    let mut command = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        "eval \"$HETSCHED_SBATCH_PRELUDE\"".into(),
        script.to_string(),
    ];
    command.extend(args.iter().cloned());
    let gpu = o.gpus.as_ref().map_or_else(GpuRequest::none, |g| {
        let mut r = GpuRequest::whole(g.count);
        r.models = g.model.iter().cloned().collect();
        r
    });
    let spec = JobSpec {
        name,
        user: ctx.user.clone(),
        partition: o.partition.clone().unwrap_or_default(),
        resources: ResourceRequest {
            cpu_milli: (cpus * 1000.0).round() as u64,
            // `submit`'s default when `--mem` is not given.
            mem_mib: o.mem_mib.unwrap_or(crate::jobfile::DEFAULT_MEM_MIB),
            gpu,
            ..ResourceRequest::default()
        },
        count,
        command,
        env,
        timeout_ms: o.time_ms.flatten(),
        workdir: Some(workdir),
        ..JobSpec::default()
    };
    let mut spec = spec;
    if let Some(d) = &o.dependency {
        follow(&mut spec, d).map_err(|why| bad(format!("--dependency: {why}")))?;
    }
    spec.max_running = o.array.as_ref().and_then(|a| a.max_running);
    spec.validate().map_err(|e| bad(e.to_string()))?;
    spec.check_limits().map_err(|e| bad(e.to_string()))?;
    Ok(SbatchJob {
        spec,
        parsable: o.parsable,
        json: o.json,
        warnings,
    })
}

/// Slurm's dependency terms as the job's keys: `afterok` → `after`, `afterany` →
/// `after_any`, `afternotok` → `after_fail`, `aftercorr` → `after_each`, `singleton`; `?`
/// (any of) → `after_mode = any`.
fn follow(spec: &mut JobSpec, d: &Dependency) -> Result<(), String> {
    for term in &d.terms {
        match term {
            DependencyTerm::AfterOk(ids) => spec.after.extend(ids.iter().map(|i| JobId(*i))),
            DependencyTerm::AfterAny(ids) => spec.after_any.extend(ids.iter().map(|i| JobId(*i))),
            DependencyTerm::AfterNotOk(ids) => {
                spec.after_fail.extend(ids.iter().map(|i| JobId(*i)))
            }
            DependencyTerm::AfterCorr(id) => {
                if spec.after_each.replace(JobId(*id)).is_some() {
                    return Err("aftercorr may name one job only".into());
                }
            }
            DependencyTerm::Singleton => spec.singleton = true,
        }
    }
    if d.any_of {
        spec.after_mode = crate::AfterMode::Any;
    }
    Ok(())
}

fn shown_cpus(c: f64) -> String {
    if c.fract() == 0.0 {
        format!("{}", c as u64)
    } else {
        format!("{c}")
    }
}

/// `--chdir` against the submit directory (Slurm's default working directory).
fn workdir(cwd: &str, chdir: Option<&str>) -> String {
    match chdir {
        Some(d) if Path::new(d).is_absolute() => d.to_string(),
        Some(d) => Path::new(cwd).join(d).to_string_lossy().into_owned(),
        None => cwd.to_string(),
    }
}

/// Variables the slave sets for each task (or that describe the submitting shell rather
/// than the job): never copied from the submitting shell.
fn set_per_task(name: &str) -> bool {
    name.starts_with("SLURM_")
        || matches!(
            name,
            "PWD"
                | "OLDPWD"
                | "SHLVL"
                | "_"
                | "HETSCHED_JOB_ID"
                | "HETSCHED_TASK_ID"
                | "HETSCHED_TASK_INDEX"
                | "HETSCHED_ATTEMPT"
                | "HETSCHED_CPUS"
                | "HETSCHED_CPUS_FILE"
                | "HETSCHED_GPUS"
                | "HETSCHED_GPU_UTIL_FILE"
                | "HETSCHED_MEMBW_FILE"
                | "HETSCHED_BLOCKS"
                | "HETSCHED_SBATCH_SCRIPT"
                | "HETSCHED_SBATCH_PRELUDE"
                | "CUDA_VISIBLE_DEVICES"
                | "NVIDIA_VISIBLE_DEVICES"
                | "CUDA_DEVICE_ORDER"
        )
}

/// The submitting shell's variables `--export` passes on: all but credentials (`ALL`), or
/// those named; then those set explicitly.
fn exported_env(e: Export, shell: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (k, v) in shell {
        let wanted = if e.all {
            !is_credential(k)
        } else {
            e.names.contains(k)
        };
        if wanted && !set_per_task(k) {
            env.insert(k.clone(), v.clone());
        }
    }
    env.extend(e.set);
    env
}

/// The shell prelude the job's command evaluates (see the module's comment).
fn prelude(o: &SbatchOptions, user: &str) -> String {
    let array = o.array.is_some();
    let mut p = String::from(
        "# hetsched sbatch: runs the job's Slurm batch script as sbatch would (docs/guide/slurm.md)\n",
    );
    if let Some(a) = &o.array {
        match a.progression() {
            Some((first, step)) => p.push_str(&format!(
                "SLURM_ARRAY_TASK_ID=$(({first} + HETSCHED_TASK_INDEX * {step}))\n"
            )),
            None => {
                let ids: Vec<String> = a.ids.iter().map(u32::to_string).collect();
                p.push_str(&format!(
                    "SLURM_ARRAY_TASK_ID=$(echo '{}' | cut -d' ' -f$((HETSCHED_TASK_INDEX + 1)))\n",
                    ids.join(" ")
                ));
            }
        }
        p.push_str("export SLURM_ARRAY_TASK_ID\n");
    }
    let default_out = if array {
        "slurm-%A_%a.out"
    } else {
        "slurm-%j.out"
    };
    let out = output_path(o.output.as_deref().unwrap_or(default_out), user);
    let err = match o.error.as_deref() {
        Some(e) => format!("2>\"{}\"", output_path(e, user)),
        None => "2>&1".into(),
    };
    p.push_str(concat!(
        "hs_script=$(mktemp \"${TMPDIR:-/tmp}/hetsched-sbatch.XXXXXX\") || exit 1\n",
        "trap 'rm -f \"$hs_script\"' EXIT\n",
        "printf '%s' \"$HETSCHED_SBATCH_SCRIPT\" >\"$hs_script\" && chmod 700 \"$hs_script\" || exit 1\n",
        "unset HETSCHED_SBATCH_SCRIPT HETSCHED_SBATCH_PRELUDE\n",
    ));
    p.push_str(&format!("exec >\"{out}\" {err}\n"));
    p.push_str("\"$hs_script\" \"$@\"\n");
    p
}

/// An `-o`/`-e` pattern as a shell double-quoted word: `%j` the job id, `%A` the array's
/// job id, `%a` the array task id (a width such as `%4a` pads with zeros), `%x` the job
/// name, `%u` the user, `%N` the host, `%%` a percent sign; anything else as written.
pub fn output_path(pattern: &str, user: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            push_quoted(&mut out, c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let var = match chars.next() {
            Some('%') => {
                out.push('%');
                continue;
            }
            Some('j') => "SLURM_JOB_ID",
            Some('A') => "SLURM_ARRAY_JOB_ID",
            Some('a') => "SLURM_ARRAY_TASK_ID",
            Some('x') => {
                out.push_str("${SLURM_JOB_NAME}");
                continue;
            }
            Some('u') => {
                if user.is_empty() {
                    out.push_str("${USER:-unknown}");
                } else {
                    user.chars().for_each(|c| push_quoted(&mut out, c));
                }
                continue;
            }
            Some('N') => {
                out.push_str("$(hostname)");
                continue;
            }
            Some(other) => {
                out.push('%');
                out.push_str(&width);
                push_quoted(&mut out, other);
                continue;
            }
            None => {
                out.push('%');
                out.push_str(&width);
                continue;
            }
        };
        match width.parse::<u8>() {
            Ok(w) if w > 0 => out.push_str(&format!("$(printf '%0{w}d' \"${var}\")")),
            _ => out.push_str(&format!("${{{var}}}")),
        }
    }
    out
}

fn push_quoted(out: &mut String, c: char) {
    if matches!(c, '"' | '\\' | '$' | '`') {
        out.push('\\');
    }
    out.push(c);
}
