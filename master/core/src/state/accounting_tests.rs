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

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// BENCHMARKS.md "Accounting records": 1,000,000 records (100 users, one ended every 10 ms
/// over about 2.8 hours) — memory, `history --since 1h` and `usage --by user` answer times in
/// the book, snapshot bytes. `cargo test --release -p hetsched-master-core --lib
/// million_records -- --ignored --nocapture`.
#[test]
#[ignore]
fn million_records_figures() {
    use std::time::Instant;
    const N: u64 = 1_000_000;
    let before = rss_bytes();
    let mut b = AccountingBook::default();
    let t0 = Instant::now();
    for i in 0..N {
        let mut r = rec(i, 1, &format!("user-{}", i % 100), i * 10);
        r.max_mem_mib = Some(300);
        r.started_ms = Some(i * 10 - i.min(5));
        b.record(r);
    }
    let built = t0.elapsed();
    let after = rss_bytes();
    let end = N * 10;
    let t1 = Instant::now();
    let h = b.history(&HistoryFilter {
        since_ms: Some(end - 3_600_000),
        ..Default::default()
    });
    let history = t1.elapsed();
    let t2 = Instant::now();
    let all = b.history(&HistoryFilter {
        user: Some("user-7".into()),
        ..Default::default()
    });
    let history_user = t2.elapsed();
    let t3 = Instant::now();
    let u = b.usage(0, UsageBy::User, None);
    let usage = t3.elapsed();
    let t4 = Instant::now();
    let bytes = rmp_serde::to_vec_named(&b).expect("encode").len();
    let encode = t4.elapsed();
    println!(
        "records {N}: built in {built:?}; resident +{} MiB ({} bytes a record); \
         history --since 1h: {} records in {history:?}; history --user (all time): {} in \
         {history_user:?}; usage --by user: {} users in {usage:?}; snapshot part {} MiB \
         ({} bytes a record) encoded in {encode:?}",
        (after.saturating_sub(before)) >> 20,
        after.saturating_sub(before) / N,
        h.len(),
        all.len(),
        u.len(),
        bytes >> 20,
        bytes as u64 / N
    );
    assert_eq!(h.len(), 360_000);
}

#[test]
fn fair_share_decays_usage_and_ranks_the_heavier_user_lower() {
    const H: u64 = 30_000;
    let none = BTreeMap::new();
    assert!((decay(8.0, 0, 3 * H, H) - 1.0).abs() < 1e-12);
    assert_eq!(decay(8.0, 10, 5, H), 8.0, "never grown");
    let mut b = AccountingBook::default();
    let used = |task, user: &str, at, d| AttemptRecord {
        dominant_s: Some(d),
        ..rec(task, 1, user, at)
    };
    b.charge(&used(1, "a", 0, 300.0), H);
    b.charge(&used(2, "b", 0, 100.0), H);
    let f = b.fair_share(0, H, &none);
    let (a, bb) = (&f[0], &f[1]);
    assert_eq!((a.user.as_str(), bb.user.as_str()), ("a", "b"));
    // Ū: 0.75 and 0.25 of the usage, S = 1/2 each: F = 2^-1.5 and 2^-0.5.
    assert!((a.factor - (-1.5f64).exp2()).abs() < 1e-12, "{f:?}");
    assert!((bb.factor - (-0.5f64).exp2()).abs() < 1e-12, "{f:?}");
    // Later use counts more than earlier: b's recent 200 outweighs a's 300 two half-lives ago.
    b.charge(&used(3, "b", 2 * H, 200.0), H);
    let f = b.fair_share(2 * H, H, &none);
    assert!((f[0].decayed_usage - 75.0).abs() < 1e-9, "{f:?}");
    assert!((f[1].decayed_usage - 225.0).abs() < 1e-9, "{f:?}");
    assert!(f[0].factor > f[1].factor, "{f:?}");
    // Nobody used anything: every factor is 1.
    let empty = AccountingBook::default();
    assert!(empty.fair_share(0, H, &none).is_empty());
    let mut idle = AccountingBook::default();
    idle.charge(&used(4, "c", 0, 0.0), H);
    assert_eq!(idle.fair_share(0, H, &none)[0].factor, 1.0);
    // Through a snapshot encoding, the decayed usage stays.
    let back: AccountingBook =
        rmp_serde::from_slice(&rmp_serde::to_vec_named(&b).expect("encode")).expect("decode");
    assert_eq!(
        back.fair_share(2 * H, H, &none),
        b.fair_share(2 * H, H, &none)
    );
}

/// While the cluster idles, every factor recovers towards 1: Ū is a share of the larger of
/// the users' decayed usage and the cluster's decayed capacity (h / ln 2 whole-cluster
/// seconds), so uniform decay does not freeze the ratios between users.
#[test]
fn factors_recover_while_the_cluster_idles() {
    const H: u64 = 30_000;
    let none = BTreeMap::new();
    let cap = decayed_capacity_s(H);
    assert!((cap - 30.0 / std::f64::consts::LN_2).abs() < 1e-9);
    let mut b = AccountingBook::default();
    let used = |task, user: &str, d| AttemptRecord {
        dominant_s: Some(d),
        ..rec(task, 1, user, 0)
    };
    // 20 s and 5 s of the whole cluster: less than its 43.3 s of decayed capacity.
    b.charge(&used(1, "a", 20.0), H);
    b.charge(&used(2, "b", 5.0), H);
    let f = b.fair_share(0, H, &none);
    let expect = |u: f64| (-(u / cap) / 0.5).exp2();
    assert!((f[0].factor - expect(20.0)).abs() < 1e-12, "{f:?}");
    assert!((f[1].factor - expect(5.0)).abs() < 1e-12, "{f:?}");
    assert!(
        f[0].factor < 0.9 * f[1].factor,
        "a is well behind at first: {f:?}"
    );
    // Four half-lives (2 minutes) later both recovered, a to within 10 % of b.
    let later = b.fair_share(4 * H, H, &none);
    assert!(later[0].factor > f[0].factor && later[1].factor > f[1].factor);
    assert!(later[0].factor >= 0.9 * later[1].factor, "{later:?}");
}

/// A user's share S is its `[shares]` weight (default 1) over the weights of the users with
/// usage: with a weight of 3 against 1, a user using 3 times as much has the same factor.
#[test]
fn shares_weigh_the_factor() {
    const H: u64 = 30_000;
    let mut b = AccountingBook::default();
    let used = |task, user: &str, d| AttemptRecord {
        dominant_s: Some(d),
        ..rec(task, 1, user, 0)
    };
    b.charge(&used(1, "a", 300.0), H);
    b.charge(&used(2, "b", 100.0), H);
    let equal = b.fair_share(0, H, &BTreeMap::new());
    assert!(equal[0].factor < equal[1].factor, "{equal:?}");
    assert_eq!((equal[0].share, equal[1].share), (Some(0.5), Some(0.5)));
    let weighted = b.fair_share(0, H, &BTreeMap::from([("a".to_string(), 3)]));
    assert_eq!(
        (weighted[0].share, weighted[1].share),
        (Some(0.75), Some(0.25))
    );
    // Ū 0.75 over S 0.75, Ū 0.25 over S 0.25: both F = 2^-1.
    assert!((weighted[0].factor - 0.5).abs() < 1e-12, "{weighted:?}");
    assert!((weighted[1].factor - 0.5).abs() < 1e-12, "{weighted:?}");
}
