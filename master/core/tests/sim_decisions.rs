//! The simulator's decisions against a recorded run: `sim --json` (with `sim_ms` set to 0)
//! and every start (task → node, in plan order, as a digest) for a fixed set of inputs and
//! policies, compared byte for byte with `sim_decisions/expected.txt`.
//!
//! Why: a refactoring of the scheduler's stages or a move of the index into a crate of its
//! own must not change one placement. The summary JSON alone could hide two swapped
//! choices; the digest of the starts cannot.
//!
//! The inputs, small enough for a debug build in CI (the whole trace takes minutes there):
//! - "trace": the Alibaba trace's every 10th node (`awk 'NR==1 || NR%10==2'`, 153 nodes)
//!   and its first 2000 pods (`head -2001`), arrival-only, creation order, seed 1;
//! - "queueing trace": the same at `--time-scale 2000 --users 8`, timed (the node subset
//!   BENCHMARKS.md uses to make the trace queue; with 2000 pods it queues at ×2000);
//! - the S3 burst scenario (`docs/sim/s3-burst.toml`), timed.
//!
//! The CLI gives the same JSON line on these files (`hetsched sim --trace-nodes
//! nodes153.csv --trace-pods pods2000.csv --mode timed --time-scale 2000 --users 8
//! --compare ... --json`, `sim_ms` aside). After a change that is meant to alter decisions,
//! rewrite the record with `SIM_DECISIONS_BLESS=1 cargo test -p hetsched-master-core --test
//! sim_decisions` and say why in the commit.

use hetsched_master_core::sched::index::trace;
use hetsched_master_core::sim::{self, Mode, Order, PolicyName, RunReport, SimNode, SimTask};
use std::fmt::Write as _;

const NODES: &str = include_str!("sim_decisions/nodes153.csv");
const PODS: &str = include_str!("sim_decisions/pods2000.csv");
const BURST: &str = include_str!("../../../docs/sim/s3-burst.toml");
const EXPECTED: &str = "tests/sim_decisions/expected.txt";

fn trace_input(scale: f64, users: u32) -> (Vec<SimNode>, Vec<SimTask>) {
    let nodes = trace::parse_nodes(NODES)
        .expect("the committed node list parses")
        .into_iter()
        .map(SimNode::from)
        .collect();
    let list = trace::parse_pod_list(PODS).expect("the committed pod list parses");
    let order = sim::ordered(&list.pods, Order::Creation, 1);
    (
        nodes,
        sim::tasks_from_trace(&list.pods, &order, scale, users),
    )
}

/// FNV-1a over the starts: equal digests, equal decisions (as far as one can tell).
fn digest(r: &RunReport) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (t, n) in &r.starts {
        for b in t.0.to_le_bytes().into_iter().chain(n.0.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// One case: its JSON line as the CLI prints it (`sim_ms` 0), then a line per run with the
/// number of starts and their digest.
fn case(
    out: &mut String,
    name: &str,
    input: &(Vec<SimNode>, Vec<SimTask>),
    setup: &sim::Setup,
    mode: Mode,
    policies: &[&str],
) {
    let runs: Vec<RunReport> = policies
        .iter()
        .map(|p| {
            let policy: PolicyName = p.parse().expect("a known policy");
            sim::run_with(&input.0, &input.1, &policy, mode, 1, setup, &mut |_| {})
        })
        .collect();
    let json = serde_json::to_string(&serde_json::json!({ "runs": runs })).expect("json");
    let _ = writeln!(out, "{name}\n{json}");
    for r in &runs {
        let _ = writeln!(
            out,
            "  {} starts {} digest {:016x}",
            r.policy,
            r.starts.len(),
            digest(r)
        );
    }
}

fn burst() -> ((Vec<SimNode>, Vec<SimTask>), sim::Setup) {
    let sc: sim::scenario::Scenario = toml::from_str(BURST).expect("the burst scenario parses");
    let input = sc.build().expect("the burst scenario builds");
    (input, sc.setup().expect("the burst scenario's setup"))
}

#[test]
fn decisions_match_the_recorded_run() {
    let mut out = String::new();
    let none = sim::Setup::default();
    case(
        &mut out,
        "trace: 153 nodes, 2000 pods, arrival-only",
        &trace_input(1.0, 1),
        &none,
        Mode::ArrivalOnly,
        &[
            "least-fit",
            "best-fit",
            "first-fit",
            "next-fit",
            "random",
            "frag",
        ],
    );
    case(
        &mut out,
        "queueing trace: 153 nodes, 2000 pods, timed x2000, 8 users",
        &trace_input(2000.0, 8),
        &none,
        Mode::Timed,
        &[
            "fifo-best-fit",
            "drf-best-fit",
            "drf-frag",
            "pipeline-frag",
            "pipeline-best-fit",
            "pipeline-best-fit-nopreempt",
        ],
    );
    let (input, setup) = burst();
    case(
        &mut out,
        "s3 burst scenario, timed",
        &input,
        &setup,
        Mode::Timed,
        &[
            "fifo-best-fit",
            "drf-best-fit",
            "pipeline-frag",
            "pipeline-best-fit",
        ],
    );
    if std::env::var_os("SIM_DECISIONS_BLESS").is_some() {
        std::fs::write(EXPECTED, &out).expect("writing the record");
        return;
    }
    let expected = std::fs::read_to_string(EXPECTED).expect("the recorded run");
    assert!(
        out == expected,
        "decisions differ from {EXPECTED}:\n--- expected\n{expected}\n--- got\n{out}"
    );
}

/// `auto` (the default) decides exactly as `frag` where no pod names a GPU model: every
/// start the same on the trace's subset, arrival-only and queueing under the pipeline.
#[test]
fn auto_decides_as_frag_where_no_pod_names_a_model() {
    let none = sim::Setup::default();
    for (input, mode, [auto, frag]) in [
        (trace_input(1.0, 1), Mode::ArrivalOnly, ["auto", "frag"]),
        (
            trace_input(2000.0, 8),
            Mode::Timed,
            ["pipeline-auto", "pipeline-frag"],
        ),
    ] {
        assert!(
            input.1.iter().all(|t| t.request.gpu.models.is_empty()),
            "the subset pins no model"
        );
        let run = |p: &str| {
            let policy: PolicyName = p.parse().expect("a known policy");
            sim::run_with(&input.0, &input.1, &policy, mode, 1, &none, &mut |_| {})
        };
        let (a, f) = (run(auto), run(frag));
        assert!(!a.starts.is_empty());
        assert_eq!(a.starts, f.starts, "{auto} against {frag}");
        assert_eq!(a.gpu_allocated_share_at_end, f.gpu_allocated_share_at_end);
    }
}

/// S4.7: the recorded run above is one group's (the default `Setup`), and four groups keep the queueing trace's GPU mean wait under the
/// default policy within 2 % of one group's (measured: 136.47 s with one group, 135.01 s
/// with four, −1.1 %; BENCHMARKS.md#parallel-selection).
#[test]
fn four_groups_keep_the_queueing_traces_gpu_wait() {
    let input = trace_input(2000.0, 8);
    let policy: PolicyName = "pipeline-auto".parse().expect("a known policy");
    let run = |groups: u32, threads: u32| {
        let setup = sim::Setup {
            parallel: hetsched_master_core::sched::ParallelConfig { groups, threads },
            ..Default::default()
        };
        sim::run_with(
            &input.0,
            &input.1,
            &policy,
            Mode::Timed,
            1,
            &setup,
            &mut |_| {},
        )
    };
    let (one, four) = (run(1, 1), run(4, 2));
    let wait = |r: &RunReport| r.gpu_queue_mean_s.expect("timed runs report GPU waits");
    let (w1, w4) = (wait(&one), wait(&four));
    assert!(
        (w4 - w1).abs() <= 0.02 * w1,
        "GPU mean wait with four groups {w4:.2} s, one group {w1:.2} s"
    );
    assert_eq!(four.placed, one.placed);
}
