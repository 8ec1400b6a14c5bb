//! `deploy/check-gpu-host.sh --s0 BINARY` runs end to end here: no NVIDIA GPU, so the
//! "gpu" engine is emulated and its gemm plug-in (deploy/plugins/gemm) runs on NumPy; every
//! check passes and the ratio line is labelled emulated. Smaller sizes than on a GPU host
//! (S0_GEMM_N, S0_PROFILE_BUDGET) keep it to seconds.
//!
//! Needs python3 with NumPy (CI installs python3-numpy): skipped with a message without it,
//! except under `CI`, where it fails.

mod support;

use std::process::Command;
use support::*;

#[test]
fn the_s0_part_runs_emulated_and_prints_its_ratio() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let numpy = Command::new(root.join("deploy/plugins/gemm"))
        .arg("--backend")
        .output()
        .is_ok_and(|o| o.status.success());
    if !numpy {
        assert!(
            std::env::var_os("CI").is_none(),
            "the gemm plug-in needs python3 with NumPy (apt-get install python3-numpy)"
        );
        eprintln!("SKIPPED: no python3 with NumPy for deploy/plugins/gemm");
        return;
    }
    let dir = Scratch::new("gpu-s0");
    let out = Command::new("timeout")
        .arg("300")
        .arg("bash")
        .arg(root.join("deploy/check-gpu-host.sh"))
        .arg("--s0")
        .arg(BIN)
        .arg(dir.path().join("out"))
        .env("S0_GEMM_N", "192")
        .env("S0_PROFILE_BUDGET", "3s")
        .env_remove("HETSCHED_MASTERS")
        .env_remove("HETSCHED_CERTS_DIR")
        .env_remove("HETSCHED_TOKEN")
        .output()
        .expect("run deploy/check-gpu-host.sh --s0");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!("{stdout}\n--- stderr\n{stderr}");
    assert!(out.status.success(), "exit {}: {report}", out.status);
    assert!(!stdout.contains("FAIL "), "{report}");
    for want in [
        "PASS both slaves profiled",
        "PASS on: the profile ranks",
        "PASS digests of exact results agree",
        "PASS plug-in results within tolerance",
    ] {
        assert!(stdout.contains(want), "no {want:?}: {report}");
    }
    let ratio = stdout
        .lines()
        .find(|l| l.starts_with("S0 makespan ratio off/on = "))
        .unwrap_or_else(|| panic!("no ratio line: {report}"));
    assert!(ratio.contains("[emulated"), "{ratio}");
    eprintln!("{ratio}");
}
