//! The one bridge from raft-rs's `slog` logging into `tracing` (target `raft`).

use std::fmt::{self, Write as _};

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        let mut kv = KvText(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut kv);
        let _ = slog::KV::serialize(values, record, &mut kv);
        let msg = record.msg();
        let kv = kv.0;
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{kv}")
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{kv}"),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{kv}"),
            slog::Level::Debug | slog::Level::Trace => tracing::debug!(target: "raft", "{msg}{kv}"),
        }
        Ok(())
    }
}

/// A `slog::Logger` whose records come out as `tracing` events.
pub(crate) fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}
