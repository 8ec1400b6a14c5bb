use super::*;
use hetsched_common::program::{Api, ApiCall, EngineTime, Program, SelectionTable};
use hetsched_common::EngineKind;

fn table(engine: EngineKind, time_us: u64) -> SelectionTable {
    let mut t = SelectionTable::default();
    let call = ApiCall::new(Api::Sort, 1000, 1);
    t.record(
        Api::Sort,
        call.bucket(),
        EngineTime {
            engine,
            time_us,
            emulated: engine != EngineKind::Cpu,
        },
    );
    t
}

fn profile(engine: EngineKind, time_us: u64) -> NodeProfile {
    NodeProfile {
        engines: Vec::new(),
        table: table(engine, time_us),
    }
}

fn kind() -> TaskKind {
    Program {
        calls: vec![ApiCall::new(Api::Sort, 1000, 1)],
    }
    .kind()
}

#[test]
fn a_kind_learned_before_any_profile_has_an_empty_relation() {
    let mut book = ProfileBook::default();
    book.learn_kind(kind());
    assert_eq!(book.relations()[&kind()], vec![]);
}

#[test]
fn each_recorded_profile_rebuilds_the_relation_of_every_known_kind() {
    let mut book = ProfileBook::default();
    book.learn_kind(kind());
    book.record(NodeId(1), profile(EngineKind::Cpu, 100));
    let one = book.relations()[&kind()].clone();
    assert!(!one.is_empty());
    book.record(NodeId(2), profile(EngineKind::Gpu, 10));
    let two = &book.relations()[&kind()];
    assert_ne!(&one, two, "the second table counts");
    assert_eq!(two[0].engine, EngineKind::Gpu, "fastest first");
    // Re-recording a node replaces its profile.
    book.record(NodeId(2), profile(EngineKind::Gpu, 10));
    assert_eq!(book.profiles().len(), 2);
}

#[test]
fn the_cpu_history_keeps_the_last_count_per_class() {
    let mut book = ProfileBook::default();
    book.record_cpu(TaskClass::Nlp, 2000);
    book.record_cpu(TaskClass::Nlp, 3000);
    assert_eq!(book.cpu_history()[&TaskClass::Nlp], 3000);
    assert_eq!(book.cpu_history().len(), 1);
}
