//! `hetsched sbatch` against a real cluster: a Slurm batch script runs unchanged, each
//! directive has its effect (name, CPUs × tasks, memory, array, time limit, output
//! pattern, working directory), the script sees its `SLURM_*` variables, and directives
//! hetsched does not read warn without stopping the submit.

mod support;

use hetsched::local::{ClusterSpec, SlaveSpec};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::{output_text as text, test_spec, wait_for, Cluster, BIN};

const WAIT: Duration = Duration::from_secs(90);

/// `hetsched sbatch ARGS` run in `dir`, as a user's shell would.
fn sbatch(c: &Cluster, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(certs) = hetsched::local::security::client_certs_dir() {
        cmd.env("HETSCHED_CERTS_DIR", certs);
    }
    cmd.current_dir(dir)
        .arg("--masters")
        .arg(c.masters_arg())
        .arg("sbatch")
        .args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
        .env("HETSCHED_LOG", "warn")
        .env("SBATCH_TEST_SECRET", "must-not-travel")
        .env("SBATCH_TEST_PLAIN", "travels")
        .stdin(Stdio::null())
        .output()
        .expect("run hetsched sbatch")
}

const SCRIPT: &str = r#"#!/bin/sh
#SBATCH -J train
#SBATCH -c 1
#SBATCH --mem=2G
#SBATCH -n 2
#SBATCH --array=0-7%2
#SBATCH -t 1:00
#SBATCH -o out-%A_%a.txt
#SBATCH --mail-type=END
#SBATCH --frobnicate=yes
echo "start=$(date +%s%N)"
echo "job=$SLURM_JOB_ID array=$SLURM_ARRAY_JOB_ID id=$SLURM_ARRAY_TASK_ID c=$SLURM_CPUS_PER_TASK n=$SLURM_NTASKS name=$SLURM_JOB_NAME cpus=$HETSCHED_CPUS arg=$1 plain=$SBATCH_TEST_PLAIN secret=${SBATCH_TEST_SECRET:-none}"
echo "submit=$SLURM_SUBMIT_DIR"
echo "pwd=$(pwd)"
p=$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
echo "memlimit=$(cat /sys/fs/cgroup/memory$p/memory.limit_in_bytes 2>/dev/null || echo none)"
sleep 0.3
echo "end=$(date +%s%N)"
"#;

#[test]
fn a_slurm_script_runs_unchanged_with_its_directives() {
    // 8 cores and 16 GiB: room for four of the array's tasks (2 CPUs, 2 GiB each), so only
    // the %2 throttle keeps it to two.
    let c = Cluster::launch(
        "sbatch",
        ClusterSpec {
            masters: 1,
            master_http: false,
            slaves: vec![SlaveSpec {
                cpus: 8,
                mem_mib: 16 * 1024,
                gpus: 0,
                extra_args: Vec::new(),
            }],
            ..test_spec()
        },
    );
    c.wait_nodes_up(1, WAIT);
    let work = c.dir.path().join("submit here");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::write(work.join("train.sh"), SCRIPT).expect("write the script");

    // The job it follows (-d afterok:A on the command line, over the script's lines).
    let a_stamp = work.join("a.stamp");
    let script_a = format!("sleep 1; date +%s%N > '{}'", a_stamp.display());
    let a = c
        .json(&["submit", "--", "sh", "-c", &script_a])
        .and_then(|v| v["job_id"].as_u64())
        .expect("submit A");
    let after = format!("afterok:{a}");
    let out = sbatch(&c, &work, &["-d", &after, "train.sh", "first-arg"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job: u64 = stdout
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Slurm's answer: {}", text(&out)));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("train.sh:9: --mail-type is not read by hetsched; ignored"),
        "{stderr}"
    );
    assert!(stderr.contains("train.sh:10: --frobnicate"), "{stderr}");

    // The job as the cluster holds it: 8 array tasks, -n 2 × -c 1 CPUs, following A.
    let jobs = c.json(&["jobs", &job.to_string()]).expect("jobs --json");
    let j: &Value = jobs.as_array().and_then(|a| a.first()).unwrap_or(&jobs);
    assert_eq!(j["name"], "train", "{j}");
    assert_eq!(j["tasks"], 8, "{j}");
    assert_eq!(j["after"], serde_json::json!([a]), "{j}");

    // Every array task wrote its own out-JOB_ID.txt in the submit directory.
    let files = wait_for("the 8 array tasks' output files", WAIT, || {
        let all: Vec<String> = (0..8)
            .map(|i| std::fs::read_to_string(work.join(format!("out-{job}_{i}.txt"))).ok())
            .collect::<Option<_>>()?;
        all.iter().all(|t| t.contains("end=")).then_some(all)
    });
    let canonical = std::fs::canonicalize(&work).expect("canonical");
    for (i, f) in files.iter().enumerate() {
        let first = f.lines().nth(1).unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "job={job} array={job} id={i} c=1 n=2 name=train cpus=2 arg=first-arg plain=travels secret=none"
            ),
            "task {i}: {f}"
        );
        assert!(f.contains(&format!("submit={}\n", work.display())), "{f}");
        let pwd = f
            .lines()
            .find_map(|l| l.strip_prefix("pwd="))
            .expect("pwd line");
        assert_eq!(std::fs::canonicalize(pwd).expect("pwd"), canonical, "{f}");
        // --mem=2G is the task's memory limit where the slave has a memory cgroup.
        let limit = f
            .lines()
            .find_map(|l| l.strip_prefix("memlimit="))
            .expect("memlimit");
        assert!(limit == "none" || limit == "2147483648", "--mem=2G: {f}");
    }
    // -d afterok:A: no array task started before A ended; %2: never three at once (the
    // slave would hold four).
    let a_end: u128 = std::fs::read_to_string(&a_stamp)
        .expect("A's stamp")
        .trim()
        .parse()
        .expect("a time");
    let stamp = |f: &str, key: &str| -> u128 {
        f.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {f}"))
    };
    let spans: Vec<(u128, u128)> = files
        .iter()
        .map(|f| (stamp(f, "start="), stamp(f, "end=")))
        .collect();
    for (s, _) in &spans {
        assert!(
            *s > a_end,
            "an array task started before A ended: {spans:?} vs {a_end}"
        );
    }
    for (s, _) in &spans {
        let running = spans.iter().filter(|(b, e)| b <= s && s < e).count();
        assert!(running <= 2, "more than 2 at once at {s}: {spans:?}");
    }
    let done = wait_for("the job to succeed", WAIT, || {
        let t = c.json(&["tasks", "--job", &job.to_string()])?;
        let t = t.as_array()?.clone();
        (t.len() == 8 && t.iter().all(|t| t["state"] == "succeeded")).then_some(t)
    });
    for t in &done {
        assert_eq!(t["cpus"].as_f64(), Some(2.0), "-n 2 × -c 1: {t}");
    }
}

#[test]
fn parsable_bad_scripts_and_unknown_dependencies() {
    let c = Cluster::start("sbatch-edges", 1, 1, 2);
    c.wait_nodes_up(1, WAIT);
    let work = c.dir.path().to_path_buf();
    std::fs::write(work.join("ok.sh"), "#!/bin/sh\necho fine\n").expect("write");
    let out = sbatch(&c, &work, &["--parsable", "-t", "5", "ok.sh"]);
    assert!(out.status.success(), "{}", text(&out));
    let job: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("--parsable prints the id alone: {}", text(&out)));
    // Slurm's default output file, in the submit directory.
    let slurm_out = work.join(format!("slurm-{job}.out"));
    let printed = wait_for("slurm-JOB.out", WAIT, || {
        std::fs::read_to_string(&slurm_out)
            .ok()
            .filter(|t| !t.is_empty())
    });
    assert_eq!(printed, "fine\n");

    // Bad input: exit 2, naming the place.
    std::fs::write(work.join("nosh.sh"), "echo no interpreter\n").expect("write");
    let out = sbatch(&c, &work, &["nosh.sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nosh.sh:1"),
        "{}",
        text(&out)
    );
    std::fs::write(
        work.join("badmem.sh"),
        "#!/bin/sh\n#SBATCH --mem=lots\ntrue\n",
    )
    .expect("write");
    let out = sbatch(&c, &work, &["badmem.sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("badmem.sh:2: --mem"),
        "{}",
        text(&out)
    );
    let out = sbatch(&c, &work, &["--no-such", "ok.sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = sbatch(&c, &work, &["missing.sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // -t: past its limit the script is stopped, reason `timeout` (`-t 0:01`: one second).
    std::fs::write(
        work.join("slow.sh"),
        "#!/bin/sh\n#SBATCH -t 0:01\nsleep 30\n",
    )
    .expect("write");
    let out = sbatch(&c, &work, &["--parsable", "slow.sh"]);
    assert!(out.status.success(), "{}", text(&out));
    let slow = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ended = wait_for("slow.sh stopped at its time limit", WAIT, || {
        let t = c.json(&["tasks", "--job", &slow])?;
        let t = t.as_array()?.first()?.clone();
        (t["state"] == "failed").then_some(t)
    });
    assert_eq!(ended["reason"], "timeout", "{ended}");
    // A dependency on a job that does not exist: not found, as `submit --after` says.
    let out = sbatch(&c, &work, &["-d", "afterok:999999", "ok.sh"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let out = sbatch(&c, &work, &["--help"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--dependency"));
}
