//! raft-rs logs through `slog`; this drain turns each record into a `tracing` event so Raft's
//! logs land in the same subscriber (and filters) as the rest of hetsched.

use slog::{Drain, Key, OwnedKVList, Record, KV};
use std::fmt::{self, Write as _};

/// Formats a record's message and key/values and emits it as a `tracing` event under the
/// target `raft`.
pub struct TracingDrain;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments) -> slog::Result {
        // Writing into a String cannot fail.
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        let kv = kv.0;
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{kv}")
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{kv}"),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{kv}"),
            slog::Level::Debug => tracing::debug!(target: "raft", "{msg}{kv}"),
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{kv}"),
        }
        Ok(())
    }
}

/// A root logger for raft-rs that writes to `tracing`.
pub fn raft_logger() -> slog::Logger {
    // raft-rs adds `raft_id` to its records itself.
    slog::Logger::root(TracingDrain, slog::o!())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_with_key_values_reach_tracing() {
        let log = raft_logger();
        // No subscriber assertions here: the drain must format every level without failing.
        slog::info!(log, "became leader"; "term" => 3, "raft_id" => 1);
        slog::warn!(log, "slow"; "ms" => 12.5);
        slog::crit!(log, "bad"; "why" => "test");
        let mut kv = KvText(String::new());
        let _ = slog::Serializer::emit_arguments(&mut kv, "term", &format_args!("{}", 3));
        assert_eq!(kv.0, " term=3");
    }
}
