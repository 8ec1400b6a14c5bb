//! Flush latency of sled: 300 times, insert 200 bytes then flush, with `GAP_MS` of idle time
//! between flushes; prints p50, p90 and min in microseconds.
//!
//! MODE: `sync` (`Db::flush` on a plain thread, as the Raft flush thread does), `async`
//! (`flush_async` awaited on a tokio runtime, as the slave's agent does), `inplace`
//! (`block_in_place(flush)` on a multi-thread runtime).
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let gap_ms: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let mode = args.next().unwrap_or_else(|| "sync".into());
    let dir = std::env::temp_dir().join(format!("bench-sled-flush-{}", std::process::id()));
    let db = sled::open(&dir).expect("open sled");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut xs = rt.block_on(async move {
        let mut xs = Vec::new();
        for i in 0..300u32 {
            db.insert(i.to_be_bytes(), vec![7u8; 200]).expect("insert");
            let t = Instant::now();
            match mode.as_str() {
                "async" => drop(db.flush_async().await.expect("flush")),
                "inplace" => drop(tokio::task::block_in_place(|| db.flush()).expect("flush")),
                _ => drop(db.flush().expect("flush")),
            }
            xs.push(t.elapsed().as_micros());
            tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        }
        xs
    });
    xs.sort_unstable();
    println!("flush us p50 {} p90 {} min {}", xs[150], xs[270], xs[0]);
    let _ = std::fs::remove_dir_all(dir);
}
