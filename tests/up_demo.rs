//! `hetsched up`'s demo shows S0 every time: a call on a non-CPU engine chosen by the
//! profile and a call forwarded to another slave, in each of three runs; the third sized by
//! `--slave-cpus 3 --slave-mem 3072`, which the slaves declare exactly.

mod support;

use std::process::{Command, Stdio};
use support::*;

/// One `up` run to the end; its stdout (the summary), or a failure with its logs.
fn up(dir: &Scratch, run: u32, extra: &[&str]) -> String {
    let data = dir.path().join(format!("up-{run}"));
    let out = Command::new(BIN)
        .args(["up", "--masters", "1", "--slaves", "2", "--timeout", "150"])
        .args(extra)
        .arg("--data-dir")
        .arg(&data)
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run up");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "up run {run} failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// The lines of `section` (from its heading to the next one at the same indent).
fn section<'a>(out: &'a str, heading: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with(heading))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect()
}

#[test]
fn up_shows_an_engine_chosen_by_the_profile_and_a_forwarded_call_every_run() {
    let dir = Scratch::new("up-demo");
    for run in 1..=3 {
        let sized = run == 3;
        let extra: &[&str] = if sized {
            &["--slave-cpus", "3", "--slave-mem", "3072"]
        } else {
            &[]
        };
        let out = up(&dir, run, extra);
        let program = section(&out, "program ");
        assert!(
            program
                .iter()
                .any(|l| l.contains(" gemm ") && l.contains(" on gpu")),
            "run {run}: no gemm call on the GPU engine:\n{out}"
        );
        let forwarding = section(&out, "forwarding:");
        assert!(
            forwarding.iter().any(|l| l.contains("forwarded to slave-")),
            "run {run}: no forwarded call:\n{out}"
        );
        let nodes: Vec<&str> = out.lines().filter(|l| l.starts_with("  node ")).collect();
        assert_eq!(nodes.len(), 2, "run {run}:\n{out}");
        if sized {
            assert!(
                nodes.iter().all(|l| l.contains(" 3 cores, 3072 MiB")),
                "run {run}: --slave-cpus 3 --slave-mem 3072:\n{out}"
            );
        }
    }
}
