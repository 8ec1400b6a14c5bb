//! What must hold: `hetsched plan-batch --compare --json` reports the planner's own makespan
//! beside the chosen one and every baseline, and `--planner-only` prints the planner's own
//! schedule, whichever schedule is best.

use serde_json::Value;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_hetsched");

fn sample(name: &str) -> String {
    format!("{}/deploy/samples/plan/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `hetsched plan-batch ARGS`; returns (exit code, stdout, stderr).
fn plan_batch(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("plan-batch")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON line, the last of stdout.
fn json_line(stdout: &str) -> Value {
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).expect("the last line is JSON")
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {v}"))
}

#[test]
fn compare_json_reports_planner_and_every_baseline() {
    for file in ["small.json", "course.txt"] {
        let (code, out, err) = plan_batch(&[&sample(file), "--compare", "--json"]);
        assert_eq!(code, 0, "{file}: {err}");
        // The comparison table comes first, with a row per baseline.
        assert!(out.contains("uniform_lpt"), "{file}: {out}");
        let v = json_line(&out);
        let makespan = num(&v, "makespan");
        let planner = num(&v, "planner_makespan");
        assert_eq!(v["planner"], v["planner_makespan"], "{file}");
        let lower = num(&v, "lower_bound");
        let b = &v["baselines"];
        let baselines = [
            num(b, "round_robin"),
            num(b, "weighted"),
            num(b, "uniform_lpt"),
        ];
        // The chosen schedule is the best of the planner's and the baselines'.
        let best = baselines.iter().copied().fold(planner, f64::min);
        assert_eq!(makespan, best, "{file}: {v}");
        for ms in baselines.into_iter().chain([planner]) {
            assert!(ms >= lower * (1.0 - 1e-9), "{file}: {ms} below {lower}");
        }
        let chosen = v["chosen"].as_str().expect("chosen");
        assert!(
            ["planner", "round_robin", "weighted", "uniform_lpt"].contains(&chosen),
            "{file}: {chosen}"
        );
    }
}

#[test]
fn planner_only_prints_the_planners_own_schedule() {
    let file = sample("small.json");
    let (code, out, err) = plan_batch(&[&file, "--json"]);
    assert_eq!(code, 0, "{err}");
    let all = json_line(&out);
    let (code, out, err) = plan_batch(&[&file, "--json", "--planner-only"]);
    assert_eq!(code, 0, "{err}");
    let own = json_line(&out);
    assert_eq!(own["chosen"], "planner");
    assert_eq!(own["makespan"], all["planner_makespan"]);
    assert_eq!(own["planner_makespan"], all["planner_makespan"]);
    assert_eq!(own["baselines"], all["baselines"]);
    if all["chosen"] == "planner" {
        assert_eq!(own["schedule"], all["schedule"]);
    }
    let jobs = own["schedule"].as_array().expect("schedule");
    assert_eq!(jobs.len(), 3);

    // The text form prints the same schedule: one line per job, then the summary.
    let (code, out, err) = plan_batch(&[&file, "--planner-only"]);
    assert_eq!(code, 0, "{err}");
    let summary = out.lines().last().expect("summary");
    assert!(summary.contains("chosen planner"), "{out}");
    let ms = num(&own, "makespan");
    assert!(summary.starts_with(&format!("makespan {ms:.3} s")), "{out}");
}
