//! Issue 55: the Python client (`clients/python`, package `hetsched`) as part of the test
//! suite, so that the README's one test command (`cargo test --workspace`) runs it: mypy
//! `--strict` on the package and its tests, its pytest suite against a real
//! `hetsched up --no-demo` cluster of this build, and `pip install ./clients/python` into a
//! fresh virtualenv with no package index (offline).
//!
//! Needs Debian's `python3-pytest`, `mypy` and `python3-venv` for `/usr/bin/python3` (the
//! interpreter apt installs them for; `HETSCHED_PYTHON` names another): `.ci/run` installs
//! them. Without them the test is skipped with a message, except under `CI=true`, where it
//! fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The interpreter: `HETSCHED_PYTHON`, else Debian's, else the PATH's.
fn python() -> String {
    if let Ok(p) = std::env::var("HETSCHED_PYTHON") {
        return p;
    }
    if Path::new("/usr/bin/python3").exists() {
        return "/usr/bin/python3".into();
    }
    "python3".into()
}

fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether the interpreter has pytest, mypy and venv; else skips (fails under CI=true).
fn tools_present(py: &str) -> bool {
    let probe = Command::new(py)
        .args(["-c", "import pytest, mypy, venv, ensurepip"])
        .output();
    if probe.as_ref().is_ok_and(|o| o.status.success()) {
        return true;
    }
    let why = probe.map_or_else(|e| e.to_string(), |o| text(&o));
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true but {py} lacks pytest, mypy or venv (.ci/run installs python3-pytest, \
             mypy and python3-venv with apt): {why}"
        );
    }
    eprintln!("skipped: {py} lacks pytest, mypy or venv: {why}");
    false
}

#[test]
fn the_python_client_types_tests_and_installs_offline() {
    let py = python();
    if !tools_present(&py) {
        return;
    }
    let dir = client_dir();
    let mypy = Command::new(&py)
        .args(["-m", "mypy", "--strict", "--cache-dir=/dev/null"])
        .args(["hetsched", "_build", "tests"])
        .current_dir(&dir)
        .output()
        .expect("run mypy");
    assert!(mypy.status.success(), "mypy --strict: {}", text(&mypy));
    let pytest = Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&dir)
        .env("HETSCHED_BIN", env!("CARGO_BIN_EXE_hetsched"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest");
    println!("{}", String::from_utf8_lossy(&pytest.stdout));
    assert!(pytest.status.success(), "pytest: {}", text(&pytest));
    let venv = std::env::temp_dir().join(format!("hetsched-venv-{}", std::process::id()));
    let made = Command::new(&py)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .expect("make a venv");
    assert!(made.status.success(), "venv: {}", text(&made));
    // A copy, so that the build leaves nothing in the source tree.
    let src = venv.join("src");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&dir)
        .arg(&src)
        .output()
        .expect("cp");
    assert!(copied.status.success(), "{}", text(&copied));
    let pip = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--no-index",
            "--no-cache-dir",
            "--disable-pip-version-check",
        ])
        .arg(&src)
        .output()
        .expect("run pip");
    assert!(pip.status.success(), "pip install offline: {}", text(&pip));
    let import = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import hetsched, os; \
             assert os.path.exists(os.path.join(os.path.dirname(hetsched.__file__), 'py.typed')); \
             print(hetsched.__version__)",
        ])
        .current_dir(&venv)
        .output()
        .expect("import");
    assert!(import.status.success(), "{}", text(&import));
    assert_eq!(
        String::from_utf8_lossy(&import.stdout).trim(),
        env!("CARGO_PKG_VERSION")
    );
    let _ = std::fs::remove_dir_all(&venv);
}
