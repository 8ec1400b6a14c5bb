//! Executing an attempt's task as its [`Spec`] says: its own process group, output appended to
//! its log files, its cgroups joined before it executes. The pool ([`super::pool::server`])
//! starts every command task this way.

use super::files::{cannot_start, ExitRecord, Spec};
use std::io::Write;
use std::path::Path;

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Appends `hetsched: LINE` to the task's stderr log (best effort).
pub fn note(spec: &Spec, line: &str) {
    if let Ok(mut f) = open_append(&spec.stderr) {
        let _ = writeln!(f, "hetsched: {line}");
    }
}

/// Starts the task as [`task_command`] describes it, through [`crate::vspawn`] (no copy of
/// the caller's address space: the pool's way), without the variables `remove` of the
/// caller's environment, its log files taken from `spares` when it can. `Err` is the attempt's `cannot_start` record when its files cannot
/// be opened; the inner result is the task's pid or why it did not execute.
pub fn task_spawn(
    spec: &Spec,
    remove: &[&str],
    spares: &crate::log_spares::Spares,
) -> Result<std::io::Result<i32>, ExitRecord> {
    if spec.argv.is_empty() {
        note(spec, "empty command");
        return Err(cannot_start("empty command".into()));
    }
    if let Some(dir) = spec.cwd.as_deref().filter(|d| !d.is_dir()) {
        let why = format!(
            "working directory {} is not a directory here",
            dir.display()
        );
        note(spec, &why);
        return Err(cannot_start(why));
    }
    // Spares only for attempts in cgroups, whose files are recycled (`Spec::keep_output`).
    let open = |p: &Path| {
        if spec.cgroup_procs.is_empty() {
            open_append(p)
        } else {
            spares.open_append(p)
        }
    };
    let (out, err) = match (open(&spec.stdout), open(&spec.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return Err(cannot_start(format!("cannot open log files: {e}")));
        }
    };
    let procs = open_procs(spec);
    Ok(crate::vspawn::Spawn {
        argv: &spec.argv,
        env: &spec.env,
        remove,
        stdout: &out,
        stderr: &err,
        procs: &procs,
        cwd: spec.cwd.as_deref(),
    }
    .spawn())
}

/// The task's `cgroup.procs` files, opened for the child to join them before it executes
/// (no process of the task ever runs outside them).
fn open_procs(spec: &Spec) -> Vec<std::fs::File> {
    let mut procs = Vec::new();
    for p in &spec.cgroup_procs {
        match std::fs::OpenOptions::new().write(true).open(p) {
            Ok(f) => procs.push(f),
            Err(e) => eprintln!("hetsched supervise: cannot join {}: {e}", p.display()),
        }
    }
    procs
}
