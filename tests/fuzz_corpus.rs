//! Replays the fuzzers' minimised corpora (`fuzz/corpus/<target>/`) and every crash input
//! kept as a regression (`fuzz/regressions/<target>/`) through the same target functions
//! the AFL binaries run (`fuzz/src/targets.rs`), so CI checks in seconds that no input a
//! campaign found interesting makes a decoder panic or loop. The campaigns themselves run
//! outside CI (`fuzz/README.md`).

#[path = "../fuzz/src/targets.rs"]
#[allow(dead_code)]
mod targets;

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn replay(kind: &str, must_exist: bool) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind);
    let mut total = 0;
    for (name, run) in targets::TARGETS {
        let inputs = files(&root.join(name));
        if must_exist {
            assert!(
                !inputs.is_empty(),
                "fuzz/{kind}/{name}/ is missing or empty: every target keeps its corpus"
            );
        }
        for input in inputs {
            let data = std::fs::read(&input).expect("read a corpus file");
            if std::panic::catch_unwind(|| run(&data)).is_err() {
                panic!("target {name} panicked on {}", input.display());
            }
            total += 1;
        }
    }
    total
}

#[test]
fn every_target_has_a_corpus_and_none_panics() {
    assert!(targets::TARGETS.len() >= 8, "at least 8 fuzz targets");
    let n = replay("corpus", true);
    eprintln!(
        "replayed {n} corpus inputs over {} targets",
        targets::TARGETS.len()
    );
}

#[test]
fn crash_inputs_found_by_fuzzing_stay_fixed() {
    let n = replay("regressions", false);
    eprintln!("replayed {n} regression inputs");
}
