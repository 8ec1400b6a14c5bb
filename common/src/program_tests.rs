//! Unit tests of `program.rs`: call scales and buckets, program files, selection tables,
//! the task–engine relation and call summaries.

use super::*;

#[test]
fn scale_formulas() {
    assert_eq!(ApiCall::new(Api::Gemm, 256, 1).scale(), 12 * 256 * 256);
    assert_eq!(ApiCall::new(Api::Sort, 1000, 1).scale(), 8000);
    assert_eq!(ApiCall::new(Api::Sha256, 4096, 1).scale(), 4096);
    assert_eq!(ApiCall::new(Api::Compress, 77, 1).scale(), 77);
    assert_eq!(Api::Gemm.scale_of(u64::MAX), u64::MAX, "saturates");
}

#[test]
fn buckets_are_ceil_log2() {
    assert_eq!(scale_bucket(0), 0);
    assert_eq!(scale_bucket(1), 0);
    assert_eq!(scale_bucket(2), 1);
    assert_eq!(scale_bucket(3), 2);
    assert_eq!(scale_bucket(1024), 10);
    assert_eq!(scale_bucket(1025), 11);
    assert_eq!(scale_bucket(u64::MAX), 64);
    for api in Api::ALL {
        for b in 4..24 {
            let s = api.scale_of(api.size_for_bucket(b));
            assert!(scale_bucket(s) <= b, "{api} bucket {b}: scale {s}");
        }
    }
}

#[test]
fn parses_a_program_and_reports_errors_with_position() {
    let text = "[[call]]\napi = \"gemm\"\nargs = { n = 256, seed = 1 }\n\n[[call]]\napi = \"sort\"\nargs = { items = 1000 }\n";
    let p = parse_program(text, "p.toml").expect("parses");
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[0].size(), 256);
    assert_eq!(p.calls[1].seed(), 0);

    let e = parse_program("[[call]]\napi = \"fft\"\n", "p.toml").unwrap_err();
    assert!(e.to_string().contains("p.toml:2:"), "{e}");
    let e =
        parse_program("[[call]]\napi = \"gemm\"\nargs = { n = 99999 }\n", "p.toml").unwrap_err();
    assert!(
        e.to_string().contains("call 0") && e.to_string().contains("cap"),
        "{e}"
    );
    let e = parse_program("[[call]]\napi = \"sort\"\nargs = { n = 3 }\n", "p.toml").unwrap_err();
    assert!(e.to_string().contains("unknown argument"), "{e}");
    assert!(parse_program("", "p.toml").is_err(), "empty program");
    let many = "[[call]]\napi = \"sha256\"\nargs = { bytes = 1 }\n".repeat(MAX_CALLS + 1);
    let e = parse_program(&many, "p.toml").unwrap_err();
    assert!(e.to_string().contains("cap"), "{e}");
}

fn t(engine: EngineKind, time_us: u64) -> EngineTime {
    EngineTime {
        engine,
        time_us,
        emulated: engine != EngineKind::Cpu,
    }
}

#[test]
fn table_lookup_by_bucket() {
    let mut tab = SelectionTable::default();
    tab.record(Api::Gemm, 10, t(EngineKind::Cpu, 100));
    tab.record(Api::Gemm, 10, t(EngineKind::Gpu, 400));
    tab.record(Api::Gemm, 20, t(EngineKind::Cpu, 90_000));
    tab.record(Api::Gemm, 20, t(EngineKind::Gpu, 11_000));
    tab.record(Api::Sort, 12, t(EngineKind::Cpu, 50));
    let first_of = |tab: &SelectionTable, b| tab.lookup(Api::Gemm, b).map(|r| r.ranked[0].engine);
    let first = |b| first_of(&tab, b);
    assert_eq!(first(10), Some(EngineKind::Cpu));
    assert_eq!(first(20), Some(EngineKind::Gpu));
    assert_eq!(first(3), Some(EngineKind::Cpu), "below: nearest is 10");
    assert_eq!(first(40), Some(EngineKind::Gpu), "above: nearest is 20");
    assert_eq!(first(14), Some(EngineKind::Cpu), "nearest of 10 and 20");
    assert_eq!(first(15), Some(EngineKind::Gpu), "a tie goes to the larger");
    assert!(tab.lookup(Api::Compress, 10).is_none());
    // Re-recording replaces, and re-ranks.
    tab.record(Api::Gemm, 10, t(EngineKind::Gpu, 10));
    assert_eq!(first_of(&tab, 10), Some(EngineKind::Gpu));
    assert_eq!(tab.lookup(Api::Gemm, 10).map(|r| r.ranked.len()), Some(2));
}

#[test]
fn relation_sums_per_engine_and_sorts() {
    let mut a = SelectionTable::default();
    a.record(Api::Gemm, 20, t(EngineKind::Cpu, 1000));
    a.record(Api::Gemm, 20, t(EngineKind::Gpu, 100));
    a.record(Api::Sort, 16, t(EngineKind::Cpu, 50));
    a.record(Api::Sort, 16, t(EngineKind::Gpu, 25));
    let mut b = SelectionTable::default();
    b.record(Api::Gemm, 20, t(EngineKind::Npu, 120));
    b.record(Api::Gemm, 20, t(EngineKind::Cpu, 800)); // faster CPU on slave b
    b.record(Api::Sort, 16, t(EngineKind::Cpu, 60));
    let kind = TaskKind(vec![
        KindPart {
            api: Api::Gemm,
            bucket: 20,
            count: 2,
        },
        KindPart {
            api: Api::Sort,
            bucket: 16,
            count: 3,
        },
    ]);
    let r = relation(&kind, [&a, &b]);
    assert_eq!(
        r,
        vec![
            EngineTotal {
                engine: EngineKind::Gpu,
                total_us: 2 * 100 + 3 * 25
            },
            EngineTotal {
                engine: EngineKind::Cpu,
                total_us: 2 * 800 + 3 * 50
            },
        ],
        "NPU cannot sort, so it is left out"
    );
    assert!(relation(&kind, std::iter::empty::<&SelectionTable>()).is_empty());
}

#[test]
fn kind_is_a_multiset() {
    let p = Program {
        calls: vec![
            ApiCall::new(Api::Sort, 1 << 10, 1),
            ApiCall::new(Api::Gemm, 16, 1),
            ApiCall::new(Api::Sort, 1 << 10, 2),
        ],
    };
    let k = p.kind();
    assert_eq!(k.to_string(), "gemm@2^12x1+sort@2^13x2");
}

#[test]
fn summary_counts_map_in_json() {
    let mut s = CallSummary {
        total: 3,
        ..Default::default()
    };
    s.by_engine.add(EngineKind::Gpu);
    s.by_engine.add(EngineKind::Cpu);
    s.by_engine.add(EngineKind::Cpu);
    let j = serde_json::to_string(&s).expect("json");
    assert_eq!(
        j,
        r#"{"total":3,"forwarded":0,"by_engine":{"cpu":2,"gpu":1}}"#
    );
    let back: CallSummary = serde_json::from_str(&j).expect("back");
    assert_eq!(back, s);
}
