//! The master's network runtime: a small multi-threaded tokio runtime that serves the
//! cluster port (TLS handshakes, frame decoding, request handling), so that none of that
//! work waits behind the duties actor on the actix System thread, nor holds it up. Frames
//! of one connection still reach the handler in order up to its first wait (the framed
//! server polls each handler once before it goes on reading), which Raft needs. The
//! per-slave dispatch senders stay on the System thread: their calls must leave in the
//! order the duties issued them.
//!
//! Why: on one thread, a leader dispatching to thousands of slaves made their TLS
//! handshakes, every heartbeat and every plan take turns; heartbeats then waited past the
//! node timeout and live nodes were declared down (BENCHMARKS.md#bench-scale). Requests
//! reach the actors through their addresses (thread-safe) and the shared state through its
//! lock, so they run the same from any thread.

use std::future::Future;
use std::sync::OnceLock;

/// Most worker threads: more would only compete with Raft and the duties for the cores.
const MAX_THREADS: usize = 4;

static NET: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    NET.get_or_init(|| {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, MAX_THREADS);
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("hetsched-net")
            .enable_all()
            .build()
        {
            Ok(rt) => Some(rt),
            Err(e) => {
                tracing::warn!(error = %e, "no network runtime; serving on the actor thread");
                None
            }
        }
    })
    .as_ref()
}

/// Runs `fut` on the network runtime (on the caller's runtime when that could not start).
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime() {
        Some(rt) => rt.spawn(fut),
        None => tokio::spawn(fut),
    }
}
