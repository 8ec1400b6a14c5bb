//! The options `hetsched sbatch` reads, from `#SBATCH` lines and from its command line, in
//! Slurm's spellings (`-J NAME`, `-JNAME`, `--job-name NAME`, `--job-name=NAME`).

use super::values::{self, ArraySpec, Dependency, Export, GpuAsk};

/// Where an option was written: script directives warn on what hetsched does not read,
/// the command line refuses an option Slurm does not have either (a typo).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An `#SBATCH` line of the script (its line number).
    Script(usize),
    /// `hetsched sbatch`'s own arguments.
    CommandLine,
}

/// The options read; `None` where not given (a later source may set it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SbatchOptions {
    /// `-J/--job-name`.
    pub job_name: Option<String>,
    /// `-c/--cpus-per-task`.
    pub cpus_per_task: Option<f64>,
    /// `--mem` in MiB (`Some(0)`: Slurm's "all of a node's memory", which hetsched does not
    /// reserve).
    pub mem_mib: Option<u64>,
    /// `--gres=gpu…`, `-G/--gpus`.
    pub gpus: Option<GpuAsk>,
    /// `-n/--ntasks`.
    pub ntasks: Option<u32>,
    /// `-a/--array`.
    pub array: Option<ArraySpec>,
    /// `-d/--dependency`.
    pub dependency: Option<Dependency>,
    /// `-t/--time` (`Some(None)`: no limit).
    pub time_ms: Option<Option<u64>>,
    /// `-p/--partition`.
    pub partition: Option<String>,
    /// `-o/--output` pattern.
    pub output: Option<String>,
    /// `-e/--error` pattern.
    pub error: Option<String>,
    /// `-D/--chdir`.
    pub chdir: Option<String>,
    /// `--export`.
    pub export: Option<Export>,
    /// `--parsable`: print the job id alone.
    pub parsable: bool,
    /// `--json`.
    pub json: bool,
}

impl SbatchOptions {
    /// These options over `under`: what is set here wins (the command line over the
    /// script, as in Slurm).
    pub fn over(self, under: SbatchOptions) -> SbatchOptions {
        SbatchOptions {
            job_name: self.job_name.or(under.job_name),
            cpus_per_task: self.cpus_per_task.or(under.cpus_per_task),
            mem_mib: self.mem_mib.or(under.mem_mib),
            gpus: self.gpus.or(under.gpus),
            ntasks: self.ntasks.or(under.ntasks),
            array: self.array.or(under.array),
            dependency: self.dependency.or(under.dependency),
            time_ms: self.time_ms.or(under.time_ms),
            partition: self.partition.or(under.partition),
            output: self.output.or(under.output),
            error: self.error.or(under.error),
            chdir: self.chdir.or(under.chdir),
            export: self.export.or(under.export),
            parsable: self.parsable || under.parsable,
            json: self.json || under.json,
        }
    }
}

/// The options hetsched reads: (short, long, takes a value).
const READ: &[(Option<char>, &str, bool)] = &[
    (Some('J'), "job-name", true),
    (Some('c'), "cpus-per-task", true),
    (None, "mem", true),
    (None, "gres", true),
    (Some('G'), "gpus", true),
    (Some('n'), "ntasks", true),
    (Some('a'), "array", true),
    (Some('d'), "dependency", true),
    (Some('t'), "time", true),
    (Some('p'), "partition", true),
    (Some('o'), "output", true),
    (Some('e'), "error", true),
    (Some('D'), "chdir", true),
    (None, "export", true),
    (None, "parsable", false),
    (None, "json", false),
];

/// Slurm options hetsched accepts and ignores with a warning: (short, long, takes a value).
const IGNORED: &[(Option<char>, &str, bool)] = &[
    (Some('A'), "account", true),
    (Some('q'), "qos", true),
    (Some('N'), "nodes", true),
    (Some('w'), "nodelist", true),
    (Some('x'), "exclude", true),
    (Some('C'), "constraint", true),
    (Some('i'), "input", true),
    (Some('m'), "distribution", true),
    (Some('M'), "clusters", true),
    (Some('L'), "licenses", true),
    (Some('B'), "extra-node-info", true),
    (Some('S'), "core-spec", true),
    (Some('F'), "nodefile", true),
    (None, "mail-type", true),
    (None, "mail-user", true),
    (None, "mem-per-cpu", true),
    (None, "mem-per-gpu", true),
    (None, "ntasks-per-node", true),
    (None, "ntasks-per-core", true),
    (None, "ntasks-per-socket", true),
    (None, "cpus-per-gpu", true),
    (None, "gpus-per-node", true),
    (None, "gpus-per-task", true),
    (None, "gpus-per-socket", true),
    (None, "gres-flags", true),
    (None, "begin", true),
    (None, "deadline", true),
    (None, "comment", true),
    (None, "signal", true),
    (None, "open-mode", true),
    (None, "reservation", true),
    (None, "nice", true),
    (None, "priority", true),
    (None, "wckey", true),
    (None, "tmp", true),
    (None, "time-min", true),
    (None, "threads-per-core", true),
    (None, "hint", true),
    (None, "propagate", true),
    (None, "sockets-per-node", true),
    (None, "cores-per-socket", true),
    (None, "mincpus", true),
    (None, "switches", true),
    (None, "uid", true),
    (None, "gid", true),
    (None, "exclusive", false),
    (None, "requeue", false),
    (None, "no-requeue", false),
    (None, "contiguous", false),
    (None, "spread-job", false),
    (None, "use-min-nodes", false),
    (None, "get-user-env", false),
    (None, "ignore-pbs", false),
    (None, "test-only", false),
    (Some('O'), "overcommit", false),
    (Some('s'), "oversubscribe", false),
    (Some('H'), "hold", false),
    (Some('W'), "wait", false),
    (Some('Q'), "quiet", false),
    (Some('v'), "verbose", false),
    (Some('k'), "no-kill", false),
];

/// Whether `arg` is an option hetsched sbatch knows that takes its value from the next
/// argument (used to find where the script's path starts on the command line).
pub fn takes_separate_value(arg: &str) -> bool {
    match split_option(arg) {
        Some((name, None)) => find(&name).is_some_and(|(_, takes, _)| takes),
        _ => false,
    }
}

/// `--long[=value]` or `-X[value]`: the option's name (long, where it has one) and an
/// attached value.
fn split_option(arg: &str) -> Option<(String, Option<String>)> {
    if let Some(long) = arg.strip_prefix("--") {
        return Some(match long.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (long.to_string(), None),
        });
    }
    let short = arg.strip_prefix('-')?;
    let mut chars = short.chars();
    let c = chars.next()?;
    let rest: String = chars.collect();
    let name = find_short(c).map_or_else(|| format!("-{c}"), str::to_string);
    let attached = rest.strip_prefix('=').unwrap_or(&rest).to_string();
    Some((name, (!attached.is_empty()).then_some(attached)))
}

fn find_short(c: char) -> Option<&'static str> {
    READ.iter()
        .chain(IGNORED)
        .find(|(s, _, _)| *s == Some(c))
        .map(|(_, l, _)| *l)
}

/// `(long name, takes a value, read by hetsched)`.
fn find(name: &str) -> Option<(&'static str, bool, bool)> {
    if let Some((_, l, v)) = READ.iter().find(|(_, l, _)| *l == name) {
        return Some((l, *v, true));
    }
    IGNORED
        .iter()
        .find(|(_, l, _)| *l == name)
        .map(|(_, l, v)| (*l, *v, false))
}

/// Reads `args` (one `#SBATCH` line's words, or the options before the script on the
/// command line) into options; warnings name what was ignored.
pub fn parse(args: &[String], origin: Origin) -> Result<(SbatchOptions, Vec<String>), String> {
    let mut o = SbatchOptions::default();
    let mut warnings = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let Some((name, attached)) = split_option(arg) else {
            return Err(format!("{arg:?} is not an option"));
        };
        let Some((long, takes_value, read)) = find(&name) else {
            let shown = if name.starts_with('-') {
                name.clone()
            } else {
                format!("--{name}")
            };
            if origin == Origin::CommandLine {
                return Err(format!(
                    "unknown option {shown} (hetsched sbatch --help lists the options it reads)"
                ));
            }
            // Not an option we know: take a following word as its value, so it is not
            // read as an option of its own.
            if attached.is_none() && args.get(i).is_some_and(|a| !a.starts_with('-')) {
                i += 1;
            }
            warnings.push(format!(
                "{shown} is not a Slurm option hetsched knows; ignored"
            ));
            continue;
        };
        let value = if takes_value {
            match attached {
                Some(v) => Some(v),
                None => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| format!("--{long} needs a value"))?;
                    i += 1;
                    Some(v)
                }
            }
        } else {
            if attached.is_some() && read {
                return Err(format!("--{long} takes no value"));
            }
            None
        };
        if !read {
            warnings.push(format!("--{long} is not read by hetsched; ignored"));
            continue;
        }
        set(
            &mut o,
            long,
            value.as_deref().unwrap_or_default(),
            &mut warnings,
        )
        .map_err(|why| format!("--{long}: {why}"))?;
    }
    Ok((o, warnings))
}

fn set(
    o: &mut SbatchOptions,
    long: &str,
    v: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    match long {
        "job-name" => o.job_name = Some(non_empty(v)?),
        "cpus-per-task" => {
            let n: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("{v:?} is not a whole number of CPUs"))?;
            o.cpus_per_task = Some(crate::jobfile::check_cpus(f64::from(n))?);
        }
        "mem" => {
            let mib = values::mem_mib(v)?;
            if mib == 0 {
                warnings.push(
                    "--mem=0 (all of a node's memory in Slurm) reserves no memory in hetsched"
                        .into(),
                );
            }
            o.mem_mib = Some(mib);
        }
        "gres" => {
            let (gpu, other) = values::gres(v)?;
            for g in other {
                warnings.push(format!("--gres {g:?}: only gpu is tracked; ignored"));
            }
            if gpu.is_some() {
                o.gpus = gpu;
            }
        }
        "gpus" => o.gpus = Some(values::gpus(v)?),
        "ntasks" => {
            let n: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| format!("{v:?} is not a task count of at least 1"))?;
            o.ntasks = Some(n);
        }
        "array" => o.array = Some(values::array(v)?),
        "dependency" => o.dependency = Some(values::dependency(v)?),
        "time" => o.time_ms = Some(values::time_limit_ms(v)?),
        "partition" => o.partition = Some(non_empty(v)?),
        "output" => o.output = Some(non_empty(v)?),
        "error" => o.error = Some(non_empty(v)?),
        "chdir" => o.chdir = Some(non_empty(v)?),
        "export" => o.export = Some(values::export(v)?),
        "parsable" => o.parsable = true,
        "json" => o.json = true,
        _ => return Err("not read (a bug: READ and set disagree)".into()),
    }
    Ok(())
}

fn non_empty(v: &str) -> Result<String, String> {
    if v.trim().is_empty() {
        Err("the value is empty".into())
    } else {
        Ok(v.to_string())
    }
}
