//! The durable Raft log: the write-ahead log ([`wal`]), snapshot files ([`snapshot`]) and the
//! [`LogStore`] that serves both to raft-rs through its `Storage` trait.
//!
//! Architecture invariant: only this module reads or writes files under `member/`.

pub mod snapshot;
mod storage;
pub mod wal;

pub use storage::{LogStore, Opened, memory_usage};
