//! Done when: a program of gemm, sort and sha256 calls on a slave with an emulated
//! GPU (speed 8 for gemm) runs gemm on the GPU engine and the others where the selection
//! table says; `calls --json` digests equal those of the same calls run on the CPU; `tasks
//! --json` summarises the calls; `nodes --json` lists the engines; `profiles --json` holds
//! the slave's table and the program's task–engine relation.

mod support;

use hetsched_common::program::{read_program, Api};
use hetsched_slave::engine::kernels;
use serde_json::Value;
use std::time::Duration;
use support::*;

const PROGRAM: &str = r#"
[[call]]
api = "gemm"
args = { n = 128, seed = 1 }

[[call]]
api = "sort"
args = { items = 20000, seed = 2 }

[[call]]
api = "sha256"
args = { bytes = 100000, seed = 3 }
"#;

#[test]
fn program_runs_gemm_on_the_emulated_gpu_with_cpu_digests() {
    let c = Cluster::start("programs", 1, 0, 2);
    let engines = c.dir.path().join("engines.toml");
    std::fs::write(
        &engines,
        "[[engine]]\nkind = \"gpu\"\nemulated = true\nspeed = { gemm = 8.0 }\n",
    )
    .expect("write engines file");
    let slave = start_proc(
        "slave-gpu",
        vec![
            "slave".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", free_port()),
            "--masters".into(),
            c.masters_arg(),
            "--data-dir".into(),
            c.dir.path().join("slave-gpu").display().to_string(),
            "--cpus".into(),
            "2".into(),
            "--mem".into(),
            "1024".into(),
            "--gpus".into(),
            "1".into(),
            "--name".into(),
            "gpu-node".into(),
            "--engines".into(),
            engines.display().to_string(),
            "--profile".into(),
            "--profile-budget".into(),
            "8s".into(),
        ],
        c.dir.path(),
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(panic) = result {
        c.dump_logs();
        eprintln!("--- slave-gpu ---\n{}", slave.log_text());
        std::panic::resume_unwind(panic);
    }
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));

    // The slave's engines reach `nodes`; its profile reaches `profiles`.
    let nodes = c.json(&["nodes"]).expect("nodes");
    let engines = nodes[0]["engines"].as_array().expect("engines").clone();
    let gpu = engines
        .iter()
        .find(|e| e["kind"] == "gpu")
        .expect("a gpu engine");
    assert_eq!(gpu["count"], 1);
    assert_eq!(gpu["emulated"], true);
    assert!(engines
        .iter()
        .any(|e| e["kind"] == "cpu" && e["count"] == 2 && e["emulated"] == false));
    wait_for("the slave's profile", Duration::from_secs(90), || {
        let p = c.json(&["profiles"])?;
        let rows = p["nodes"].get(0)?["table"]["rows"].as_array()?.len();
        (rows > 0).then_some(())
    });

    let program_file = c.dir.path().join("prog.toml");
    std::fs::write(&program_file, PROGRAM).expect("write program");
    let prog_arg = program_file.display().to_string();
    // Locality: a typo in --nodes is refused; the real name pins the task there.
    let out = c.cli(&["submit", "--nodes", "no-such-node", "--program", &prog_arg]);
    assert_eq!(out.status.code(), Some(4), "not found: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-such-node"),
        "{out:?}"
    );
    let submitted = c
        .json(&["submit", "--nodes", "gpu-node", "--program", &prog_arg])
        .expect("submit");
    assert!(submitted["job_id"].as_u64().is_some(), "{submitted}");

    let task = wait_for("the program task to end", Duration::from_secs(120), || {
        let t = c.tasks().into_iter().next()?;
        matches!(t["state"].as_str(), Some("succeeded" | "failed")).then_some(t)
    });
    assert_eq!(task["state"], "succeeded", "{task}");
    let id = task["id"].as_u64().expect("id");

    // The summary reaches `tasks` (it is delivered apart from the finish report).
    let task = wait_for("the call summary", Duration::from_secs(30), || {
        c.tasks()
            .into_iter()
            .find(|t| t["id"] == id && !t["calls"].is_null())
    });
    assert_eq!(task["calls"]["total"], 3, "{task}");
    assert_eq!(task["calls"]["forwarded"], 0, "{task}");
    assert_eq!(task["calls"]["by_engine"]["gpu"], 1, "{task}");
    assert_eq!(task["calls"]["by_engine"]["cpu"], 2, "{task}");

    let calls = c
        .json(&["calls", &format!("task-{id}")])
        .expect("calls --json");
    let records = calls["calls"].as_array().expect("records");
    assert_eq!(records.len(), 3, "{calls}");
    let program = read_program(&program_file).expect("program");
    for (r, call) in records.iter().zip(&program.calls) {
        let want = if call.api == Api::Gemm { "gpu" } else { "cpu" };
        assert_eq!(r["engine"], want, "{r}");
        assert_eq!(r["emulated"], call.api == Api::Gemm, "{r}");
        assert_eq!(r["node"], "gpu-node", "{r}");
        assert_eq!(r["forwarded"], false, "{r}");
        assert!(r["duration_ms"].as_f64().is_some(), "{r}");
        let cpu_digest = kernels::digest(&kernels::run(call));
        assert_eq!(r["digest"], Value::from(cpu_digest), "{r}");
    }

    // The relation of the program's kind: only the CPU runs all three APIs here.
    let profiles = c.json(&["profiles"]).expect("profiles");
    let relations = profiles["relations"].as_array().expect("relations");
    assert_eq!(relations.len(), 1, "{profiles}");
    assert_eq!(
        relations[0]["kind"],
        Value::from(program.kind().to_string())
    );
    assert_eq!(relations[0]["engines"][0]["engine"], "cpu", "{profiles}");
    assert!(relations[0]["engines"][0]["total_us"].as_u64() > Some(0));
    // `submit --dry-run` shows the engine kind engine choice picks (S0.1): the CPU here.
    let dry = c
        .json(&["submit", "--dry-run", "--program", &prog_arg])
        .expect("dry run");
    assert_eq!(dry["tasks"][0]["engine"], "cpu", "{dry}");
    assert!(dry["tasks"][0]["node"].as_u64().is_some(), "{dry}");

    // A job spec file may name the program (relative to the file).
    let spec_file = c.dir.path().join("job.toml");
    std::fs::write(
        &spec_file,
        "name = \"from-file\"\nprogram = \"prog.toml\"\nnodes = [\"gpu-node\"]\n",
    )
    .expect("write spec file");
    let submitted = c
        .json(&["submit", &spec_file.display().to_string()])
        .expect("submit a spec file");
    let job2 = submitted["job_id"].as_u64().expect("job_id");
    let t2 = wait_for(
        "the spec-file program to succeed",
        Duration::from_secs(120),
        || {
            c.tasks()
                .into_iter()
                .find(|t| t["job_id"] == job2 && t["state"] == "succeeded")
        },
    );
    let calls2 = c
        .json(&["calls", &t2["id"].to_string()])
        .expect("calls of the second program");
    assert_eq!(
        calls2["calls"].as_array().map(Vec::len),
        Some(3),
        "{calls2}"
    );

    // Unknown tasks are not found (exit 4).
    let out = c.cli(&["calls", "task-99999"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");

    // The text forms work too.
    let out = c.cli(&["calls", &id.to_string()]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("gpu EMULATED"));
}

#[test]
fn bad_program_file_is_refused_before_submitting() {
    let dir = Scratch::new("bad-program");
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "[[call]]\napi = \"fft\"\n").expect("write");
    let out = cli_with(
        "127.0.0.1:1",
        &["submit", "--program", &f.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(2), "bad input: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:2:") && err.contains("fft"), "{err}");
    std::fs::write(&f, "[[call]]\napi = \"gemm\"\nargs = { n = 100000 }\n").expect("write");
    let out = cli_with(
        "127.0.0.1:1",
        &["submit", "--program", &f.display().to_string()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cap"), "{err}");
}
