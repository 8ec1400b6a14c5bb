use super::*;

#[test]
fn proposals_are_counted_and_recorded_ones_remembered() {
    let mut book = BenchBook::default();
    for seq in 0..4 {
        book.apply(3, seq, seq % 2 == 0);
    }
    book.apply(4, 0, false);
    let c = &book.counters()[&3];
    assert_eq!(c.applied, 4);
    assert_eq!(c.recorded, [0, 2].into());
    assert!(book.counters()[&4].recorded.is_empty());
}
