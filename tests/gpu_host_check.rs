//! `deploy/check-gpu-host.sh`, the end-to-end check of the real GPU probes, keeps working
//! with the CLI it drives: on a host without NVIDIA GPUs the NVML checks fail and every other
//! check passes (GPU tasks see their device, two half-GPU tasks share one, a container task
//! sees no device node and its CUDA_VISIBLE_DEVICES); on a host with
//! them (`nvidia-smi` on the PATH) every check passes.
//!
//! Needs python3 (the script reads JSON and runs its tasks with it): skipped with a message
//! without it, except under `CI=true`, where it fails.

mod support;

use std::process::Command;
use support::*;

#[test]
fn gpu_host_check_passes_everything_but_nvml_without_a_gpu() {
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true but no python3"
        );
        eprintln!("SKIPPED: no python3 on this machine (the script needs it)");
        return;
    }
    let dir = Scratch::new("gpu-check");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/check-gpu-host.sh");
    let out = Command::new("timeout")
        .arg("240")
        .arg("bash")
        .arg(&script)
        .arg(BIN)
        .arg(dir.path().join("out"))
        .env("GPU_CHECK_MASTERS", "1")
        .env("GPU_CHECK_BUSY_SECONDS", "2")
        // The S0 part has its own test (tests/gpu_host_s0_check.rs).
        .env("GPU_CHECK_S0", "0")
        .env_remove("HETSCHED_MASTERS")
        .env_remove("HETSCHED_CERTS_DIR")
        .env_remove("HETSCHED_TOKEN")
        .output()
        .expect("run deploy/check-gpu-host.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let says = |line: &str| stdout.lines().any(|l| l.starts_with(line));
    let has_gpu = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success());
    if has_gpu {
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    for pass in [
        "PASS the GPU task succeeded",
        "PASS the task sees device 0 alone",
        "PASS both half-GPU tasks succeeded",
        "PASS the two half-GPU tasks overlapped in time",
    ] {
        assert!(says(pass), "missing {pass:?}:\n{stdout}\n{stderr}");
    }
    assert!(says("FAIL real GPUs offered through NVML"), "{stdout}");
    // The container step: run on the emulated GPUs where the slave has a runtime (root and
    // runc) and there is a static busybox, else skipped saying why.
    assert!(
        says("PASS the container task sees exactly its device") || says("SKIP the container step"),
        "{stdout}\n{stderr}"
    );
    let other_failures: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FAIL") && !l.contains("NVML"))
        .collect();
    assert!(
        other_failures.is_empty(),
        "{other_failures:?}\n{stdout}\n{stderr}"
    );
}
