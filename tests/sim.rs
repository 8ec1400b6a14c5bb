//! `hetsched sim` as a user runs it: deterministic JSON, pod lists without time
//! columns, and bad input answered with exit 2 naming the file, line and column.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use support::{Scratch, BIN};

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\n\
    c0,32000,65536,0,\n\
    g0,32000,131072,2,T4\n\
    g1,64000,262144,8,G2\n\
    g2,16000,65536,4,V100M16\n";

const PODS_TIMED: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
    p0,4000,1024,1,1000,,LS,Running,0,100,0\n\
    p1,2000,1024,1,500,,LS,Running,10,50,10\n\
    p2,8000,1024,0,0,,BE,Running,10,,10\n\
    p3,4000,1024,2,1000,V100M16|V100M32,LS,Running,20,60,25\n\
    p4,4000,1024,4,1000,,LS,Running,30,90,30\n\
    p5,1000,512,1,300,,LS,Running,30,40,30\n\
    p6,30000,1024,1,1000,,LS,Running,31,40,31\n";

/// The variant some published lists use: no gpu_spec, qos, phase or times; columns moved.
const PODS_PLAIN: &str = "gpu_milli,name,num_gpu,memory_mib,cpu_milli\n\
    1000,a,1,1024,4000\n\
    450,b,1,1024,2000\n\
    0,c,0,2048,8000\n\
    1000,d,8,4096,60000\n\
    1000,e,8,4096,60000\n";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write fixture");
    p.to_string_lossy().into_owned()
}

fn sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("sim")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched sim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn last_json(stdout: &str) -> Value {
    let line = stdout.lines().last().expect("a JSON line");
    serde_json::from_str(line).expect("valid JSON")
}

/// The JSON with the wall-clock field removed (the only one allowed to differ).
fn without_sim_ms(mut v: Value) -> Value {
    for r in v["runs"].as_array_mut().expect("runs") {
        r.as_object_mut().expect("run").remove("sim_ms");
    }
    v
}

#[test]
fn same_input_and_seed_give_the_same_json() {
    let dir = Scratch::new("sim-repeat");
    let nodes = write(dir.path(), "nodes.csv", NODES);
    let pods = write(dir.path(), "pods.csv", PODS_TIMED);
    let all = "least-fit,best-fit,first-fit,next-fit,random,frag,auto";
    for extra in [
        &["--mode", "timed", "--time-scale", "5"][..],
        &[
            "--mode",
            "arrival-only",
            "--order",
            "shuffle",
            "--seed",
            "9",
        ][..],
    ] {
        let mut args = vec![
            "--trace-nodes",
            &nodes,
            "--trace-pods",
            &pods,
            "--compare",
            all,
            "--json",
        ];
        args.extend_from_slice(extra);
        let (c1, o1, e1) = sim(&args);
        let (c2, o2, _) = sim(&args);
        assert_eq!((c1, c2), (0, 0), "{e1}");
        let (a, b) = (last_json(&o1), last_json(&o2));
        assert_eq!(a["runs"].as_array().map(Vec::len), Some(7));
        for r in a["runs"].as_array().expect("runs") {
            for key in [
                "policy",
                "placed",
                "failed",
                "first_failure_index",
                "unallocated_gpu_share_at_first_failure",
                "gpu_allocated_share_at_end",
                "cpu_queue_mean_s",
                "gpu_queue_mean_s",
                "gpu_queue_p95_s",
                "preemptions",
                "sim_ms",
            ] {
                assert!(r.get(key).is_some(), "{key} missing in {r}");
            }
        }
        assert_eq!(without_sim_ms(a), without_sim_ms(b), "{extra:?}");
    }
}

#[test]
fn a_pod_list_without_time_columns_replays_arrival_only_in_file_order() {
    let dir = Scratch::new("sim-plain");
    let nodes = write(dir.path(), "nodes.csv", NODES);
    let pods = write(dir.path(), "pods.csv", PODS_PLAIN);
    let svg = dir.path().join("plot.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    let (code, out, err) = sim(&[
        "--trace-nodes",
        &nodes,
        "--trace-pods",
        &pods,
        "--policy",
        "fifo-best-fit",
        "--plot",
        &svg_arg,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = last_json(&out);
    let r = &v["runs"][0];
    assert_eq!(r["policy"], "fifo-best-fit");
    // Arrival-only by default: the second 8-GPU pod (index 4, file order) finds no node.
    assert_eq!(r["placed"], 4, "{r}");
    assert_eq!(r["failed"], 1);
    assert_eq!(r["first_failure_index"], 4);
    assert!(r["unallocated_gpu_share_at_first_failure"].is_number());
    assert!(r["gpu_queue_mean_s"].is_null());
    let plot = std::fs::read_to_string(&svg).expect("plot written");
    assert!(plot.starts_with("<svg") && plot.contains("fifo-best-fit"));
    // Timed mode needs the times it lacks.
    let (code, _, err) = sim(&[
        "--trace-nodes",
        &nodes,
        "--trace-pods",
        &pods,
        "--mode",
        "timed",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("creation_time"), "{err}");
}

#[test]
fn a_bad_number_names_file_line_and_column_and_exits_2() {
    let dir = Scratch::new("sim-bad");
    let nodes = write(dir.path(), "nodes.csv", NODES);
    let bad = PODS_PLAIN.replace("450,b,1,1024,2000", "450,b,1,1024,2k");
    let pods = write(dir.path(), "bad-pods.csv", &bad);
    let (code, out, err) = sim(&["--trace-nodes", &nodes, "--trace-pods", &pods, "--json"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("bad-pods.csv"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("column 5 (cpu_milli)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // An unknown policy is bad input too.
    let good = write(dir.path(), "pods.csv", PODS_PLAIN);
    let (code, _, err) = sim(&[
        "--trace-nodes",
        &nodes,
        "--trace-pods",
        &good,
        "--policy",
        "worst-fit",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("worst-fit"), "{err}");
}

#[test]
fn gen_trace_is_seeded_and_its_output_simulates() {
    let dir = Scratch::new("sim-gen");
    let nodes = write(dir.path(), "nodes.csv", NODES);
    let pods = write(dir.path(), "pods.csv", PODS_TIMED);
    let gen = |seed: &str| {
        let out = Command::new(BIN)
            .args(["sim", "gen-trace", "--kind", "gpushare", "--level", "80"])
            .args(["--seed", seed, "--trace-pods", &pods, "--pods", "40"])
            .output()
            .expect("run gen-trace");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = gen("4");
    assert_eq!(a, gen("4"));
    assert_eq!(a.lines().count(), 41);
    let variant = write(dir.path(), "variant.csv", &a);
    let (code, out, err) = sim(&[
        "--trace-nodes",
        &nodes,
        "--trace-pods",
        &variant,
        "--compare",
        "best-fit,frag",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("best-fit") && out.contains("frag"), "{out}");
}

#[test]
fn a_scenario_file_describes_nodes_and_timed_arrivals() {
    let dir = Scratch::new("sim-scenario");
    let sc = write(
        dir.path(),
        "s.toml",
        r#"
[[nodes]]
name = "cpu"
count = 2
cpus = 16.0
mem = 65536

[[nodes]]
name = "gpu"
cpus = 32.0
mem = 131072
gpus = 2
gpu_model = "A100"

[[arrivals]]
count = 4
every_s = 1.0
user = "alice"
kind = "training"
cpus = 4.0
mem = 1024
gpus = 1
gpu_models = ["A100"]
duration_s = 10.0

[[arrivals]]
at_s = 0.5
count = 3
user = "bob"
cpus = 8.0
mem = 1024
duration_s = 2.0
"#,
    );
    let args = [
        "--scenario",
        sc.as_str(),
        "--compare",
        "best-fit,frag",
        "--json",
    ];
    let (code, out, err) = sim(&args);
    assert_eq!(code, 0, "{err}");
    let v = last_json(&out);
    for r in v["runs"].as_array().expect("runs") {
        assert_eq!(r["placed"], 7, "{r}");
        // Two GPUs for four 10 s tasks a second apart: the last two wait 8 s each.
        assert_eq!(r["gpu_queue_mean_s"], 4.0, "{r}");
        assert_eq!(r["cpu_queue_mean_s"], 0.0, "{r}");
    }
    assert_eq!(without_sim_ms(v), without_sim_ms(last_json(&sim(&args).1)));
    // A typo names the file, line and column.
    let bad = write(
        dir.path(),
        "bad.toml",
        "[[nodes]]\nname = \"x\"\ncpus = 4.0\nmem = lots\n",
    );
    let (code, _, err) = sim(&["--scenario", &bad]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.toml") && err.contains("line 4"), "{err}");
}
