use super::*;
use hetsched_common::JobId;

fn rec(task: u64, attempt: u32, user: &str, ended_ms: u64) -> AttemptRecord {
    AttemptRecord {
        job: JobId(1),
        task: TaskId(task),
        attempt,
        user: user.into(),
        partition: "default".into(),
        ended_ms,
        elapsed_s: Some(10.0),
        cpus: 2.0,
        cpu_s: Some(5.0),
        gpu_s: Some(0.0),
        state: "succeeded".into(),
        ..AttemptRecord::default()
    }
}

#[test]
fn a_finish_is_recorded_once_and_old_detail_folds_into_daily_totals() {
    let mut b = AccountingBook::default();
    assert!(b.record(rec(1, 1, "a", 1_000)));
    assert!(!b.record(rec(1, 1, "a", 2_000)), "a repeated report");
    assert!(b.record(rec(2, 1, "b", DAY_MS + 5)));
    let all = b.history(&HistoryFilter::default());
    assert_eq!(all.len(), 2);
    let mine = HistoryFilter {
        user: Some("b".into()),
        ..Default::default()
    };
    assert_eq!(b.history(&mine)[0].task, TaskId(2));
    let since = HistoryFilter {
        since_ms: Some(DAY_MS),
        ..Default::default()
    };
    assert_eq!(b.history(&since).len(), 1);
    let before = b.usage(0, UsageBy::User, None);
    b.fold_before(DAY_MS);
    assert_eq!((b.len(), b.days_len()), (1, 1));
    // Totals stay the same once folded.
    assert_eq!(b.usage(0, UsageBy::User, None), before);
    let a = &before[0];
    assert_eq!((a.key.as_str(), a.tasks), ("a", 1));
    assert!((a.cpu_hours - 20.0 / 3600.0).abs() < 1e-12);
    assert_eq!(a.cpu_efficiency, Some(0.25));
    let days = b.usage(0, UsageBy::Day, None);
    assert_eq!(days[0].key, "1970-01-01");
    assert_eq!(days[1].key, "1970-01-02");
    assert_eq!(b.usage(0, UsageBy::User, Some("b")).len(), 1);
    // Through a snapshot encoding: the same book (its derived keys rebuilt).
    let bytes = rmp_serde::to_vec_named(&b).expect("encode");
    let back: AccountingBook = rmp_serde::from_slice(&bytes).expect("decode");
    assert_eq!(back, b);
    assert!(!back.clone().record(rec(2, 1, "b", DAY_MS + 9)));
}

#[test]
fn day_text_is_the_utc_date() {
    assert_eq!(day_text(0), "1970-01-01");
    assert_eq!(day_text(20_454), "2026-01-01");
    assert_eq!(day_text(11_016), "2000-02-29");
}
