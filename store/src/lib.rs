//! Capstan's store: a replicated MVCC key-value store with etcd's data model and API.
//!
//! Data flows one way: a client request arrives at the etcd v3 gRPC API ([`api`]), writes are
//! encoded as a [`command::RaftCommand`] and proposed to the Raft driver ([`node`]), which
//! persists them in the write-ahead log ([`log`]) before anything else happens, then applies
//! committed commands to the MVCC state machine ([`mvcc`]) and acknowledges the proposer.
//! Watchers (`api::watch`) pull events out of the state machine's history, so a slow watcher
//! catches up instead of losing events.
//!
//! [`server::run`] wires these together for `capstan store`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod api;
pub mod authority;
pub mod backend;
pub mod command;
pub mod config;
pub mod error;
pub mod lease;
pub mod log;
pub mod metrics;
pub mod mvcc;
pub mod node;
pub mod remote;
pub mod restore;
pub mod server;
pub mod transport;

pub use config::StoreConfig;
pub use error::{Result, StoreError};

/// The etcd v3 protobuf types (messages and tonic service traits), generated from etcd's own
/// `.proto` files by the `etcd-client` crate (feature `build-server`).
pub use etcd_client::proto as pb;
