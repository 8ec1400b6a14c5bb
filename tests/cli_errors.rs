//! What must hold: a bad flag, an unreachable master list, or a malformed command line
//! gives a one-line error and a non-zero exit code, not a panic.

mod support;

use std::process::{Command, Stdio};
use support::BIN;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "1500")
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

fn assert_one_line_error(args: &[&str]) {
    let (code, _out, err) = run(args);
    assert_ne!(code, 0, "{args:?} must fail");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?} printed {} lines: {err}",
        lines.len()
    );
    assert!(lines[0].starts_with("error: "), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn bad_flag() {
    assert_one_line_error(&["--no-such-flag", "status"]);
    assert_one_line_error(&["status", "--bogus"]);
    assert_one_line_error(&["submit", "--cpus", "lots", "--", "true"]);
}

#[test]
fn malformed_command_lines() {
    assert_one_line_error(&["submit"]);
    assert_one_line_error(&["frobnicate"]);
    assert_one_line_error(&["--masters", "not-an-address", "status"]);
    assert_one_line_error(&[
        "--masters",
        "127.0.0.1:1",
        "submit",
        "--cpus",
        "-1",
        "--",
        "true",
    ]);
    assert_one_line_error(&[
        "master",
        "--id",
        "0",
        "--listen",
        "127.0.0.1:1",
        "--peers",
        "1=127.0.0.1:1",
        "--data-dir",
        "/tmp/x",
    ]);
    assert_one_line_error(&[
        "master",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:1",
        "--peers",
        "1=nowhere",
        "--data-dir",
        "/tmp/x",
    ]);
}

#[test]
fn engine_choice_bounds_outside_zero_to_one_are_usage_errors() {
    for (flag, value) in [
        ("--load-bound", "1.5"),
        ("--load-bound", "0"),
        ("--engine-efficiency-bound", "abc"),
    ] {
        let args = [
            "master",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1",
            "--data-dir",
            "/tmp/x",
            flag,
            value,
        ];
        assert_one_line_error(&args);
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(flag), "{err}");
    }
}

#[test]
fn unreachable_masters() {
    // Port 1 on loopback refuses connections.
    assert_one_line_error(&["--masters", "127.0.0.1:1,127.0.0.1:2", "status"]);
    assert_one_line_error(&["--masters", "127.0.0.1:1", "submit", "--", "true"]);
    assert_one_line_error(&["status"]);
}

#[test]
fn help_and_version_succeed() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("submit"));
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("hetsched "));
}

/// S3.2/S3.6 flags: bad values are usage errors (exit 2) with one line, checked
/// before any master is contacted.
#[test]
fn bad_cpu_search_and_contention_flags() {
    let m = "127.0.0.1:1";
    for args in [
        vec![
            "--masters",
            m,
            "submit",
            "--gpus",
            "1",
            "--class",
            "video",
            "--",
            "true",
        ],
        vec!["--masters", m, "submit", "--class", "image", "--", "true"],
        vec![
            "--masters",
            m,
            "submit",
            "--gpus",
            "1",
            "--pipelined",
            "--",
            "true",
        ],
        vec![
            "--masters",
            m,
            "submit",
            "--gpus",
            "1",
            "--cpus",
            "1.5",
            "--class",
            "nlp",
            "--",
            "true",
        ],
        vec![
            "slave",
            "--listen",
            "127.0.0.1:1",
            "--masters",
            m,
            "--data-dir",
            "/tmp/x",
            "--cpus",
            "1",
            "--mem",
            "1",
            "--membw-threshold",
            "150%",
        ],
        vec![
            "slave",
            "--listen",
            "127.0.0.1:1",
            "--masters",
            m,
            "--data-dir",
            "/tmp/x",
            "--cpus",
            "1",
            "--mem",
            "1",
            "--membw-total",
            "-5",
        ],
        vec![
            "master",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1",
            "--data-dir",
            "/tmp/x",
            "--util-epsilon",
            "much",
        ],
        vec![
            "master",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1",
            "--data-dir",
            "/tmp/x",
            "--probe-period",
            "soon",
        ],
    ] {
        assert_one_line_error(&args);
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}
