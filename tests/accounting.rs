//! Issue 53, accounting: real tasks' usage readings (a busy 1-CPU task's CPU seconds within
//! 10 % of its wall time, an idle one's near 0, a 300 MiB allocation's peak), and the records
//! the same on every master after a snapshot install on a follower that was down and after a
//! leader kill (`history --json` compared master by master).

mod support;
mod support_http;

use serde_json::Value;
use std::time::Duration;
use support::*;
use support_http::{get, HttpCluster};

const WAIT: Duration = Duration::from_secs(60);

/// The records `addr` holds, from its own applied state.
fn records_at(addr: &str) -> Option<Vec<Value>> {
    json_with(addr, &["history", "--stale"])?["records"]
        .as_array()
        .cloned()
}

/// Waits until the cluster's history holds `n` records; returns them.
fn wait_records(c: &Cluster, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} history records"), WAIT, || {
        let r = c.json(&["history"])?["records"].as_array()?.clone();
        (r.len() >= n).then_some(r)
    })
}

fn record_of(records: &[Value], job: u64) -> &Value {
    records
        .iter()
        .find(|r| r["job"].as_u64() == Some(job))
        .unwrap_or_else(|| panic!("no record of job {job}: {records:?}"))
}

#[test]
fn a_tasks_cpu_seconds_and_peak_memory_come_from_its_cgroup() {
    // One emulated GPU (a GPU task's GPU seconds are its share × its wall time, labelled);
    // the master serves HTTP too.
    let h = HttpCluster::start("acct-readings", 1, 1, 3);
    let c = &h.cluster;
    c.scenario(|c| {
        c.wait_nodes_up(1, WAIT);
        // Busy for 2 s of wall time; it writes the CPU time the kernel gave it (the machine
        // may be shared: the cgroup's count is checked against the process's own).
        let own = c.dir.path().join("own-cpu");
        let busy_py = format!(
            "import os, time\nt = time.time()\nwhile time.time() - t < 2: pass\n\
             u = os.times()\nopen({:?}, 'w').write(str(u.user + u.system))",
            own.display().to_string()
        );
        let busy = c.submit_id(&["--cpus", "1", "--", "python3", "-c", &busy_py]);
        let idle = c.submit_id(&["--cpus", "1", "--", "sleep", "2"]);
        let big = c.submit_id(&[
            "--cpus",
            "1",
            "--mem",
            "1024",
            "--",
            "python3",
            "-c",
            "import time; b = b'x' * (300 << 20); time.sleep(0.5)",
        ]);
        let gpu = c.submit_id(&["--cpus", "0.5", "--gpus", "0.5", "--", "sleep", "1"]);
        let records = wait_records(c, 4);
        let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        let b = record_of(&records, busy);
        let (cpu, wall) = (f(b, "cpu_s"), f(b, "elapsed_s"));
        let own: f64 = std::fs::read_to_string(&own)
            .expect("the busy task's own CPU time")
            .trim()
            .parse()
            .expect("a number");
        eprintln!("busy task: cgroup {cpu:.3} CPU s, its own count {own:.3} s, wall {wall:.3} s");
        assert!(wall >= 2.0, "{b}");
        assert!(
            // 10 %, plus 0.1 s for what runs in the cgroup before the program (its exec).
            (cpu - own).abs() <= 0.1 * own + 0.1,
            "busy: cgroup {cpu} s, own {own} s: {b}"
        );
        assert!(cpu <= 1.1 * wall, "at most one CPU: {b}");
        if own >= 0.95 * wall {
            // A CPU of its own (an idle machine): the Done-when's 10 % of wall time.
            assert!(
                (cpu - wall).abs() <= 0.1 * wall,
                "busy: cpu {cpu} s, wall {wall} s: {b}"
            );
        }
        let i = record_of(&records, idle);
        assert!(f(i, "cpu_s") < 0.1, "idle: {i}");
        assert!(f(i, "elapsed_s") >= 1.9, "idle: {i}");
        let m = record_of(&records, big);
        assert_eq!(m["state"], "succeeded", "{m}");
        assert!(
            m["max_mem_mib"].as_u64().unwrap_or(0) >= 300,
            "300 MiB: {m}"
        );
        // No GPU asked: zero GPU seconds, measured.
        assert_eq!(f(m, "gpu_s"), 0.0, "{m}");
        let g = record_of(&records, gpu);
        let (gs, gw) = (f(g, "gpu_s"), f(g, "elapsed_s"));
        assert!((gs - 0.5 * gw).abs() < 1e-6, "gpu_s = 0.5 × wall: {g}");
        assert_eq!(g["gpu_emulated"], true, "{g}");
        // The table and CSV name the same attempts.
        let csv = c.cli(&["history", "--csv"]);
        let text = String::from_utf8_lossy(&csv.stdout);
        assert!(
            text.starts_with(
                "ID,USER,PARTITION,NODE,START,END,ELAPSED,CPUS,CPU-EFF,MAXMEM,GPUS,STATE,REASON"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains("0.5(emulated)"), "{text}");
        let u = c.json(&["usage", "--by", "user"]).expect("usage");
        assert_eq!(u["totals"][0]["tasks"], 4, "{u}");
        // One user holds all the usage (S = 1) of a cluster idle most of the default 7-day
        // half-life: Ū is its usage over the cluster's decayed capacity (7 d / ln 2 of the
        // whole cluster), so F = 2^(−Ū) is just below 1.
        assert_eq!(u["half_life_ms"], 7 * 86_400_000u64, "{u}");
        let fs = &u["fair_share"][0];
        let capacity = 7.0 * 86_400.0 / std::f64::consts::LN_2;
        let used = fs["decayed_usage"].as_f64().expect("decayed_usage");
        let factor = fs["factor"].as_f64().expect("factor");
        assert!(used > 0.0, "{u}");
        assert!((factor - (-used / capacity).exp2()).abs() < 1e-9, "{u}");
        // The same through the HTTP API; a bad time is a 400 naming the field.
        let api = get(&h.master_http[0], "/v1/accounting/history?since=1h").expect("GET");
        assert_eq!(api.status, 200, "{}", api.text());
        assert_eq!(api.json()["records"].as_array().map(Vec::len), Some(4));
        let usage = get(&h.master_http[0], "/v1/accounting/usage?by=day").expect("GET");
        assert_eq!(usage.json()["totals"][0]["tasks"], 4, "{}", usage.text());
        let bad = get(&h.master_http[0], "/v1/accounting/history?since=soon").expect("GET");
        assert_eq!(bad.status, 400, "{}", bad.text());
        assert_eq!(bad.json()["error"]["field"], "since", "{}", bad.text());
    });
}

#[test]
fn history_is_the_same_on_every_master_after_a_snapshot_install_and_a_leader_kill() {
    let mut c = Cluster::start_with("acct-replicas", 3, 1, 4, &["--snapshot-entries", "10"]);
    let leader = c.wait_leader(WAIT) as usize - 1;
    let follower = (0..3).find(|i| *i != leader).expect("a follower");
    c.wait_nodes_up(1, WAIT);
    c.masters[follower].kill9();
    let same_everywhere = |c: &Cluster, masters: &[usize], n: usize| {
        wait_for("the same history on every master", WAIT, || {
            let all: Vec<Vec<Value>> = masters
                .iter()
                .map(|i| records_at(&c.master_addrs[*i]))
                .collect::<Option<_>>()?;
            (all[0].len() == n && all.iter().all(|r| *r == all[0])).then_some(())
        })
    };
    c.scenario(|c| {
        for _ in 0..3 {
            c.submit_id(&["--cpus", "0.5", "--count", "4", "--", "true"]);
        }
        wait_records(c, 12);
    });
    c.masters[follower].restart().expect("restart the follower");
    c.scenario(|c| {
        same_everywhere(c, &[0, 1, 2], 12);
        let s = c.local_status(follower).expect("status");
        assert!(
            s["raft"]["first_index"].as_u64().unwrap_or(0) > 1,
            "the follower installed a snapshot: {s}"
        );
    });
    c.masters[leader].kill9();
    let live: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    c.scenario(|c| {
        c.wait_leader(WAIT);
        c.submit_id(&["--cpus", "0.5", "--count", "2", "--", "true"]);
        wait_records(c, 14);
        same_everywhere(c, &live, 14);
    });
    c.masters[leader].restart().expect("restart the old leader");
    c.scenario(|c| same_everywhere(c, &[0, 1, 2], 14));
}

/// Fair share (issue 53): user a runs 20 tasks alone; with both slots of the cluster held by
/// c, a then b submit 10 tasks each; the phase-2 tasks' starts in order (by the committed
/// start, then task id), and the end of a's last task (ms, the leader's clock). Default
/// flags: the slave queues (S0.3, depth 4) fill with a's tasks before b's arrive; with fair
/// share on, b's take their places.
fn fair_share_scenario(c: &Cluster) -> (Vec<String>, u64) {
    c.wait_nodes_up(1, WAIT);
    let job = |user: &str, n: &str, secs: &str| {
        c.submit_id(&[
            "--user", user, "--cpus", "1", "--count", n, "--", "sleep", secs,
        ])
    };
    job("a", "20", "0.2");
    wait_records(c, 20);
    let blockers = job("c", "2", "3");
    wait_for("c's tasks running", WAIT, || {
        let t = c.json(&["tasks", "--job", &blockers.to_string()])?;
        let running = t
            .as_array()?
            .iter()
            .filter(|t| t["state"] == "running")
            .count();
        (running == 2).then_some(())
    });
    let (a, b) = (job("a", "10", "0.2"), job("b", "10", "0.2"));
    let records = wait_records(c, 42);
    let mut starts: Vec<(u64, u64, String)> = records
        .iter()
        .filter(|r| [a, b].contains(&r["job"].as_u64().unwrap_or(0)))
        .map(|r| {
            let s = r["started_ms"].as_u64().unwrap_or(u64::MAX);
            (
                s,
                r["task"].as_u64().unwrap_or(0),
                r["user"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    starts.sort();
    let a_last = records
        .iter()
        .filter(|r| r["user"] == "a")
        .filter_map(|r| r["ended_ms"].as_u64())
        .max()
        .unwrap_or(0);
    (starts.into_iter().map(|(_, _, u)| u).collect(), a_last)
}

/// Each user's factor in `usage --json`.
fn factors(c: &Cluster) -> Option<(f64, f64)> {
    let u = c.json(&["usage"])?;
    let f = |user: &str| {
        u["fair_share"]
            .as_array()?
            .iter()
            .find(|f| f["user"] == user)?["factor"]
            .as_f64()
    };
    Some((f("a")?, f("b")?))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Default flags but a 30 s half-life. The recovery: while nobody runs, a's factor over
/// b's only grows (their decayed usages shrink alike, Ū is a share of the cluster's decayed
/// capacity once that is larger, `docs/guide/accounting.md`), so a reading of ≥ 0.9 taken
/// at most 2 minutes after a's last task holds at 2 minutes too; the test polls `usage
/// --json` until then (≈ 15 s here) instead of sleeping the 2 minutes out.
#[test]
fn fair_share_puts_the_user_who_used_less_first() {
    let c = Cluster::start_with("acct-fair", 1, 1, 2, &["--fairshare-half-life", "30s"]);
    c.scenario(|c| {
        let (order, a_last) = fair_share_scenario(c);
        assert_eq!(order[..2], ["b", "b"], "b used nothing yet: {order:?}");
        let (a0, b0) = factors(c).expect("usage --json names a and b");
        assert!(a0 < b0, "a used more: {a0} {b0}");
        // No [shares]: a, b and c (the blockers' user) weigh 1 each.
        let u = c.json(&["usage"]).expect("usage");
        let shares: Vec<f64> = u["fair_share"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f["share"].as_f64()).collect())
            .unwrap_or_default();
        assert_eq!(shares.len(), 3, "{u}");
        assert!(shares.iter().all(|s| (s - 1.0 / 3.0).abs() < 1e-9), "{u}");
        let deadline = a_last + 120_000;
        let left = Duration::from_millis(deadline.saturating_sub(now_ms()));
        let (a1, b1) = wait_for("a's factor recovering to ≥ 0.9 × b's", left, || {
            let (a, b) = factors(c)?;
            (a >= 0.9 * b && a > a0).then_some((a, b))
        });
        assert!(
            now_ms() <= deadline + 1_000,
            "read within 2 minutes of a's last task"
        );
        eprintln!("factors: a {a0:.4} → {a1:.4}, b {b0:.4} → {b1:.4}");
    });
}

#[test]
fn without_fair_share_the_order_is_drfs() {
    let c = Cluster::start_with("acct-fair-off", 1, 1, 2, &["--fairshare-half-life", "off"]);
    c.scenario(|c| {
        let (order, _) = fair_share_scenario(c);
        // The slave's queue holds a's tasks, queued before b's arrived: it starts them
        // first, as before fair share.
        assert_eq!(order[0], "a", "{order:?}");
        let u = c.json(&["usage"]).expect("usage");
        assert_eq!(u["fair_share"], serde_json::json!([]), "{u}");
        assert_eq!(u["half_life_ms"], Value::Null, "{u}");
    });
}

/// The half-life (`half_life_ms`) and each user's factor `addr` holds, from its own state.
fn settings_at(addr: &str) -> Option<(Value, Vec<(String, f64)>)> {
    let u = json_with(addr, &["usage", "--stale"])?;
    let factors = u["fair_share"]
        .as_array()?
        .iter()
        .map(|f| Some((f["user"].as_str()?.to_string(), f["factor"].as_f64()?)))
        .collect::<Option<_>>()?;
    Some((u["half_life_ms"].clone(), factors))
}

/// Whether two masters' readings agree (factors move with the clock between two reads).
fn agree(a: &(Value, Vec<(String, f64)>), b: &(Value, Vec<(String, f64)>)) -> bool {
    a.0 == b.0
        && a.1.len() == b.1.len()
        && a.1
            .iter()
            .zip(&b.1)
            .all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() < 1e-3)
}

/// Issue 53: the retention and the half-life are replicated settings, carried by each new
/// leader's barrier. A follower restarted with flags of its own holds the leader's settings
/// (the same state hash, the same factors); handed the leadership, its flags are in force on
/// every master; killed, the next leader's are, on it too once it is back.
#[test]
fn masters_started_with_different_accounting_flags_hold_the_same_settings() {
    let mut c = Cluster::start("acct-settings", 3, 1, 2);
    let leader = c.wait_leader(WAIT) as usize - 1;
    let follower = (0..3).find(|i| *i != leader).expect("a follower");
    c.wait_nodes_up(1, WAIT);
    c.masters[follower].kill9();
    c.masters[follower].add_args(&[
        "--fairshare-half-life",
        "30s",
        "--accounting-retention",
        "1h",
    ]);
    c.masters[follower].restart().expect("restart the follower");
    let (week, own) = (
        serde_json::json!(7 * 86_400_000u64),
        serde_json::json!(30_000),
    );
    let same = |c: &Cluster, masters: &[usize], half_life: &Value| {
        wait_for("the same settings and factors everywhere", WAIT, || {
            let all: Vec<_> = masters
                .iter()
                .map(|i| settings_at(&c.master_addrs[*i]))
                .collect::<Option<_>>()?;
            let same = all.iter().all(|s| agree(s, &all[0])) && all[0].0 == *half_life;
            same.then_some(())
        });
    };
    c.scenario(|c| {
        c.submit_id(&["--cpus", "1", "--count", "2", "--", "true"]);
        wait_records(c, 2);
        same(c, &[0, 1, 2], &week);
        c.wait_same_hash(WAIT);
        // The follower with its own flags takes the lead: its barrier carries them.
        let id = (follower + 1).to_string();
        let out = c.cli(&["members", "transfer-leader", &id]);
        assert!(out.status.success(), "transfer-leader: {out:?}");
        wait_for("the follower leading", WAIT, || {
            (c.wait_leader(WAIT) as usize == follower + 1).then_some(())
        });
        same(c, &[0, 1, 2], &own);
        c.wait_same_hash(WAIT);
    });
    c.masters[follower].kill9();
    let live: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    c.scenario(|c| {
        c.wait_leader(WAIT);
        c.submit_id(&["--cpus", "1", "--", "true"]);
        wait_records(c, 3);
        same(c, &live, &week);
    });
    c.masters[follower].restart().expect("restart it");
    c.scenario(|c| {
        same(c, &[0, 1, 2], &week);
        c.wait_same_hash(WAIT);
    });
}
