//! Flow files (issue 51) on real processes, secured, default flags: a prep → train (4
//! tasks) → eval (task i after train's task i) → publish flow runs in that order (stamps
//! written by the tasks), `flow N --json` shows each step's job and state, `cancel flow-N`
//! cancels every unfinished step, a cycle and an unknown step are refused with exit 2
//! naming the file, line and steps; and a leader killed around a flow's submit leaves every
//! step's job or none.

mod support;

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(90);

/// A step table running `sh -c SCRIPT`, `{d}` in the script the scratch dir and `$I` the
/// task's index; `extra` holds more keys (`count = 4`, `needs = [...]`).
fn step(dir: &Path, name: &str, extra: &str, script: &str) -> String {
    let script = format!(
        "I=$HETSCHED_TASK_INDEX; {}",
        script.replace("{d}", &dir.display().to_string())
    );
    format!("[[step]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", '{script}']\n{extra}\n\n")
}

/// Writes `text` as `name` in the scratch dir; its path.
fn write(c: &Cluster, name: &str, text: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, text).expect("write the flow file");
    p.display().to_string()
}

/// `flow ID --json`.
fn flow(c: &Cluster, id: u64) -> Value {
    c.json(&["flow", &id.to_string()]).unwrap_or(Value::Null)
}

/// The steps' states of `flow ID --json`, in the file's order.
fn states(f: &Value) -> Vec<(String, String)> {
    f["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| {
                    let field = |k: &str| s[k].as_str().unwrap_or_default().to_string();
                    (field("name"), field("state"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_flow_runs_in_order_reports_its_steps_cancels_whole_and_refuses_cycles() {
    let c = Cluster::start("flows", 1, 2, 4);
    c.wait_nodes_up(2, WAIT);
    c.scenario(|c| {
        let d = c.dir.path();
        let text = [
            step(d, "prep", "", &stamped("prep", "1")),
            step(
                d,
                "train",
                "count = 4\nneeds = [\"prep\"]",
                &stamped("train-$I", "1"),
            ),
            step(
                d,
                "eval",
                "count = 4\neach = \"train\"",
                &stamped("eval-$I", "0.$I"),
            ),
            step(d, "publish", "needs = [\"eval\"]", &stamped("publish", "0")),
        ]
        .concat();
        let path = write(c, "flow.toml", &text);
        let sub = c.json(&["submit-flow", &path]).expect("submit-flow");
        let id = sub["flow_id"].as_u64().expect("flow_id");
        let jobs = &sub["jobs"];
        let job = |n: &str| jobs[n].as_u64().unwrap_or_else(|| panic!("{n} in {sub}"));
        assert!(
            job("prep") < job("train") && job("train") < job("eval"),
            "{sub}"
        );

        let done = wait_for("the flow's publish step succeeded", WAIT, || {
            let f = flow(c, id);
            let s = states(&f);
            assert!(
                s.iter()
                    .all(|(_, st)| !matches!(st.as_str(), "failed" | "cancelled")),
                "{f}"
            );
            (s.last()?.1 == "succeeded").then_some(f)
        });
        let want: Vec<(String, String)> = ["prep", "train", "eval", "publish"]
            .iter()
            .map(|n| (n.to_string(), "succeeded".to_string()))
            .collect();
        assert_eq!(states(&done), want, "{done}");
        for s in done["steps"].as_array().expect("steps") {
            let name = s["name"].as_str().unwrap_or_default();
            assert_eq!(s["job_id"].as_u64(), Some(job(name)), "{done}");
        }
        assert_eq!(done["steps"][1]["tasks"].as_u64(), Some(4));

        // The order, from the tasks' own stamps.
        let prep_end = stamp(c, "prep.end");
        for i in 0..4 {
            let train = (
                stamp(c, &format!("train-{i}.start")),
                stamp(c, &format!("train-{i}.end")),
            );
            assert!(prep_end <= train.0, "train {i} started before prep ended");
            assert!(
                train.1 <= stamp(c, &format!("eval-{i}.start")),
                "eval {i} started before train {i} ended"
            );
            assert!(
                stamp(c, &format!("eval-{i}.end")) <= stamp(c, "publish.start"),
                "publish started before eval {i} ended"
            );
        }

        // `cancel flow-N`: the running step and the one waiting for it.
        let text = [
            step(d, "hold", "", &stamped("hold", "60")),
            step(d, "after", "needs = [\"hold\"]", "true"),
        ]
        .concat();
        let path = write(c, "hold.toml", &text);
        let held = c.json(&["submit-flow", &path]).expect("submit-flow")["flow_id"]
            .as_u64()
            .expect("flow_id");
        wait_for("hold running", WAIT, || {
            (states(&flow(c, held)).first()?.1 == "running").then_some(())
        });
        let name = format!("flow-{held}");
        let out = c.json(&["cancel", &name]).expect("cancel flow");
        assert_eq!(out["cancelled"].as_u64(), Some(2), "{out}");
        assert_eq!(out["flow_id"].as_u64(), Some(held), "{out}");
        let f = wait_for("every step cancelled", WAIT, || {
            let f = flow(c, held);
            states(&f)
                .iter()
                .all(|(_, s)| s == "cancelled")
                .then_some(f)
        });
        assert_eq!(states(&f).len(), 2, "{f}");

        // Refused before anything is sent: a cycle and an unknown step, exit 2 with the
        // file, line and steps.
        let text = [
            step(d, "prep", "needs = [\"train\"]", "true"),
            step(d, "train", "needs = [\"prep\"]", "true"),
        ]
        .concat();
        let path = write(c, "cycle.toml", &text);
        let out = c.cli(&["submit-flow", &path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
        assert!(err.contains(&format!("{path}:2:")), "{err}");
        assert!(err.contains("cycle: prep → train → prep"), "{err}");
        let path = write(
            c,
            "unknown.toml",
            &step(d, "a", "needs = [\"nope\"]", "true"),
        );
        let out = c.cli(&["submit-flow", &path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
        assert!(err.contains("unknown step \"nope\""), "{err}");
        let before = c.json(&["jobs"]).and_then(|j| j.as_array().map(Vec::len));
        assert_eq!(before, Some(6), "refused flows submitted nothing");
        let out = c.cli(&["flow", "99"]);
        assert_eq!(out.status.code(), Some(4), "{}", output_text(&out));
    });
}

#[test]
fn a_leader_killed_around_a_flow_submit_leaves_every_step_or_none() {
    let mut c = Cluster::start("flows-kill", 3, 1, 4);
    c.wait_leader(WAIT);
    c.wait_nodes_up(1, WAIT);
    let d = c.dir.path().to_path_buf();
    let text: String = (0..5)
        .map(|i| {
            let needs = if i == 0 {
                String::new()
            } else {
                format!("needs = [\"s{}\"]", i - 1)
            };
            step(&d, &format!("s{i}"), &needs, "true")
        })
        .collect();
    let path = write(&c, "kill.toml", &text);
    let leader = c.wait_leader(WAIT);
    let masters = c.masters_arg();
    // The submit and the kill race: whichever wins, the flow is whole or absent.
    let submit = std::thread::spawn(move || cli_with(&masters, &["submit-flow", "--json", &path]));
    c.masters[(leader - 1) as usize].kill9();
    let out = submit.join().expect("the submit thread");
    wait_for("a new leader", WAIT, || {
        let l = c.json(&["status"])?.get("leader")?.as_u64()?;
        (l != leader).then_some(())
    });
    c.masters[(leader - 1) as usize].restart().expect("restart");
    c.wait_same_hash(WAIT);
    let jobs = c
        .json(&["jobs"])
        .and_then(|j| j.as_array().cloned())
        .expect("jobs");
    let steps = jobs
        .iter()
        .filter(|j| j["name"].as_str().is_some_and(|n| n.starts_with('s')))
        .count();
    assert!(steps == 0 || steps == 5, "{steps} of 5 steps: {jobs:?}");
    if out.status.success() {
        assert_eq!(
            steps,
            5,
            "acknowledged, so every step: {}",
            output_text(&out)
        );
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(str::to_string);
        let sub: Value = serde_json::from_str(&line.unwrap_or_default()).expect("json");
        let f = flow(&c, sub["flow_id"].as_u64().expect("flow_id"));
        assert_eq!(states(&f).len(), 5, "{f}");
        wait_for("the chain done", WAIT, || {
            states(&flow(&c, sub["flow_id"].as_u64()?))
                .iter()
                .all(|(_, s)| s == "succeeded")
                .then_some(())
        });
    }
}
