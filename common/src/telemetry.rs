//! Logging setup shared by every binary: `tracing` to stderr, filtered by `HETSCHED_LOG`
//! (or `RUST_LOG`), `info` by default.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls do nothing.
pub fn init_logging(default_level: &str) {
    let filter = std::env::var("HETSCHED_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| default_level.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only for a person at a terminal, never in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
