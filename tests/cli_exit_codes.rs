//! What must hold, the parts that need no cluster: `--help` of every subcommand
//! (with the exit-code table), a malformed spec file names field, line and column and exits
//! 2, bad input exits 2, and with no master reachable a command exits 5 within the client
//! timeout. The exit codes are docs/CONTRACT.md's.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{Scratch, BIN};

fn run(args: &[&str], timeout_ms: &str) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", timeout_ms)
        .env_remove("HETSCHED_MASTERS")
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The subcommands a `--help` text lists under "Commands:" (without `help`).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommand_has_help_with_the_exit_codes() {
    let (code, top, _) = run(&["--help"], "1000");
    assert_eq!(code, 0);
    let mut todo: Vec<Vec<String>> = listed_commands(&top).into_iter().map(|c| vec![c]).collect();
    for must in [
        "submit",
        "cancel",
        "status",
        "jobs",
        "tasks",
        "nodes",
        "logs",
        "watch",
        "drain",
        "undrain",
        "job",
        "completions",
    ] {
        assert!(
            todo.iter().any(|p| p[0] == must),
            "{must} missing from --help:\n{top}"
        );
    }
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, out, err) = run(&args, "1000");
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("Usage:"), "{args:?}:\n{out}");
        assert!(
            out.contains("Exit codes:"),
            "{args:?} lacks the exit codes:\n{out}"
        );
        assert!(out.contains("4  not found"), "{args:?}:\n{out}");
        for sub in listed_commands(&out) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} commands checked");
}

#[test]
fn a_malformed_spec_names_field_line_and_column_and_exits_2() {
    let dir = Scratch::new("bad-spec");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "name = \"x\"\ncommand = [\"true\"]\n[resources]\ncpus = \"lots\"\n",
    )
    .expect("write");
    let f = file.display().to_string();
    let (code, _, err) = run(&["job", "validate", &f], "1000");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cpus"), "{err}");
    assert!(err.contains(":4:8:"), "line 4, column 8: {err}");
    // The same through submit: refused before any master is asked.
    let (code, _, err) = run(&["--masters", "127.0.0.1:1", "submit", &f], "1000");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("field `resources.cpus`"), "{err}");
    // --json describes the error too.
    let (code, out, _) = run(&["job", "validate", "--json", &f], "1000");
    assert_eq!(code, 2);
    let v: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("a line")).expect("json");
    assert_eq!(v["valid"], false);
    assert_eq!(v["field"], "resources.cpus");
    assert_eq!(v["line"], 4);
    assert_eq!(v["column"], 8);
    // JSON files are located the same way.
    let jf = dir.path().join("bad.json");
    std::fs::write(
        &jf,
        "{\n  \"command\": [\"true\"],\n  \"count\": \"four\"\n}\n",
    )
    .expect("write");
    let (code, _, err) = run(&["job", "validate", &jf.display().to_string()], "1000");
    assert_eq!(code, 2);
    assert!(
        err.contains("field `count`") && err.contains(":3:"),
        "{err}"
    );
    // A missing file and an unknown field are bad input as well.
    let (code, _, err) = run(&["job", "validate", "/nonexistent/spec.toml"], "1000");
    assert_eq!(code, 2, "{err}");
    std::fs::write(&file, "comand = [\"true\"]\n").expect("write");
    let (code, _, err) = run(&["job", "validate", &f], "1000");
    assert_eq!(code, 2);
    assert!(err.contains("comand"), "{err}");
}

#[test]
fn the_sample_spec_files_are_valid() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/samples/jobs");
    let mut n = 0;
    for e in std::fs::read_dir(&samples).expect("samples dir") {
        let p = e.expect("entry").path();
        let (code, out, err) = run(&["job", "validate", &p.display().to_string()], "1000");
        assert_eq!(code, 0, "{}: {err}", p.display());
        assert!(out.contains("valid"), "{out}");
        n += 1;
    }
    assert!(n >= 2, "two samples expected in {}", samples.display());
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["--no-such-flag", "status"],
        vec!["frobnicate"],
        vec!["--masters", "127.0.0.1:1", "submit"],
        vec![
            "--masters",
            "127.0.0.1:1",
            "submit",
            "--cpus",
            "lots",
            "--",
            "true",
        ],
        vec![
            "--masters",
            "127.0.0.1:1",
            "submit",
            "--cpus",
            "-1",
            "--",
            "true",
        ],
        vec![
            "--masters",
            "127.0.0.1:1",
            "submit",
            "--backoff",
            "soon",
            "--",
            "true",
        ],
        vec![
            "--masters",
            "127.0.0.1:1",
            "submit",
            "--env",
            "NOEQUALS",
            "--",
            "true",
        ],
        vec!["--masters", "127.0.0.1:1", "cancel"],
        vec!["--masters", "127.0.0.1:1", "cancel", "lots"],
        vec!["--masters", "127.0.0.1:1", "jobs", "job-x"],
        vec![
            "--masters",
            "127.0.0.1:1",
            "drain",
            "n1",
            "--deadline",
            "whenever",
        ],
        vec!["--masters", "not-an-address", "status"],
        vec!["status"],
        vec!["completions", "tcsh-or-so"],
    ] {
        let (code, _, err) = run(&args, "1000");
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line expected: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn with_no_master_reachable_a_command_exits_5_within_the_client_timeout() {
    for args in [
        vec!["status"],
        vec!["jobs", "999999"],
        vec!["tasks", "--state", "failed"],
        vec!["submit", "--", "true"],
        vec!["cancel", "job-3"],
        vec!["logs", "task-1"],
        vec!["watch", "1"],
        vec!["drain", "n1"],
    ] {
        let mut a = vec!["--masters", "127.0.0.1:1,127.0.0.1:2"];
        a.extend(args.iter().copied());
        let start = Instant::now();
        let (code, _, err) = run(&a, "1500");
        let took = start.elapsed();
        assert_eq!(code, 5, "{a:?}: {err}");
        assert!(err.contains("no leader answered within"), "{a:?}: {err}");
        // The timeout plus process start-up on a loaded machine.
        assert!(
            took < Duration::from_millis(1500 + 3000),
            "{a:?} took {took:?}"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(&["completions", shell], "1000");
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains("hetsched"), "{shell}");
        assert!(out.contains("drain"), "{shell}: subcommands are completed");
    }
}
