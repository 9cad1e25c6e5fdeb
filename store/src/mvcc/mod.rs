//! The MVCC state machine: etcd's multi-version key-value model, in memory.
//!
//! Every committed write transaction increments a store-wide main revision; each key keeps
//! the list of its versions (a delete adds a tombstone that ends a "generation"), so reads at
//! an older revision and watch replays are served from memory until compaction drops history.
//! Durability is not this module's job: the Raft log and snapshots (`crate::log`) rebuild
//! this state on restart. Nothing here knows about Raft.
//!
//! Architecture invariant: applying the same commands in the same order gives the same state
//! and the same results on every member (no clocks, no randomness).

mod cluster;
mod codec;
mod kv;
mod mirror;
mod rev_index;
mod revision;
mod shared_value;
mod view;

pub use cluster::{ClusterRecord, MemberChange, MemberRecord};
pub use codec::Image;
pub use kv::{Event, KeyRange, Mvcc, Usage};
pub use revision::Revision;
pub use view::{SharedChange, SharedKv};
