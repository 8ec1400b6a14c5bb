//! The job spec of `submit`: a spec file (TOML or JSON), overridden by the flags, and an
//! API program when the job runs one.

use super::args::SubmitArgs;
use crate::cmd::exit;
use hetsched_common::jobfile::{self, JobFile};
use hetsched_common::JobSpec;

/// What `submit` sends: the job, and whether it may be queued when no registered node
/// could hold it (`--allow-unplaceable`, or the file's `allow_unplaceable`).
pub struct Submission {
    /// The job.
    pub spec: JobSpec,
    /// Skip the leader's "could any node ever hold this" check.
    pub allow_unplaceable: bool,
}

/// Reads and parses a spec file; every failure is bad input (exit 2) naming the file.
pub fn read_job_file(path: &str) -> anyhow::Result<JobFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| exit::bad_input(format!("cannot read job spec file {path}: {e}")))?;
    jobfile::parse_job_file(path, &text).map_err(|e| exit::bad_input(e.to_string()))
}

/// The user a submission names when none is given: empty with a token (the master fills
/// in the token's user), else the client certificate's name, else `$USER`.
pub fn default_user() -> String {
    // With a token the master fills in the token's user (an empty name asks it to).
    if hetsched_common::wire::tls::client_token().is_some() {
        return String::new();
    }
    // Against a secured cluster the user is the one in the client certificate.
    let cert_user = hetsched_common::wire::tls::current()
        .and_then(|t| t.identity.clone())
        .filter(|i| i.role == hetsched_common::certs::Role::Client)
        .map(|i| i.name);
    cert_user.unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "anonymous".into()))
}

/// Builds the submission from an optional spec file and the submit flags (flags win).
pub fn submission_from(a: &SubmitArgs) -> anyhow::Result<Submission> {
    let mut allow_unplaceable = a.allow_unplaceable;
    let spec = spec_from(a, &mut allow_unplaceable)?;
    Ok(Submission {
        spec,
        allow_unplaceable,
    })
}

/// Issue 52's flags over the file's keys: `--image` (checked here, so that a bad reference
/// is reported at its flag), `--run-as`, `--network`, `--workdir`.
fn container_flags(a: &SubmitArgs, f: &mut JobFile) -> anyhow::Result<()> {
    if let Some(v) = &a.image {
        hetsched_common::image::ImageRef::parse(v)
            .map_err(|e| exit::bad_input(format!("--image: {}", e.why)))?;
        f.image = Some(v.clone());
    }
    if a.run_as.is_some() {
        f.run_as = a.run_as.clone();
    }
    if a.network.is_some() {
        f.network = a.network.clone();
    }
    if a.workdir.is_some() {
        f.workdir = a.workdir.clone();
    }
    Ok(())
}

/// Builds a job spec from an optional spec file and the submit flags (flags win); sets
/// `allow_unplaceable` when the file asks for it.
fn spec_from(a: &SubmitArgs, allow_unplaceable: &mut bool) -> anyhow::Result<JobSpec> {
    let mut f = match &a.file {
        Some(path) => read_job_file(path)?,
        None => JobFile::default(),
    };
    let bad = |flag: &str, why: String| exit::bad_input(format!("--{flag}: {why}"));
    if let Some(v) = &a.name {
        f.name = Some(v.clone());
    }
    if let Some(v) = &a.user {
        f.user = Some(v.clone());
    }
    if let Some(v) = &a.partition {
        f.partition = Some(v.clone());
    }
    if let Some(v) = a.cpus {
        f.resources.cpus = Some(jobfile::check_cpus(v).map_err(|e| bad("cpus", e))?);
    }
    if let Some(v) = a.mem {
        f.resources.mem = Some(jobfile::check_mem(v).map_err(|e| bad("mem", e))?);
    }
    if let Some(v) = a.gpus {
        jobfile::gpu_request(v).map_err(|e| bad("gpus", e))?;
        f.resources.gpus = Some(v);
    }
    if let Some(v) = &a.gpu_model {
        f.resources.gpu_model = Some(v.clone());
    }
    if let Some(v) = a.count {
        f.count = Some(v);
    }
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| bad("env", format!("{kv:?} is not KEY=VALUE")))?;
        f.env.insert(k.to_string(), v.to_string());
    }
    if let Some(v) = &a.nodes {
        f.nodes = Some(v.clone());
    }
    if let Some(v) = a.retries {
        f.retries = Some(v);
    }
    if let Some(v) = &a.backoff {
        f.backoff = Some(jobfile::parse_duration_ms(v).map_err(|e| bad("backoff", e))?);
    }
    if let Some(v) = &a.timeout {
        f.timeout = Some(jobfile::parse_duration_ms(v).map_err(|e| bad("timeout", e))?);
    }
    if !a.command.is_empty() {
        f.command = Some(a.command.clone());
    }
    if let Some(c) = a.class {
        f.class = Some(c);
    }
    // Issue 51: the flags add to the file's dependencies, and override its mode and throttle.
    f.after.extend(&a.after);
    f.after_any.extend(&a.after_any);
    f.after_fail.extend(&a.after_fail);
    if a.after_each.is_some() {
        f.after_each = a.after_each;
    }
    if a.after_mode.is_some() {
        f.after_mode = a.after_mode;
    }
    f.singleton |= a.singleton;
    if a.max_running.is_some() {
        f.max_running = a.max_running;
    }
    container_flags(a, &mut f)?;
    f.pipelined |= a.pipelined;
    f.heavy_weights |= a.heavy_weights;
    f.cpu_heavy |= a.cpu_heavy;
    *allow_unplaceable |= f.allow_unplaceable;
    // An API program (S0): `--program FILE`, else the spec file's `program = "prog.toml"`
    // (relative to the spec file).
    let program_path = match (&a.program, &f.program, &a.file) {
        (Some(p), _, _) => Some(p.clone()),
        (None, Some(p), Some(file)) => Some(
            std::path::Path::new(file)
                .parent()
                .unwrap_or(std::path::Path::new(""))
                .join(p),
        ),
        (None, Some(p), None) => Some(std::path::PathBuf::from(p)),
        (None, None, _) => None,
    };
    if let Some(path) = program_path {
        if !a.command.is_empty() || f.command.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(exit::bad_input(
                "a job runs either a command or a program (--program), not both",
            ));
        }
        let program = hetsched_common::program::read_program(&path)
            .map_err(|e| exit::bad_input(e.to_string()))?;
        if f.name.is_none() {
            f.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        return f
            .to_spec_with(&default_user(), Some(program))
            .map_err(|e| exit::bad_input(e.to_string()))
            .map(|mut spec| {
                spec.no_preempt |= a.no_preempt;
                spec
            });
    }
    if f.image.is_none() && f.command.as_ref().is_none_or(|c| c.is_empty()) {
        return Err(exit::bad_input(match &a.file {
            Some(path) => {
                format!("{path}: no command: give `command = [...]` in the file or -- CMD...")
            }
            None => {
                "nothing to run: give a job spec FILE, --image REF or -- CMD... (see hetsched submit --help)"
                    .to_string()
            }
        }));
    }
    f.to_spec(&default_user())
        .map_err(|e| exit::bad_input(e.to_string()))
        .map(|mut spec| {
            spec.no_preempt |= a.no_preempt;
            spec
        })
}
