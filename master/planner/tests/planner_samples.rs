//! The S2 planner's answers on its sample inputs (`deploy/samples/plan/`) and on one seed of
//! every generated shape, against a recorded run (`planner_samples/expected.txt`): the
//! figures in clear, and a digest of the whole `BatchPlan` in its `Debug` form, whose floats
//! print exactly (shortest round-trip form), so an equal digest is an equal plan.
//!
//! Why: moving the planner into a crate of its own must not change one plan. After a change
//! meant to alter plans, rewrite the record with `PLANNER_SAMPLES_BLESS=1 cargo test
//! --test planner_samples` and say why in the commit.

use hetsched_planner::{parse, plan, BatchPlan, Shape};
use std::fmt::Write as _;

const EXPECTED: &str = "tests/planner_samples/expected.txt";

/// One line: the plan's figures, then an FNV-1a digest of its `Debug` text.
fn line(out: &mut String, name: &str, p: &BatchPlan) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{p:?}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let _ = writeln!(
        out,
        "{name}: chosen {} makespan {:?} planner {:?} lower {:?} {:?} probes {} digest {h:016x}",
        p.chosen.as_str(),
        p.makespan,
        p.planner_makespan,
        p.lower_bound,
        p.baselines,
        p.probes
    );
}

#[test]
fn plans_match_the_recorded_run() {
    let samples = [
        (
            "small.json",
            include_str!("../../../deploy/samples/plan/small.json"),
        ),
        (
            "course.txt",
            include_str!("../../../deploy/samples/plan/course.txt"),
        ),
        (
            "course-task1.txt",
            include_str!("../../../deploy/samples/plan/course-task1.txt"),
        ),
    ];
    let mut out = String::new();
    for (name, text) in samples {
        let inst = parse(text).expect("a sample parses");
        let p = plan(&inst).expect("a sample plans");
        line(&mut out, name, &p);
    }
    for shape in Shape::ALL {
        let inst = shape.instance(1).expect("generated shapes are valid");
        let p = plan(&inst).expect("a generated shape plans");
        line(&mut out, &format!("{} seed 1", shape.name()), &p);
    }
    if std::env::var_os("PLANNER_SAMPLES_BLESS").is_some() {
        std::fs::write(EXPECTED, &out).expect("writing the record");
        return;
    }
    let expected = std::fs::read_to_string(EXPECTED).expect("the recorded run");
    assert!(
        out == expected,
        "plans differ from {EXPECTED}:\n--- expected\n{expected}\n--- got\n{out}"
    );
}
