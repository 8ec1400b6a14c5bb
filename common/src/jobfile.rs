//! Job spec files: one schema, written as TOML or JSON.
//!
//! ```toml
//! name = "train"
//! user = "alice"                 # default: $USER
//! partition = "default"
//! count = 4
//! command = ["python3", "train.py", "--epochs", "3"]
//! env = { SEED = "1" }
//! nodes = ["gpu-1", "gpu-2"]     # locality candidates
//! retries = 2                    # re-run a failed task up to 2 more times
//! backoff = "5s"                 # doubling, capped at 5m
//! timeout = "1h"                 # per attempt; reason "timeout"
//! after = [12, 13]               # start once jobs 12 and 13 succeeded; also after_any,
//!                                # after_fail, after_each = 14, after_mode = "any",
//! max_running = 2                # singleton = true (crate::dependency)
//! image = "oci:/srv/images/train:v3"  # run in this container image (crate::image)
//! run_as = "1000"                # the image's user unless given
//! network = "none"               # its own network namespace (default: the host's)
//! [resources]
//! cpus = 2.0
//! mem = 4096                     # MiB
//! gpus = 0.5                     # whole GPUs, or a fraction of one
//! gpu_model = "T4"
//! ```
//!
//! Resources are checked against the per-task limits of [`crate::MAX_CPUS_PER_TASK`],
//! [`crate::MAX_MEM_MIB_PER_TASK`] and [`crate::MAX_GPUS_PER_TASK`] while the file is read, so
//! that an absurd value (`cpus = 1e308`, a negative `mem`) is reported at its field.
//!
//! Every field is optional in the file itself, so that command-line flags can fill or
//! override any of them; the merged result is checked by [`JobSpec::validate`]. Unknown
//! fields are refused (a typo must not pass silently). A bad value is reported with the
//! file, line, column and the field's path ([`SpecFileError`]).

use crate::{GpuRequest, JobSpec, ResourceRequest};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;

/// A job spec file as written: every field optional.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// Job name.
    #[serde(default)]
    pub name: Option<String>,
    /// User (default: `$USER`).
    #[serde(default)]
    pub user: Option<String>,
    /// Partition.
    #[serde(default)]
    pub partition: Option<String>,
    /// Number of tasks.
    #[serde(default)]
    pub count: Option<u32>,
    /// argv of each task.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Locality candidates (node names or ids).
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    /// Re-runs of a failed task.
    #[serde(default)]
    pub retries: Option<u32>,
    /// First retry delay, ms (written as a duration: `"5s"`).
    #[serde(default, deserialize_with = "de_duration")]
    pub backoff: Option<u64>,
    /// Per-attempt limit, ms (written as a duration: `"1h"`).
    #[serde(default, deserialize_with = "de_duration")]
    pub timeout: Option<u64>,
    /// Never make these tasks preemption victims (S1; `submit --no-preempt`).
    #[serde(default)]
    pub no_preempt: bool,
    /// What each task needs.
    #[serde(default)]
    pub resources: FileResources,
    /// An API program file each task runs instead of a command (S0; relative to the spec
    /// file): read by the CLI with [`crate::program::read_program`].
    #[serde(default)]
    pub program: Option<String>,
    /// S3.2: a GPU task's class (`image`, `speech`, `nlp`, `other`); its best CPU count is
    /// searched while it runs (`submit --class`).
    #[serde(default)]
    pub class: Option<crate::TaskClass>,
    /// S3.2 hint: the task pipelines its input (`--pipelined`: start one CPU lower).
    #[serde(default)]
    pub pipelined: bool,
    /// S3.2 hint: heavy model weights (`--heavy-weights`: start one CPU lower).
    #[serde(default)]
    pub heavy_weights: bool,
    /// S3.2 hint: heavy CPU-side work (`--cpu-heavy`: start one CPU higher).
    #[serde(default)]
    pub cpu_heavy: bool,
    /// Submit even when no registered node could ever hold one task (nodes may join
    /// later); without it the leader refuses such a job (`submit --allow-unplaceable`,
    /// docs/CONTRACT.md). An option of the submission: not part of the job's spec.
    #[serde(default)]
    pub allow_unplaceable: bool,
    /// Issue 51: start once each of these jobs succeeded (`submit --after`).
    #[serde(default)]
    pub after: Vec<crate::JobId>,
    /// Start once each of these jobs ended (`--after-any`).
    #[serde(default)]
    pub after_any: Vec<crate::JobId>,
    /// Start once each of these jobs failed or was cancelled (`--after-fail`).
    #[serde(default)]
    pub after_fail: Vec<crate::JobId>,
    /// Task *i* starts once task *i* of this job succeeded (`--after-each`).
    #[serde(default)]
    pub after_each: Option<crate::JobId>,
    /// `"all"` (default) or `"any"`: how the dependencies combine (`--after-mode`).
    #[serde(default)]
    pub after_mode: Option<crate::AfterMode>,
    /// At most one singleton job per (user, name) under way (`--singleton`).
    #[serde(default)]
    pub singleton: bool,
    /// At most this many tasks assigned or running at once (`--max-running`).
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Issue 52: the container image each task runs in (`--image`,
    /// [`crate::image::ImageRef`]; checked as it is read, so a bad one names its field).
    #[serde(default, deserialize_with = "de_image")]
    pub image: Option<String>,
    /// The user a container task runs as in its image (`--run-as`).
    #[serde(default)]
    pub run_as: Option<String>,
    /// A container task's network, `host` (default) or `none` (`--network`).
    #[serde(default)]
    pub network: Option<String>,
    /// The directory each task starts in (`--workdir`; absolute: on the node, or inside
    /// the image for a container task).
    #[serde(default)]
    pub workdir: Option<String>,
}

/// The `[resources]` table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileResources {
    /// CPU cores (a float).
    #[serde(default, deserialize_with = "de_cpus")]
    pub cpus: Option<f64>,
    /// Memory, MiB.
    #[serde(default, deserialize_with = "de_mem")]
    pub mem: Option<u64>,
    /// Whole GPUs, or a fraction of one.
    #[serde(default, deserialize_with = "de_gpus")]
    pub gpus: Option<f64>,
    /// Acceptable GPU model.
    #[serde(default)]
    pub gpu_model: Option<String>,
}

/// Defaults of a spec when neither the file nor a flag names a field.
pub const DEFAULT_CPUS: f64 = 1.0;
/// Default memory per task, MiB.
pub const DEFAULT_MEM_MIB: u64 = 128;

impl JobFile {
    /// The spec this file describes, with defaults for what it leaves out (`user` from
    /// `default_user`), validated.
    pub fn to_spec(&self, default_user: &str) -> crate::Result<JobSpec> {
        self.to_spec_with(default_user, None)
    }

    /// As [`to_spec`](Self::to_spec), for a job that runs `program` (already read).
    pub fn to_spec_with(
        &self,
        default_user: &str,
        program: Option<crate::program::Program>,
    ) -> crate::Result<JobSpec> {
        let command = self.command.clone().unwrap_or_default();
        let name = self.name.clone().unwrap_or_else(|| match &self.image {
            Some(image) if command.is_empty() => default_image_job_name(image),
            _ => default_job_name(&command),
        });
        let r = &self.resources;
        let mut gpu = gpu_request(r.gpus.unwrap_or(0.0)).map_err(|why| crate::Error::Invalid {
            what: "job spec",
            why,
        })?;
        if let Some(m) = &r.gpu_model {
            gpu.models = vec![m.clone()];
        }
        let spec = JobSpec {
            name,
            user: self
                .user
                .clone()
                .unwrap_or_else(|| default_user.to_string()),
            partition: self
                .partition
                .clone()
                .unwrap_or_else(|| "default".to_string()),
            resources: ResourceRequest {
                cpu_milli: (r.cpus.unwrap_or(DEFAULT_CPUS) * 1000.0).round() as u64,
                mem_mib: r.mem.unwrap_or(DEFAULT_MEM_MIB),
                gpu,
                engines: Default::default(),
            },
            count: self.count.unwrap_or(1),
            command,
            env: self.env.clone(),
            nodes: self.nodes.clone().unwrap_or_default(),
            retries: self.retries.unwrap_or(0),
            backoff_ms: self.backoff.unwrap_or(0),
            timeout_ms: self.timeout,
            no_preempt: self.no_preempt,
            program,
            cpu_search: self.cpu_search()?,
            workdir: self.workdir.clone(),
            image: self.image.clone(),
            run_as: self.run_as.clone(),
            network: self.network.clone(),
            after: self.after.clone(),
            after_any: self.after_any.clone(),
            after_fail: self.after_fail.clone(),
            after_each: self.after_each,
            after_mode: self.after_mode.unwrap_or_default(),
            singleton: self.singleton,
            max_running: self.max_running,
        };
        spec.validate()?;
        spec.check_limits()?;
        Ok(spec)
    }
}

impl JobFile {
    /// The S3.2 search the file asks for: none without `class` (the hints alone are an
    /// error, so that a forgotten `--class` does not pass silently).
    fn cpu_search(&self) -> crate::Result<Option<crate::CpuSearchSpec>> {
        match self.class {
            Some(class) => Ok(Some(crate::CpuSearchSpec {
                class,
                pipelined: self.pipelined,
                heavy_weights: self.heavy_weights,
                cpu_heavy: self.cpu_heavy,
            })),
            None if self.pipelined || self.heavy_weights || self.cpu_heavy => {
                Err(crate::Error::Invalid {
                    what: "job spec",
                    why: "--pipelined, --heavy-weights and --cpu-heavy need --class".into(),
                })
            }
            None => Ok(None),
        }
    }
}

/// A container job's name when it gives no command: the image's last path component,
/// without its tag (`docker://r.io/lib/bb:1` → `bb`).
pub fn default_image_job_name(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or("");
    match last.split([':', '@']).next() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => "image".to_string(),
    }
}

/// A job's name when none is given: the program's file name.
pub fn default_job_name(command: &[String]) -> String {
    let Some(first) = command.first() else {
        return String::new();
    };
    std::path::Path::new(first)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| first.clone())
}

/// A number as a user wrote it, short even when it is huge (`1e308`, not 309 digits).
fn shown(v: f64) -> String {
    if v.is_finite() && v.abs() < 1e15 {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// A GPU request from the user's number: 0 none, a whole number of devices (at most
/// [`crate::MAX_GPUS_PER_TASK`]), or a fraction below 1 of one device.
pub fn gpu_request(gpus: f64) -> Result<GpuRequest, String> {
    if !(gpus >= 0.0 && gpus.is_finite()) {
        return Err(format!(
            "gpus must be zero or a positive number (got {})",
            shown(gpus)
        ));
    }
    if gpus > f64::from(crate::MAX_GPUS_PER_TASK) {
        return Err(format!(
            "gpus {} is above the limit of {} per task",
            shown(gpus),
            crate::MAX_GPUS_PER_TASK
        ));
    }
    if gpus == 0.0 {
        Ok(GpuRequest::none())
    } else if gpus < 1.0 {
        Ok(GpuRequest::fraction(
            ((gpus * 1000.0).round() as u32).max(1),
        ))
    } else if gpus.fract() == 0.0 {
        Ok(GpuRequest::whole(gpus as u32))
    } else {
        Err(format!(
            "gpus must be a whole number or a fraction below 1 (got {gpus})"
        ))
    }
}

/// Checks a CPU count: a positive, finite number of cores, at most
/// [`crate::MAX_CPUS_PER_TASK`].
pub fn check_cpus(cpus: f64) -> Result<f64, String> {
    if !(cpus > 0.0 && cpus.is_finite() && (cpus * 1000.0).round() >= 1.0) {
        Err(format!(
            "cpus must be a positive number of cores (got {})",
            shown(cpus)
        ))
    } else if cpus > crate::MAX_CPUS_PER_TASK as f64 {
        Err(format!(
            "cpus {} is above the limit of {} cores per task",
            shown(cpus),
            crate::MAX_CPUS_PER_TASK
        ))
    } else {
        Ok(cpus)
    }
}

/// Checks a memory size, MiB: at most [`crate::MAX_MEM_MIB_PER_TASK`] (1 PiB).
pub fn check_mem(mib: u64) -> Result<u64, String> {
    if mib > crate::MAX_MEM_MIB_PER_TASK {
        Err(mem_over_limit(&mib.to_string()))
    } else {
        Ok(mib)
    }
}

fn mem_over_limit(shown: &str) -> String {
    format!(
        "mem {shown} MiB is above the limit of {} MiB (1 PiB) per task",
        crate::MAX_MEM_MIB_PER_TASK
    )
}

/// A duration as users write it (`250ms`, `30s`, `5m`, `1h`), in ms.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration like 250ms, 30s, 5m, 1h ({e})"))?;
    u64::try_from(d.as_millis()).map_err(|_| format!("{s:?} is too long"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration_ms(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `image`: a reference [`crate::image::ImageRef`] takes.
fn de_image<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = String::deserialize(d)?;
    crate::image::ImageRef::parse(&v)
        .map(|_| Some(v))
        .map_err(|e| serde::de::Error::custom(e.why))
}

fn de_cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    check_cpus(v).map(Some).map_err(serde::de::Error::custom)
}

/// `mem`: a whole number of MiB, written as an integer or (JSON) as a whole float; a
/// negative, fractional or over-limit value names what is wrong with it.
fn de_mem<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Mib;
    impl serde::de::Visitor<'_> for Mib {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number of MiB")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            check_mem(v).map_err(E::custom)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom(format!("mem must not be negative (got {v})")))
                .and_then(|v| self.visit_u64(v))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            if v.is_finite() && v > crate::MAX_MEM_MIB_PER_TASK as f64 {
                Err(E::custom(mem_over_limit(&shown(v))))
            } else if v >= 0.0 && v.fract() == 0.0 {
                self.visit_u64(v as u64)
            } else {
                Err(E::custom(format!(
                    "mem must be a whole number of MiB, at least 0 (got {})",
                    shown(v)
                )))
            }
        }
    }
    d.deserialize_any(Mib).map(Some)
}

fn de_gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = f64::deserialize(d)?;
    gpu_request(v).map_err(serde::de::Error::custom)?;
    Ok(Some(v))
}

/// The format of a spec file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecFormat {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl SpecFormat {
    /// By extension (`.json`, `.toml`); otherwise JSON when the text starts with `{`.
    pub fn detect(path: &str, text: &str) -> Self {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".json") {
            SpecFormat::Json
        } else if lower.ends_with(".toml") {
            SpecFormat::Toml
        } else if text.trim_start().starts_with('{') {
            SpecFormat::Json
        } else {
            SpecFormat::Toml
        }
    }
}

/// An invalid spec file: where, which field, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecFileError {
    /// The file as the user named it.
    pub file: String,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// Dotted path of the field (`resources.cpus`), when one is to blame.
    pub field: Option<String>,
    /// Why.
    pub message: String,
}

impl fmt::Display for SpecFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for SpecFileError {}

/// 1-based line and column of byte `offset` in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary_compat(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `str::floor_char_boundary` for the toolchains this project supports.
trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorCharBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        while i > 0 && !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

/// The path serde_path_to_error reports, or `None` at the top level.
fn field_of(path: &serde_path_to_error::Path) -> Option<String> {
    let p = path.to_string();
    (p != "." && !p.is_empty()).then_some(p)
}

/// Parses a spec file's text. `file` names it in errors.
pub fn parse_job_file(file: &str, text: &str) -> Result<JobFile, SpecFileError> {
    match SpecFormat::detect(file, text) {
        SpecFormat::Toml => parse_toml(file, text),
        SpecFormat::Json => parse_json(file, text),
    }
}

fn parse_toml(file: &str, text: &str) -> Result<JobFile, SpecFileError> {
    let err = |e: &toml::de::Error, field: Option<String>| {
        let (line, column) = e.span().map_or((0, 0), |s| line_col(text, s.start));
        SpecFileError {
            file: file.to_string(),
            line,
            column,
            field,
            message: e.message().trim().to_string(),
        }
    };
    let de = toml::Deserializer::parse(text).map_err(|e| err(&e, None))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = field_of(e.path());
        err(e.inner(), field)
    })
}

fn parse_json(file: &str, text: &str) -> Result<JobFile, SpecFileError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let file_struct: JobFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = field_of(e.path());
        let inner = e.inner();
        SpecFileError {
            file: file.to_string(),
            line: inner.line(),
            column: inner.column(),
            field,
            message: strip_json_position(&inner.to_string()),
        }
    })?;
    de.end().map_err(|e| SpecFileError {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        field: None,
        message: strip_json_position(&e.to_string()),
    })?;
    Ok(file_struct)
}

/// serde_json appends " at line L column C" to its messages; the error carries them apart.
fn strip_json_position(m: &str) -> String {
    match m.rfind(" at line ") {
        Some(i) => m[..i].to_string(),
        None => m.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
name = "train"
user = "alice"
partition = "default"
count = 4
command = ["python3", "train.py", "--epochs", "3"]
env = { SEED = "1" }
nodes = ["gpu-1", "gpu-2"]
retries = 2
backoff = "5s"
timeout = "1h"
[resources]
cpus = 2.0
mem = 4096
gpus = 0.5
gpu_model = "T4"
"#;

    #[test]
    fn the_documented_example_parses_into_the_expected_spec() {
        let f = parse_job_file("train.toml", FULL).expect("parse");
        let s = f.to_spec("nobody").expect("spec");
        assert_eq!(s.name, "train");
        assert_eq!(s.user, "alice");
        assert_eq!(s.count, 4);
        assert_eq!(s.command[0], "python3");
        assert_eq!(s.env.get("SEED").map(String::as_str), Some("1"));
        assert_eq!(s.nodes, vec!["gpu-1", "gpu-2"]);
        assert_eq!(s.retries, 2);
        assert_eq!(s.backoff_ms, 5_000);
        assert_eq!(s.timeout_ms, Some(3_600_000));
        assert_eq!(s.resources.cpu_milli, 2000);
        assert_eq!(s.resources.mem_mib, 4096);
        assert_eq!(s.resources.gpu.count, 1);
        assert_eq!(s.resources.gpu.milli, 500);
        assert_eq!(s.resources.gpu.models, vec!["T4"]);
    }

    #[test]
    fn json_has_the_same_schema() {
        let j = r#"{"name": "train", "count": 2, "command": ["true"],
                    "backoff": "250ms", "resources": {"cpus": 0.5, "mem": 64}}"#;
        let s = parse_job_file("x.json", j)
            .expect("parse")
            .to_spec("bob")
            .expect("spec");
        assert_eq!(s.user, "bob");
        assert_eq!(s.count, 2);
        assert_eq!(s.backoff_ms, 250);
        assert_eq!(s.resources.cpu_milli, 500);
    }

    #[test]
    fn a_bad_value_names_field_line_and_column() {
        let text = "name = \"x\"\ncommand = [\"true\"]\n[resources]\ncpus = \"lots\"\n";
        let e = parse_job_file("bad.toml", text).expect_err("must fail");
        assert_eq!(e.field.as_deref(), Some("resources.cpus"));
        assert_eq!(e.line, 4);
        assert_eq!(e.column, 8);
        let shown = e.to_string();
        assert!(
            shown.starts_with("bad.toml:4:8: field `resources.cpus`"),
            "{shown}"
        );

        let j = "{\n  \"command\": [\"true\"],\n  \"resources\": {\"cpus\": \"lots\"}\n}";
        let e = parse_job_file("bad.json", j).expect_err("must fail");
        assert_eq!(e.field.as_deref(), Some("resources.cpus"));
        assert_eq!(e.line, 3);
        assert!(e.column > 0);
    }

    #[test]
    fn semantic_errors_and_unknown_fields_are_located_too() {
        let e = parse_job_file("a.toml", "command = [\"true\"]\nbackoff = \"soon\"\n")
            .expect_err("bad duration");
        assert_eq!(e.field.as_deref(), Some("backoff"));
        assert_eq!(e.line, 2);
        let e = parse_job_file("a.toml", "[resources]\ncpus = -1\n").expect_err("negative");
        assert_eq!(e.field.as_deref(), Some("resources.cpus"));
        assert_eq!(e.line, 2);
        let e = parse_job_file("a.toml", "comand = [\"true\"]\n").expect_err("typo");
        assert!(e.message.contains("comand"), "{e}");
        assert_eq!(e.line, 1);
        let e = parse_job_file("a.toml", "[resources]\ngpus = 1.5\n").expect_err("gpus");
        assert_eq!(e.field.as_deref(), Some("resources.gpus"));
        let e = parse_job_file("a.toml", "count = [\n").expect_err("syntax");
        assert!(e.line >= 1, "{e}");
    }

    #[test]
    fn a_file_without_a_command_is_refused_when_made_into_a_spec() {
        let f = parse_job_file("a.toml", "count = 2\n").expect("parse");
        assert!(f.to_spec("u").is_err());
    }

    #[test]
    fn absurd_resources_are_refused_at_their_field() {
        for (text, field, says) in [
            (
                r#"{"resources": {"cpus": 1e308}}"#,
                "resources.cpus",
                "cpus 1e308 is above",
            ),
            (
                r#"{"resources": {"cpus": -1}}"#,
                "resources.cpus",
                "positive",
            ),
            (
                r#"{"resources": {"cpus": 100001}}"#,
                "resources.cpus",
                "100000 cores",
            ),
            (
                r#"{"resources": {"mem": 1e300}}"#,
                "resources.mem",
                "mem 1e300 MiB",
            ),
            (r#"{"resources": {"mem": -1}}"#, "resources.mem", "negative"),
            (
                r#"{"resources": {"mem": 0.5}}"#,
                "resources.mem",
                "whole number",
            ),
            (r#"{"resources": {"mem": "lots"}}"#, "resources.mem", "MiB"),
            (
                r#"{"resources": {"mem": 1073741825}}"#,
                "resources.mem",
                "1 PiB",
            ),
            (
                r#"{"resources": {"gpus": 1025}}"#,
                "resources.gpus",
                "1024 per task",
            ),
            (r#"{"resources": {"gpus": 1e999}}"#, "resources.gpus", ""),
            (r#"{"count": 1e10}"#, "count", ""),
        ] {
            let e = parse_job_file("x.json", text).expect_err(text);
            assert_eq!(e.field.as_deref(), Some(field), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
        let e = parse_job_file("x.toml", "[resources]\nmem = -5\n").expect_err("toml");
        assert_eq!(e.field.as_deref(), Some("resources.mem"), "{e}");
        assert_eq!(e.line, 2);
    }

    #[test]
    fn resources_at_the_limits_are_accepted() {
        let j = r#"{"command": ["true"], "allow_unplaceable": true,
                    "resources": {"cpus": 100000, "mem": 1073741824.0, "gpus": 1024}}"#;
        let f = parse_job_file("x.json", j).expect("parse");
        assert!(f.allow_unplaceable);
        let s = f.to_spec("u").expect("spec");
        assert_eq!(s.resources.cpu_milli, crate::MAX_CPU_MILLI_PER_TASK);
        assert_eq!(s.resources.mem_mib, crate::MAX_MEM_MIB_PER_TASK);
        assert_eq!(s.resources.gpu.count, crate::MAX_GPUS_PER_TASK);
        let f = parse_job_file("x.toml", "[resources]\nmem = 64\n").expect("toml");
        assert_eq!(f.resources.mem, Some(64));
        assert!(!f.allow_unplaceable);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert!(parse_duration_ms("5").is_err());
        assert!(parse_duration_ms("lots").is_err());
    }

    #[test]
    fn a_container_job_names_its_image_and_takes_its_name_from_it() {
        let f = parse_job_file(
            "j.toml",
            "image = \"oci:/srv/images/train:v3\"\nrun_as = \"1000\"\nworkdir = \"/work\"\nnetwork = \"none\"\n",
        )
        .expect("parses");
        let spec = f.to_spec("ada").expect("valid");
        assert_eq!(spec.image.as_deref(), Some("oci:/srv/images/train:v3"));
        assert_eq!(spec.run_as.as_deref(), Some("1000"));
        assert_eq!(spec.network.as_deref(), Some("none"));
        assert_eq!(spec.workdir.as_deref(), Some("/work"));
        assert!(spec.command.is_empty());
        assert_eq!(spec.name, "train");
        assert_eq!(
            default_image_job_name("docker://r.io/lib/bb@sha256:ab"),
            "bb"
        );
        assert_eq!(default_image_job_name("oci-archive:/srv/bb.tar"), "bb.tar");
        assert_eq!(default_image_job_name("oci:/"), "image");
    }
}
