//! What must hold (S3.2), on real processes: a GPU task whose emulated utilisation is a
//! function of its CPU count (read from `HETSCHED_CPUS_FILE`) ends its search at the curve's
//! best count, recorded for its class.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

#[test]
fn cpu_search_ends_at_the_best_count_of_the_curve_and_records_it_for_the_class() {
    let c = Cluster::start_full(
        "cpu-search",
        1,
        1,
        8,
        &["--probe-period", "2s", "--util-epsilon", "1"],
        &["--gpus", "1"],
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&c)));
    if let Err(p) = result {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn scenario(c: &Cluster) {
    c.wait_leader(Duration::from_secs(30));
    c.wait_nodes_up(1, Duration::from_secs(30));
    let dir = c.dir.path();
    let stop = dir.join("stop");
    let seen = dir.join("cpus-seen");
    // Utilisation peaks at 2 CPUs: 90 − 10·|cpus − 2| (4 → 70, 3 → 80, 2 → 90, 1 → 80).
    let script = format!(
        "while [ ! -e {stop} ]; do \
           c=$(cat \"$HETSCHED_CPUS_FILE\"); c=${{c%%.*}}; echo $c >> {seen}; \
           d=$((c - 2)); [ $d -lt 0 ] && d=$((0 - d)); \
           echo $((90 - 10 * d)) > \"$HETSCHED_GPU_UTIL_FILE\"; sleep 0.2; done",
        stop = stop.display(),
        seen = seen.display()
    );
    let job = c
        .json(&[
            "submit", "--gpus", "1", "--cpus", "4", "--class", "image", "--", "sh", "-c", &script,
        ])
        .expect("submit")["job_id"]
        .as_u64()
        .expect("job id");
    let task = || -> Option<Value> {
        c.json(&["tasks", "--job", &job.to_string()])?
            .as_array()?
            .first()
            .cloned()
    };
    wait_for("the GPU task probing", Duration::from_secs(60), || {
        let t = task()?;
        (t["state"] == "running" && t["cpu_search"] == "probing").then_some(())
    });
    let t = wait_for("the search done", Duration::from_secs(120), || {
        let t = task()?;
        (t["cpu_search"] == "done").then_some(t)
    });
    assert_eq!(t["cpus"].as_f64(), Some(2.0), "{t}");
    assert_eq!(t["state"], "running", "{t}");
    // The task itself saw every count of the search, ending at the best.
    wait_for("the task at 2 CPUs", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&seen).ok()?;
        (text.lines().last()? == "2").then_some(())
    });
    let text = std::fs::read_to_string(&seen).expect("counts seen");
    let mut counts: Vec<&str> = text.lines().collect();
    counts.dedup();
    eprintln!("counts the task saw: {counts:?}");
    assert_eq!(counts.first(), Some(&"4"), "{counts:?}");
    for c in ["3", "2", "1"] {
        assert!(
            counts.contains(&c),
            "the search never tried {c}: {counts:?}"
        );
    }
    // Recorded for its class (replicated: in the leader's status).
    let status = c.json(&["status"]).expect("status");
    assert_eq!(
        status["cpu_config"]["image"].as_f64(),
        Some(2.0),
        "{status}"
    );
    // The node's free CPUs account for the task's 2 CPUs.
    let nodes = c.json(&["nodes"]).expect("nodes");
    assert_eq!(
        nodes[0]["free"]["cpu_milli"].as_u64(),
        Some(6000),
        "{nodes}"
    );

    std::fs::write(&stop, "").expect("stop");
    wait_for("the task succeeded", Duration::from_secs(60), || {
        (task()?["state"] == "succeeded").then_some(())
    });
}
