//! The deploy files (deploy/Dockerfile, deploy/compose.yaml, deploy/k8s/*.yaml,
//! deploy/systemd/*.service) pass their offline checks, and a copy of each broken by hand
//! fails its check: runs `deploy/validate --self-test`.
//!
//! Needs python3 (the checks install their tools into a virtual environment, see
//! deploy/validate). Without python3, or where the tools cannot be installed (exit 3), the
//! test is skipped with a message, except under `CI=true`, where it fails.

use std::path::Path;
use std::process::Command;

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn skip(why: &str) {
    if under_ci() {
        panic!("CI=true but {why}");
    }
    eprintln!("SKIPPED: {why}");
}

#[test]
fn deploy_files_validate_and_broken_copies_are_refused() {
    if Command::new("python3").arg("--version").output().is_err() {
        skip("no python3 on this machine (deploy/validate needs it)");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/validate");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--self-test")
        .output()
        .expect("run bash deploy/validate --self-test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        skip(&format!(
            "deploy/validate could not install its tools: {stderr}"
        ));
        return;
    }
    assert!(
        out.status.success(),
        "deploy/validate --self-test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("refused as expected"),
        "the self-test broke no file:\n{stdout}"
    );
}
